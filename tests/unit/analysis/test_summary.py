"""A session's headline figures, and whole-run comparisons, against values computed here."""

from __future__ import annotations

import dataclasses
import json
import re

import pytest

from logkit.analysis.kernels.headline import session_summary as typed_summary
from logkit.analysis.kernels.scaling import scaling_analysis
from logkit.analysis.results import SessionSummary, plain
from logkit.run.load import load_session, load_sessions
from tests.support.launch import REPO
from tests.support.synth import write_session

SINGLE_TIMES = [0.50, 0.52, 0.48, 0.50, 0.55, 0.45, 0.50, 0.50]
MULTI_TIMES = [0.30, 0.28, 0.27, 0.29, 0.31, 0.25, 0.30, 0.28]


def session_summary(session) -> dict:
    return plain(typed_summary(session))


def compare(sessions) -> list[dict]:
    """Each comparison's whole-run figures (every logged step, warm-up included), by the JSON's names."""
    out = []
    for c in scaling_analysis(sessions).comparisons:
        out.append({"baseline": c.baseline, "candidate": c.candidate, "regime": c.regime,
                    **dataclasses.asdict(c.whole_run)})
    return out


def _pair(tmp_path, single_batch=8, multi_batch=8, multi_ws=2):
    write_session(tmp_path, "single", world_size=1, step_times=SINGLE_TIMES, total_batch_size=single_batch,
                  start="2026-11-22T01:00:00.000000+00:00")
    write_session(tmp_path, "multi", world_size=multi_ws, step_times=MULTI_TIMES, total_batch_size=multi_batch,
                  start="2026-11-22T02:00:00.000000+00:00")
    return load_sessions(tmp_path)


def test_session_summary_figures(tmp_path):
    losses = [3.0, 2.8, None, 2.5, 2.4, 2.2, 2.1, None]
    folder = write_session(tmp_path, "s", step_times=SINGLE_TIMES, total_batch_size=8, losses=losses)
    summary = session_summary(load_session(folder))
    assert list(summary)[:20] == [f.name for f in dataclasses.fields(SessionSummary)][:20]
    total = sum(SINGLE_TIMES)
    assert summary["samples_per_second"] == pytest.approx(8 * len(SINGLE_TIMES) / total)
    assert summary["steps_per_second"] == pytest.approx(len(SINGLE_TIMES) / total)
    assert summary["total_steps"] == 8 and summary["total_batch_size"] == 8
    assert summary["final_loss"] == 2.1  # the last step that logged a loss
    assert summary["duration_s"] == pytest.approx(1.0 + total + 0.5)
    assert (summary["mode"], summary["world_size"], summary["gpu_count"]) == ("CPU", 1, 0)


def test_only_rank0_rows_count(tmp_path):
    write_session(tmp_path, "m", world_size=3, step_times=MULTI_TIMES, total_batch_size=12)
    summary = session_summary(load_session(tmp_path / "m"))
    assert summary["samples_per_second"] == pytest.approx(12 * 8 / sum(MULTI_TIMES))


def test_speedup_is_a_throughput_ratio(tmp_path):
    sessions = _pair(tmp_path)
    (c,) = compare(sessions)
    base_tput = 8 * len(SINGLE_TIMES) / sum(SINGLE_TIMES)
    cand_tput = 8 * len(MULTI_TIMES) / sum(MULTI_TIMES)
    assert (c["baseline"], c["candidate"]) == ("single", "multi")
    assert c["speedup"] == pytest.approx(cand_tput / base_tput)
    assert c["scaling_efficiency"] == pytest.approx(cand_tput / base_tput / 2)
    assert c["regime"] == "strong"
    assert c["step_rate_ratio"] == pytest.approx(sum(SINGLE_TIMES) / sum(MULTI_TIMES))


def test_weak_scaling_speedup_differs_from_step_rate(tmp_path):
    sessions = _pair(tmp_path, single_batch=4, multi_batch=8)
    (c,) = compare(sessions)
    assert c["regime"] == "weak"
    expected = (8 * 8 / sum(MULTI_TIMES)) / (4 * 8 / sum(SINGLE_TIMES))
    assert c["speedup"] == pytest.approx(expected)
    assert c["step_rate_ratio"] == pytest.approx(expected / 2)  # the global batch doubled


def test_mixed_regime_and_order_independence(tmp_path):
    sessions = _pair(tmp_path, single_batch=4, multi_batch=6)
    (c,) = compare(list(reversed(sessions)))
    assert c["regime"] == "mixed" and c["baseline"] == "single"


def test_baseline_tie_goes_to_earliest_start(tmp_path):
    write_session(tmp_path, "b_later", step_times=[0.5] * 4, start="2026-11-22T03:00:00+00:00")
    write_session(tmp_path, "a_earlier", step_times=[0.25] * 4, start="2026-11-22T01:00:00+00:00")
    write_session(tmp_path, "c_four", world_size=4, step_times=[0.2] * 4, total_batch_size=32,
                  start="2026-11-22T00:00:00+00:00")
    comps = compare(load_sessions(tmp_path))
    assert [c["baseline"] for c in comps] == ["a_earlier", "a_earlier"]
    by_cand = {c["candidate"]: c for c in comps}
    assert by_cand["b_later"]["speedup"] == pytest.approx(0.5)
    assert by_cand["b_later"]["scaling_efficiency"] == pytest.approx(0.5)
    four = by_cand["c_four"]
    assert four["speedup"] == pytest.approx((32 / 0.2) / (8 / 0.25))
    assert four["scaling_efficiency"] == pytest.approx(four["speedup"] / 4)
    assert four["regime"] == "weak"


def test_summary_json_fallback_without_steps(tmp_path):
    write_session(tmp_path, "only", world_size=2, step_times=[0.25] * 8, total_batch_size=8, jsonl=False)
    summary = session_summary(load_session(tmp_path / "only"))
    assert summary["samples_per_second"] == pytest.approx(8 * 8 / 2.0)
    assert summary["steps_per_second"] == pytest.approx(8 / 2.0)
    assert summary["total_steps"] == 8 and summary["total_batch_size"] == 8


def test_no_figures_give_none_not_errors(tmp_path):
    empty = tmp_path / "e"
    empty.mkdir()
    summary = session_summary(load_session(empty))
    assert summary["samples_per_second"] is None and summary["total_steps"] is None
    assert compare([]) == []


SAMPLES = REPO / "sample_logs"


def test_rank_folder_final_loss_is_the_last_logged_loss():
    folder = SAMPLES / "rank_dirs" / "logs"
    text = (folder / "rank_0" / "train.log").read_text(encoding="utf-8")
    losses = [float(x) for x in re.findall(r"\{'loss': ([\d.]+)", text)]
    summary = session_summary(load_session(folder))
    assert losses and summary["final_loss"] == losses[-1]
    assert summary["final_loss_from"] == "last logged loss"


def test_run_folder_global_batch_derived_from_the_runs_figures():
    sessions = load_sessions(SAMPLES / "pipeline_sessions")
    by_id = {s.session_id: s for s in sessions}
    expected = {}
    for sid in ("v1/single_gpu", "v1/multi_gpu"):
        folder = SAMPLES / "pipeline_sessions" / "sessions" / sid
        state = json.loads((folder / "trainer_state.json").read_text(encoding="utf-8"))
        final = state["log_history"][-1]
        results = json.loads((folder / "results.json").read_text(encoding="utf-8"))
        sps = results.get("steps_per_second", final["train_steps_per_second"])
        samples = results.get("samples_per_second", final["train_samples_per_second"])
        expected[sid] = round(samples / sps)
        summary = session_summary(by_id[sid])
        assert summary["total_batch_size"] == expected[sid]
        assert summary["total_batch_size_from"] == "derived: samples/s / steps/s"
    (c,) = compare(sessions)
    per_rank = {sid: expected[sid] / session_summary(by_id[sid])["world_size"] for sid in expected}
    regime = "strong" if expected["v1/single_gpu"] == expected["v1/multi_gpu"] else \
        "weak" if per_rank["v1/single_gpu"] == per_rank["v1/multi_gpu"] else "mixed"
    assert c["regime"] == regime != "unknown"
