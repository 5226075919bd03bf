"""Scaling section: steady state, bootstrap interval, flags, Amdahl / Karp-Flatt fit, groups."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

from logkit.analysis import analyze
from logkit.analysis.kernels.amdahl import amdahl_fit as typed_fit
from logkit.analysis.kernels.headline import session_summary as typed_summary
from logkit.analysis.kernels.scaling import scaling_analysis as typed_scaling
from logkit.analysis.kernels.throughput import warmup_count
from logkit.analysis.results import plain
from logkit.analysis.thresholds import MIN_R2
from logkit.run.load import load_session, load_sessions
from tests.support.analysis_synth import noisy, session, step_rows
from tests.support.launch import REPO
from tests.support.oracles import regime, warmup_oracle

FIXTURES = "sample_logs/qlora_tiny_cpu/logs"


# The results as the JSON gives them: the assertions below read the figures users read.
def scaling_analysis(sessions, context=None) -> dict:
    return typed_scaling(sessions, context).to_dict()


def amdahl_fit(points, base_ws):
    return plain(typed_fit(points, base_ws))


def session_summary(session) -> dict:
    return plain(typed_summary(session))
SAMPLES = REPO / "sample_logs"
SEED000 = SAMPLES / "text_logs" / "logs" / "training_20241206_143022"


def test_seed_example_from_summary_figures():
    # seed 000: 1200.5 s against 650.2 s for the same samples (1000 steps x batch 8) on 2 GPUs
    single = session("single", world_size=1, duration_s=1200.5, total_steps=1000, total_batch_size=8,
                     start_time="2024-12-06T14:00:00")
    multi = session("multi", world_size=2, duration_s=650.2, total_steps=1000, total_batch_size=8,
                    start_time="2024-12-06T14:30:22")
    (c,) = scaling_analysis([multi, single])["comparisons"]
    assert c["baseline"] == "single"
    assert round(c["speedup"], 2) == 1.85 and c["speedup"] == pytest.approx(1200.5 / 650.2)
    assert round(c["scaling_efficiency"] * 100, 1) == 92.3
    assert c["steady_state"] is False and c["speedup_ci"] is None and c["steady_speedup"] is None
    assert c["basis"] == "whole run" and c["whole_run_speedup"] == c["speedup"]  # only totals: the whole run
    assert c["flags"] == []


def test_warmup_found_and_left_out():
    times = noisy(200, 0.5, 0.005, warm=(3.0, 1.5, 0.9))
    assert warmup_count(np.array(times)) == 3
    assert warmup_count(np.array(noisy(200, 0.5, 0.005))) == 0
    assert warmup_count(np.array([0.5, 0.5, 0.5])) == 0  # too short to tell


def test_steady_speedup_and_ci():
    bt = noisy(300, 0.50, 0.01, seed=1, warm=(5.0, 2.0))
    ct = noisy(300, 0.30, 0.01, seed=2, warm=(6.0,))
    base = session("b", steps=step_rows(bt, batch=8), start_time="2026-01-01T00:00:00+00:00")
    cand = session("c", world_size=2, steps=step_rows(ct, batch=8), start_time="2026-01-01T01:00:00+00:00")
    out = scaling_analysis([base, cand])
    rows = {r["session_id"]: r for r in out["sessions"]}
    assert (rows["b"]["warmup_steps"], rows["c"]["warmup_steps"]) == (2, 1)
    steady_b, steady_c = 8 * 298 / sum(bt[2:]), 8 * 299 / sum(ct[1:])
    assert rows["b"]["steady_samples_per_second"] == pytest.approx(steady_b)
    (c,) = out["comparisons"]
    # the headline is the steady state; the whole run stands beside, labelled
    assert c["basis"] == "steady state"
    assert c["speedup"] == pytest.approx(steady_c / steady_b)
    assert c["scaling_efficiency"] == pytest.approx(steady_c / steady_b / 2)
    assert c["step_rate_ratio"] == pytest.approx((299 / sum(ct[1:])) / (298 / sum(bt[2:])))
    assert c["whole_run_speedup"] == pytest.approx((8 * 300 / sum(ct)) / (8 * 300 / sum(bt)))
    assert c["whole_run_scaling_efficiency"] == pytest.approx(c["whole_run_speedup"] / 2)
    assert c["whole_run_speedup"] < c["speedup"] - 0.01  # the warm-up weighs on the whole-run figure
    assert c["steady_speedup"] == pytest.approx(steady_c / steady_b)
    assert c["steady_scaling_efficiency"] == pytest.approx(steady_c / steady_b / 2)
    lo, hi = c["speedup_ci"]
    assert lo < c["steady_speedup"] < hi and hi - lo < 0.1
    assert c["ci_level"] == 0.95 and c["steady_state"] is True
    assert [f["kind"] for f in c["flags"]] == []  # 1.67x on 2 ranks


def test_slowdown_flag_names_communication():
    base = session("b", steps=step_rows([0.5] * 50), start_time="2026-01-01T00:00:00+00:00")
    cand = session("c", world_size=2, steps=step_rows([1.2] * 50), start_time="2026-01-01T01:00:00+00:00")
    (c,) = scaling_analysis([base, cand], {"c": {"sync_share": 0.6}})["comparisons"]
    (flag,) = c["flags"]
    assert flag["kind"] == "slowdown" and "communication-bound" in flag["cause"]


def test_superlinear_flag_names_batch_mismatch():
    base = session("b", steps=step_rows([0.5] * 50, batch=8), start_time="2026-01-01T00:00:00+00:00")
    cand = session("c", world_size=2, steps=step_rows([0.5] * 50, batch=24), start_time="2026-01-01T01:00:00+00:00")
    (c,) = scaling_analysis([base, cand])["comparisons"]
    assert c["regime"] == "mixed" and c["speedup"] == pytest.approx(3.0)
    (flag,) = c["flags"]
    assert flag["kind"] == "superlinear" and "not comparable" in flag["cause"]


def test_amdahl_fit_recovers_serial_fraction():
    s = 0.1
    sp = {n: 1 / (s + (1 - s) / n) for n in (2, 4, 8)}
    fit = typed_fit([(n, float(n), v) for n, v in sp.items()], base_ws=1)
    assert fit.serial_fraction == pytest.approx(s)
    assert fit.r2 == pytest.approx(1.0)
    assert fit.karp_flatt == {n: pytest.approx(s) for n in (2, 4, 8)}
    assert fit.predicted == {16: pytest.approx(1 / (s + (1 - s) / 16)), 32: pytest.approx(1 / (s + (1 - s) / 32))}
    assert amdahl_fit([(2, 2.0, 1.8)], base_ws=1) is None  # two world sizes: no fit


def test_fit_from_sessions_and_karp_flatt():
    sessions = [session("w1", steps=step_rows([1.0] * 20, batch=8), start_time="2026-01-01T00:00:00+00:00")]
    for n, t in ((2, 0.55), (4, 0.30)):
        sessions.append(session(f"w{n}", world_size=n, steps=step_rows([t] * 20, batch=8),
                                start_time=f"2026-01-01T0{n}:00:00+00:00"))
    fit = typed_scaling(sessions).fit
    # Karp-Flatt computed here from the speedups 1/0.55 and 1/0.30
    for n, t in ((2, 0.55), (4, 0.30)):
        assert fit.karp_flatt[n] == pytest.approx((t - 1 / n) / (1 - 1 / n))
    x = np.array([0.5, 0.75])
    y = np.array([0.55 - 0.5, 0.30 - 0.25])
    assert fit.serial_fraction == pytest.approx((x * y).sum() / (x * x).sum())
    assert set(fit.predicted) == {8, 16}


def _rank0_steps(folder: Path) -> list[dict]:
    """Rank 0's training_step_complete records, read here with json (not through logkit)."""
    (path,) = folder.glob("*_rank0.jsonl")
    out = []
    for line in path.read_text(encoding="utf-8").splitlines():
        r = json.loads(line)
        if r["type"] == "training_step_complete":
            out.append({"step": r["step"], "t": r["timing"]["step_time_seconds"],
                        "batch": r["metrics"]["total_batch_size"]})
    return sorted(out, key=lambda x: x["step"])


def test_real_fixture_comparison():
    sessions = load_sessions(FIXTURES)
    a = analyze(sessions)
    (c,) = a.scaling.to_dict()["comparisons"]
    by_id = {s.session_id: Path(s.meta["folder"]) for s in sessions}
    single, multi = _rank0_steps(by_id[c["baseline"]]), _rank0_steps(by_id[c["candidate"]])
    base = sum(x["batch"] for x in single) / sum(x["t"] for x in single)
    cand = sum(x["batch"] for x in multi) / sum(x["t"] for x in multi)
    assert c["whole_run_speedup"] == pytest.approx(cand / base)
    kb, kc = (warmup_oracle([x["t"] for x in run]) for run in (single, multi))
    steady_b = sum(x["batch"] for x in single[kb:]) / sum(x["t"] for x in single[kb:])
    steady_c = sum(x["batch"] for x in multi[kc:]) / sum(x["t"] for x in multi[kc:])
    assert c["basis"] == "steady state" and c["speedup"] == pytest.approx(steady_c / steady_b)
    assert c["scaling_efficiency"] == pytest.approx(steady_c / steady_b / 2)
    assert c["regime"] == regime(single[0]["batch"], 1, multi[0]["batch"], 2)
    assert c["samples_ratio"] == pytest.approx(sum(x["batch"] for x in multi) / sum(x["batch"] for x in single))
    assert c["speedup_ci"][0] < c["steady_speedup"] < c["speedup_ci"][1]
    assert a.definitions["steady_speedup"]


def test_text_logs_sampled_lines_take_the_summary_totals():
    """seed 000's session: two sampled step lines in main.log, summary.json of the completed run."""
    s = load_session(SEED000)
    doc = json.loads((SEED000 / "training_20241206_143022_summary.json").read_text(encoding="utf-8"))
    main = (SEED000 / "training_20241206_143022_main.log").read_text(encoding="utf-8")
    lines = re.findall(r"^Step\s+(\d+)/(\d+).*Loss: ([\d.]+)", main, re.M)
    assert 0 < len(lines) < doc["total_steps"]  # the fixture is what the test says it is
    out = session_summary(s)
    assert out["total_steps"] == doc["total_steps"]
    assert out["final_loss"] == doc["final_loss"] and out["final_loss"] != float(lines[-1][2])
    assert out["steps_per_second"] == doc["steps_per_second"]
    assert out["samples_per_second"] == doc["samples_per_second"]
    assert out["total_batch_size"] == doc["total_batch_size"]
    assert out["basis"] == "run totals" and out["logged_steps"] == len(lines)
    assert "summary.json" in out["basis_detail"] and "sampled" in out["basis_detail"]
    assert f"{len(lines)} of {doc['total_steps']}" in out["basis_detail"]


def test_complete_step_rows_keep_the_steps_basis():
    s = session("c", steps=step_rows([0.5] * 10, batch=8), total_steps=10, steps_per_second=99.0,
                samples_per_second=999.0)
    out = session_summary(s)
    assert out["basis"] == "steps" and out["samples_per_second"] == pytest.approx(16.0)


def test_sampled_rows_without_totals_are_an_estimate_and_said_so():
    rows = step_rows([0.5, 0.6, 0.4, 0.5], batch=8)
    for r, step in zip(rows, (50, 100, 150, 200), strict=True):
        r["step"] = step
    out = session_summary(session("e", steps=rows, total_steps=1000))
    assert out["basis"] == "sampled steps" and out["total_steps"] == 1000
    assert out["samples_per_second"] == pytest.approx(32 / 2.0)


def test_sessions_of_different_models_are_not_compared():
    tiny = session("tiny", steps=step_rows([0.01] * 20, batch=16), model="tiny-llama",
                   start_time="2026-01-01T00:00:00+00:00")
    big1 = session("big1", steps=step_rows([1.0] * 20, batch=8), model="Qwen/Qwen2-7B",
                   start_time="2026-01-01T01:00:00+00:00")
    big2 = session("big2", world_size=2, steps=step_rows([0.55] * 20, batch=8), model="qwen/qwen2-7b",
                   start_time="2026-01-01T02:00:00+00:00")
    smi = session("smi", gpu=[], formats=["nvidia_smi_csv"])
    out = scaling_analysis([tiny, big1, big2, smi])
    (c,) = out["comparisons"]
    assert (c["baseline"], c["candidate"]) == ("big1", "big2")  # case-insensitive model match
    assert c["speedup"] == pytest.approx(1 / 0.55)
    reasons = {r["session_id"]: r["reason"] for r in out["not_compared"]}
    assert set(reasons) == {"tiny", "smi"}
    assert "tiny-llama" in reasons["tiny"] and "GPU capture" in reasons["smi"]
    assert sorted(g["baseline"] for g in out["groups"]) == ["big1", "tiny"]


def test_sequence_length_splits_a_model_and_fills_in_where_unlogged():
    def run(sid, ws, t, seq):
        return session(sid, world_size=ws, steps=step_rows([t] * 20, batch=8), model="m", seq_len=seq,
                       start_time=f"2026-01-01T0{ws}:00:00+00:00")
    out = scaling_analysis([run("a", 1, 1.0, 512), run("b", 2, 0.6, None), run("c", 2, 0.6, 2048)])
    assert out["comparisons"] == [] or all(c["candidate"] != "c" for c in out["comparisons"])
    groups = {tuple(g["members"]) for g in out["groups"]}
    assert ("c",) in groups  # seq 2048 is not compared with seq 512
    # "b" logs no length and its model's runs disagree (512, 2048): it stays apart too
    assert not any(set(g) >= {"a", "b"} for g in groups)
    out = scaling_analysis([run("a", 1, 1.0, 512), run("b", 2, 0.6, None)])
    (c,) = out["comparisons"]
    assert (c["baseline"], c["candidate"]) == ("a", "b")


def test_weak_scaling_is_not_blamed_on_step_counts():
    # same per-rank batch, same steps: the candidate sees 2x the samples, which is what weak scaling is
    base = session("b", steps=step_rows([0.5] * 50, batch=8), start_time="2026-01-01T00:00:00+00:00",
                   samples_seen=400)
    cand = session("c", world_size=2, steps=step_rows([1.2] * 50, batch=16), start_time="2026-01-01T01:00:00+00:00",
                   samples_seen=800)
    (c,) = scaling_analysis([base, cand])["comparisons"]
    assert c["regime"] == "weak" and c["samples_ratio"] == pytest.approx(2.0)
    (flag,) = c["flags"]
    assert flag["kind"] == "slowdown"
    assert not any("step count" in x or "differ in length" in x for x in flag["causes"])
    assert flag["causes"] == ["no cause found in the logs: compare per-rank step times and data loading"]


def test_equal_rank_counts_are_compared_but_not_flagged():
    a = session("a", steps=step_rows([0.50] * 30), start_time="2026-01-01T00:00:00+00:00")
    b = session("b", steps=step_rows([0.51] * 30), start_time="2026-01-01T01:00:00+00:00")
    (c,) = scaling_analysis([a, b])["comparisons"]
    assert c["speedup"] == pytest.approx(0.5 / 0.51) and c["flags"] == [] and c["rank_ratio"] == 1


def test_amdahl_refuses_to_predict_from_superlinear_points():
    fit = amdahl_fit([(2, 2.0, 2.3), (4, 4.0, 4.4)], base_ws=1)
    x, y = np.array([0.5, 0.75]), np.array([1 / 2.3 - 0.5, 1 / 4.4 - 0.25])
    assert fit["serial_fraction_raw"] == pytest.approx((x * y).sum() / (x * x).sum()) and fit["serial_fraction"] == 0
    assert fit["predicted"] is None and fit["reliable"] is False
    assert fit["superlinear_world_sizes"] == [2, 4] and "superlinear" in fit["note"]


def test_amdahl_refuses_to_predict_from_a_poor_fit():
    fit = amdahl_fit([(2, 2.0, 1.2), (4, 4.0, 3.6), (8, 8.0, 2.0)], base_ws=1)
    assert fit["r2"] < MIN_R2 and fit["predicted"] is None and "poor fit" in fit["note"]
