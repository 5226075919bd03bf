"""Figures and decisions the renderers used to make, now results of the analysis: the group averages,
the per-rank batch, the straggler basis and nearest rank, the severity counts, the MFU of training
runs only, a CPU run's GPU count, the TensorBoard export's samples/s. Each against a computation
made here from the files (plain json, statistics) or by construction, never from logkit's output."""

from __future__ import annotations

import collections
import dataclasses
import statistics
from pathlib import Path

import orjson
import pytest

from logkit.analysis import analyze
from logkit.analysis.kernels.breakdown import arrival_stragglers, straggler_calls, with_arrivals
from logkit.analysis.kernels.performance import step_samples, stragglers
from logkit.analysis.results import SessionSummary
from logkit.analysis.results.performance import BY_ARRIVAL, BY_STEP_TIME
from logkit.ingest import Session
from logkit.ingest.session import make_frame
from logkit.report.console import render_compare, render_performance
from logkit.report.console.common import gpu_count_text
from logkit.report.html import render_html
from logkit.run.load import load_sessions
from logkit.schema.findings import SEVERITIES
from tests.support.launch import REPO
from tests.support.synth import rank_file, write_session

SAMPLES = REPO / "sample_logs"
# (session id, ranks, GPU utilization samples of each GPU, step time, global batch): one group (one model)
RUNS = (("a1", 1, (60.0, 70.0), 0.50, 8), ("a2", 1, (80.0, 90.0), 0.60, 8),
        ("b2", 2, (40.0, 50.0), 0.40, 16), ("b4", 4, (20.0, 95.0), 0.55, 32))


def _records(folder, sid: str, rank: int) -> list[dict]:
    return [orjson.loads(x) for x in rank_file(folder, sid, rank).read_bytes().splitlines()]


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    root = tmp_path_factory.mktemp("group") / "logs"
    folders = {sid: write_session(root, sid, world_size=n, gpu_count=n, gpu_util=util, step_times=[t] * 12,
                                  total_batch_size=b) for sid, n, util, t, b in RUNS}
    return folders, analyze(load_sessions(root))


def _oracle(folders, sid: str) -> dict:
    """From the run's JSONL: its steps/s and samples/s (rank 0's steps), the mean utilization of each
    of its GPUs (every rank's gpu_snapshot), its global batch per rank."""
    recs = _records(folders[sid], sid, 0)
    steps = [r for r in recs if r["type"] == "training_step_complete"]
    time = sum(r["timing"]["step_time_seconds"] for r in steps)
    start = next(r for r in recs if r["type"] == "session_start")
    util = collections.defaultdict(list)
    for rank in range(start["world_size"]):
        for r in _records(folders[sid], sid, rank):
            if r["type"] == "gpu_snapshot":
                for d in r["devices"]:
                    util[d["index"]].append(d["utilization_percent"])
    return {"steps_per_second": len(steps) / time,
            "samples_per_second": sum(r["metrics"]["total_batch_size"] for r in steps) / time,
            "gpu_util": [statistics.mean(v) for v in util.values()],
            "per_rank_batch": start["total_batch_size"] / start["world_size"]}


def test_group_averages_are_the_means_of_each_sides_runs(group):
    folders, analysis = group
    want = {sid: _oracle(folders, sid) for sid in folders}
    (label,) = {c.group for c in analysis.scaling.comparisons}
    for multi, ids in ((False, ["a1", "a2"]), (True, ["b2", "b4"])):
        avg = analysis.scaling.average(label, multi)
        assert set(avg.sessions) == set(ids)
        assert avg.steps_per_second == pytest.approx(statistics.mean(want[i]["steps_per_second"] for i in ids))
        assert avg.samples_per_second == pytest.approx(statistics.mean(want[i]["samples_per_second"] for i in ids))
        assert avg.gpu_utilization_pct == pytest.approx(statistics.mean(u for i in ids for u in want[i]["gpu_util"]))
    out = render_compare(analysis)
    multi = statistics.mean(u for i in ("b2", "b4") for u in want[i]["gpu_util"])
    assert f"Multi-GPU Average:\n  Steps/sec: {statistics.mean(want[i]['steps_per_second'] for i in ('b2', 'b4')):.2f}" \
        in out and f"  GPU utilization: {multi:.1f}%" in out


def test_the_per_rank_batch_of_a_weak_scaling_comparison(tmp_path):
    """2 ranks of batch 16 against 4 ranks of batch 32: the same batch per rank (16 / 2 = 32 / 4 = 8)."""
    root = tmp_path / "logs"
    folders = {sid: write_session(root, sid, world_size=n, gpu_count=n, step_times=[0.5] * 8, total_batch_size=b)
               for sid, n, b in (("b2", 2, 16), ("b4", 4, 32))}
    analysis = analyze(load_sessions(root))
    (c,) = analysis.scaling.comparisons
    per_rank = _oracle(folders, "b2")["per_rank_batch"]
    assert c.baseline == "b2" and per_rank == _oracle(folders, "b4")["per_rank_batch"] == 8
    assert c.regime == "weak" and c.per_rank_batch == per_rank
    assert f"  Regime: weak scaling (same per-rank batch: {per_rank:g})" in render_compare(analysis)


def test_the_straggler_by_step_time_nearest_is_the_slowest_rank():
    """The real two-rank CPU run: no straggler; the nearest is the rank with the largest median step
    time (read from its JSONL here), judged by step time (it timed no phases)."""
    (two,) = [s for s in load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs") if s.meta["world_size"] == 2]
    median = {}
    for path in sorted(Path(two.meta["folder"]).glob("*_rank*.jsonl")):
        recs = [orjson.loads(x) for x in path.read_bytes().splitlines()]
        times = [r["timing"]["step_time_seconds"] for r in recs if r["type"] == "training_step_complete"]
        median[recs[0]["rank"]] = statistics.median(times)
    slowest = max(median, key=median.get)
    call = analyze([two]).straggler_calls[two.session_id]
    assert call.basis == BY_STEP_TIME and call.nearest_rank == slowest
    ratio = median[slowest] / min(median.values())
    assert f"  Stragglers: none (slowest rank {slowest} at {ratio:.2f}x the fastest)" in \
        render_performance(analyze([two]))


def _taking_turns() -> Session:
    """Three ranks, six synced steps of 0.1 s: the last to the sync (the smallest sync_s, 4 ms after
    the others: above the 2 ms margin) is rank 0 in steps 1-3, rank 1 in 4-5, rank 2 in 6."""
    last = [0, 0, 0, 1, 1, 2]
    s = Session.empty({"session_id": "turns", "world_size": 3})
    s.phases = make_frame("phases", [{"rank": r, "step": i + 1, "sync_s": 0.002 if r == who else 0.006,
                                      "compute_s": 0.02} for i, who in enumerate(last) for r in range(3)])
    s.steps = make_frame("steps", [{"rank": r, "step": i + 1, "data_time_s": 0.01, "step_time_s": 0.1}
                                   for i in range(len(last)) for r in range(3)])
    return s


def test_the_straggler_by_arrival_nearest_is_the_rank_last_most_often():
    s = _taking_turns()
    strag = with_arrivals(stragglers(step_samples(s)), [arrival_stragglers(s)])
    assert not strag["is_straggler"].any()  # rank 0 is last in half the steps, 4 ms late: score 0.02 < 0.05
    call = straggler_calls(strag)["turns"]
    assert call.basis == BY_ARRIVAL and call.by_arrival and call.nearest_rank == 0  # last in 3 of 6 steps
    out = render_performance(analyze([s]))
    assert "  Stragglers: none (rank 0 was last to the sync in 50.0% of steps, p " in out


def test_a_flagged_straggler_names_no_nearest_rank():
    (two,) = [s for s in load_sessions(SAMPLES / "why_slow" / "logs") if s.meta["world_size"] == 2]
    call = analyze([two]).straggler_calls[two.session_id]
    assert call.by_arrival and call.nearest_rank is None


def test_severity_counts_every_severity_in_order():
    sessions = load_sessions(SAMPLES / "console") + load_sessions(SAMPLES / "why_slow")
    analysis = analyze(sessions)
    counted = collections.Counter(f.severity.value for f in analysis.findings)
    assert [(s.value, n) for s, n in analysis.severity_counts] == [(s, counted[s]) for s in SEVERITIES]
    assert SEVERITIES == ("critical", "error", "warning", "info") and sum(counted.values()) > 0
    html = render_html(analysis, plots=False)
    for sev in SEVERITIES:
        assert f'<span class="sev sev-{sev}">{counted[sev]}</span></div><div class="k">{sev} finding(s)' in html


def test_mfu_is_shown_for_training_runs_only():
    captures = load_sessions(SAMPLES / "gpu_captures")
    runs = load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs")
    analysis = analyze(captures + runs)
    training = {p.name for p in (SAMPLES / "qlora_tiny_cpu" / "logs").iterdir() if p.is_dir()}
    assert set(analysis.mfu) == {s.session_id for s in captures + runs}  # the JSON keeps every session's
    assert set(analysis.training_mfu) == training
    perf = render_performance(analysis)
    assert perf.count("  MFU: ") == len(training)


def test_a_cpu_run_says_so_and_an_unknown_one_says_unknown(tmp_path):
    write_session(tmp_path / "logs", "cpu2", world_size=2, gpu_count=0)
    (s,) = load_sessions(tmp_path / "logs")
    (summary,) = analyze([s]).scaling.sessions
    start = next(r for r in _records(tmp_path / "logs" / "cpu2", "cpu2", 0) if r["type"] == "session_start")
    assert start["gpu_count"] == 0 and summary.on_cpu is True  # the run says it had no GPU
    assert gpu_count_text(summary) == "0 (CPU, 2 rank(s))"
    unknown = SessionSummary(session_id="x", world_size=2)  # says neither
    assert unknown.on_cpu is None and gpu_count_text(unknown) == "unknown (2 rank(s))"
    gpu = SessionSummary(session_id="y", world_size=2, gpu_count=2, mode="CPU")  # a GPU count wins
    assert gpu.on_cpu is False and gpu_count_text(gpu) == "2"


def test_tensorboard_samples_per_second_are_the_analysis(tmp_path):
    """The export draws samples/s from Analysis.curves.throughput: a value changed there is the value
    written (it is not computed again from the steps)."""
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install tensorboard)")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from logkit.report.export import export_tensorboard

    folder = write_session(tmp_path / "logs", "run", step_times=[0.5, 0.25, 0.5, 0.4], total_batch_size=8)
    (s,) = load_sessions(tmp_path / "logs")
    analysis = analyze([s])
    curve = analysis.curves.throughput.assign(samples_per_s=lambda f: f["samples_per_s"] * 10)
    export_tensorboard([s], tmp_path / "out", analysis=dataclasses.replace(
        analysis, curves=dataclasses.replace(analysis.curves, throughput=curve)))
    acc = EventAccumulator(str(tmp_path / "out" / "tensorboard" / "run"))
    acc.Reload()
    got = {e.step: e.value for e in acc.Scalars("train/samples_per_s")}
    want = {r["step"]: 10 * r["metrics"]["samples_per_second"] for r in _records(folder, "run", 0)
            if r["type"] == "training_step_complete"}  # 10x what the log says: the analysis' value
    assert got == {k: pytest.approx(v, rel=1e-6) for k, v in want.items()}
