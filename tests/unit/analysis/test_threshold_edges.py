"""Every threshold of ``logkit/analysis/thresholds.py`` (the straggler ones aside: their own tests
cover them) on both sides of its edge, where the code applies it: a value just below and just above
the edge (``edge * (1 -/+ 1e-6)``) gives opposite decisions, and the edge itself falls on the side
the rule says (``>=`` or ``>``). Windows of tolerance are tested at both of their edges.

The policy numbers are written out once here (``POLICY``), as the definitions state them, so that a
constant nudged in ``thresholds.py`` fails too (a policy change changes this table with it); the
expected decisions come from these numbers and hand computations, never from logkit's output.

| threshold               | applied in                               | test                                          |
|-------------------------|------------------------------------------|-----------------------------------------------|
| (all of them)           | thresholds.py                            | test_the_policy_numbers                       |
| WARMUP_TOLERANCE        | throughput.warmup_count                  | test_warmup_tolerance_at_its_edge_*,          |
|                         |                                          | test_warmup_window_*                          |
| MIN_STEADY_STEPS        | throughput.steady_state                  | test_steady_figures_need_min_steady_steps     |
| N_BOOT                  | throughput.bootstrap_throughput          | test_bootstrap_draws_and_blocks               |
| MAX_BLOCKS              | throughput.bootstrap_throughput          | test_bootstrap_draws_and_blocks               |
| CI_LEVEL                | scaling._interval                        | test_speedup_interval_is_the_ci_level_quantile|
| MIN_R2                  | amdahl._notes / amdahl_fit               | test_min_r2_at_its_edge, test_min_r2_in_a_fit |
| SAMPLES_RATIO_TOLERANCE | scaling._causes                          | test_samples_ratio_tolerance_in_the_causes    |
|                         | diagnose._samples_findings (3 windows)   | test_samples_ratio_windows_in_the_findings    |
| NEAR_PEAK               | communication.verdict                    | test_near_peak_in_the_communication_verdict   |
|                         | nccl_sweep.nccl_tests_table              | test_near_peak_and_reach_in_the_nccl_sweep    |
| REACH                   | nccl_sweep.nccl_tests_table              | test_near_peak_and_reach_in_the_nccl_sweep    |
| COMM_BOUND_SHARE        | diagnose (sync share of the comm table)  | test_comm_bound_finding_at_its_edge           |
|                         | scaling._causes, verdict._advice         | test_comm_bound_cause_and_advice_at_their_edge|
| SLOW_FACTOR             | performance.step_stats / slow_step_list  | test_slow_factor_at_its_edge                  |
| BUSY_UTIL, IDLE_UTIL    | performance.busy_gpu                     | test_busy_and_idle_util_at_their_edges        |
| LOW_UTIL                | diagnose._gpu_findings                   | test_low_util_at_its_edge                     |
| LOW_EFFICIENCY          | diagnose._comparison_findings, verdict   | test_low_efficiency_at_its_edge               |
| SLOW_STEPS_WARNING      | diagnose._step_findings                  | test_slow_steps_warning_at_its_edge           |
| DATA_HEAVY              | verdict._advice, diagnose._data_wait_... | test_data_heavy_advice_and_finding_at_their_edge|
| (ingest) IN_PROGRESS_MIN_S, _STEPS | meta.in_progress_window     | test_in_progress_window_on_both_sides_of_its_terms|
"""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest

from logkit.analysis import analyze, thresholds
from logkit.analysis.findings import diagnose, verdict
from logkit.analysis.kernels import amdahl, scaling, throughput
from logkit.analysis.kernels.communication import verdict as comm_verdict
from logkit.analysis.kernels.nccl_sweep import nccl_tests_table
from logkit.analysis.kernels.performance import busy_gpu, slow_step_list, step_stats
from tests.support.analysis_synth import comm_rows, gpu_rows, session, step_rows

BELOW, ABOVE = 1 - 1e-6, 1 + 1e-6

# The policy, as docs and definitions state it (the straggler thresholds are not covered here).
POLICY = {
    "WARMUP_TOLERANCE": 0.05, "MIN_STEADY_STEPS": 4, "N_BOOT": 1000, "MAX_BLOCKS": 200, "CI_LEVEL": 0.95,
    "MIN_R2": 0.9, "SAMPLES_RATIO_TOLERANCE": 0.05, "NEAR_PEAK": 0.60, "REACH": 0.80, "COMM_BOUND_SHARE": 0.30,
    "SLOW_FACTOR": 3.0, "BUSY_UTIL": 50.0, "IDLE_UTIL": 10.0, "LOW_UTIL": 50.0, "LOW_EFFICIENCY": 0.7,
    "SLOW_STEPS_WARNING": 0.01, "DATA_HEAVY": 0.2,
}
P = SimpleNamespace(**POLICY)


def test_the_policy_numbers():
    assert {k: getattr(thresholds, k) for k in POLICY} == POLICY


def _kinds(a) -> list[str]:
    return [f.kind for f in a.findings]


# -- steady state ---------------------------------------------------------------------------------


@pytest.mark.parametrize(("factor", "warm"), [(BELOW, 0), (1.0, 0), (ABOVE, 1)])
def test_warmup_tolerance_at_its_edge_by_the_share_of_the_median(factor, warm):
    # a flat second half (MAD 0): the tolerance is 5% of its median; the first step sits on its edge
    ref = 2.0
    edge = ref + P.WARMUP_TOLERANCE * ref
    times = [edge * factor] + [ref] * 7
    assert throughput.warmup_count(np.array(times)) == warm


@pytest.mark.parametrize(("factor", "warm"), [(BELOW, 0), (ABOVE, 1)])
def test_warmup_tolerance_at_its_edge_by_the_robust_spread(factor, warm):
    # a noisy second half: 3 x 1.4826 x MAD is above 5% of the median, and sets the edge
    second = [1.0, 1.2, 0.8, 1.0, 1.2, 0.8, 1.0, 1.0]
    ref = statistics.median(second)
    mad = statistics.median(abs(x - ref) for x in second)
    spread = 3 * 1.4826 * mad
    assert spread > P.WARMUP_TOLERANCE * ref
    times = [(ref + spread) * factor] + [ref] * 7 + second
    assert throughput.warmup_count(np.array(times)) == warm


def test_warmup_window_has_no_lower_edge():
    # a step far faster than the reference is steady (the window is open below: fast is not warm-up)
    assert throughput.warmup_count(np.array([0.01] + [1.0] * 7)) == 0


@pytest.mark.parametrize(("n", "w"), [(99, 1), (100, 2), (149, 2), (150, 3), (500, 10), (600, 10)])
def test_warmup_window_of_steps_at_its_edges(n, w):
    # w = clip(n // 50, 1, 10): a lone step within the tolerance followed by w - 1 slow ones does not
    # end the warm-up; a run of w steps within it does
    slow = 5.0
    times = [slow] * 3 + [1.0] + [slow] * (w - 1) + [1.0] * (n - 3 - w)
    assert throughput.warmup_count(np.array(times)) == (3 if w == 1 else 3 + w)


def test_warmup_is_at_most_half_the_run_and_none_below_four_steps():
    assert throughput.warmup_count(np.array([9.0, 1.0, 1.0])) == 0  # n = 3: none
    assert throughput.warmup_count(np.array([9.0, 1.0, 1.0, 1.0])) == 1  # n = 4: counted
    assert throughput.warmup_count(np.array([9.0] * 6 + [1.0] * 4)) == 5  # capped at n // 2


@pytest.mark.parametrize(("n", "steady"), [(P.MIN_STEADY_STEPS - 1, False), (P.MIN_STEADY_STEPS, True)])
def test_steady_figures_need_min_steady_steps(n, steady):
    s = session("s", steps=step_rows([0.5] * n, batch=8))
    state = throughput.steady_state(s)
    assert (state.samples_per_second is not None) is steady
    if steady:
        assert state.samples_per_second == pytest.approx(8 * n / (0.5 * n))


def _draws_by_hand(batch, time, n_boot, seed):
    n = len(time)
    m = min(n, P.MAX_BLOCKS)
    edges = [k * n // m for k in range(m)] + [n]
    b = np.array([sum(batch[edges[k]:edges[k + 1]]) for k in range(m)], dtype=float)
    t = np.array([sum(time[edges[k]:edges[k + 1]]) for k in range(m)], dtype=float)
    idx = np.random.default_rng(seed).integers(0, m, size=(n_boot, m))
    return b[idx].sum(axis=1) / t[idx].sum(axis=1)


@pytest.mark.parametrize("n", [P.MAX_BLOCKS - 1, P.MAX_BLOCKS, P.MAX_BLOCKS + 1, 2 * P.MAX_BLOCKS + 3])
def test_bootstrap_draws_and_blocks(n):
    rng = np.random.default_rng(n)
    time = list(0.5 + 0.1 * rng.random(n))
    batch = [float(x) for x in rng.integers(4, 12, n)]
    state = throughput.SteadyState(batch=np.array(batch), time=np.array(time))
    got = throughput.bootstrap_throughput(state, seed=7)
    assert len(got) == P.N_BOOT
    np.testing.assert_allclose(got, _draws_by_hand(batch, time, P.N_BOOT, 7), rtol=1e-12)


def test_speedup_interval_is_the_ci_level_quantile():
    rng = np.random.default_rng(3)
    base_t, cand_t = list(0.5 + 0.1 * rng.random(40)), list(0.3 + 0.1 * rng.random(50))
    bs = throughput.SteadyState(batch=np.full(40, 8.0), time=np.array(base_t))
    cs = throughput.SteadyState(batch=np.full(50, 8.0), time=np.array(cand_t))
    lo, hi = scaling._interval(bs, cs, 0, 1, {})
    ratio = _draws_by_hand([8.0] * 50, cand_t, P.N_BOOT, 1001) / _draws_by_hand([8.0] * 40, base_t, P.N_BOOT, 1000)
    want = np.quantile(ratio, [(1 - P.CI_LEVEL) / 2, (1 + P.CI_LEVEL) / 2])
    assert (lo, hi) == pytest.approx(tuple(want), rel=1e-12)


# -- scaling ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("r2", "poor"), [(P.MIN_R2 * BELOW, True), (P.MIN_R2, False), (P.MIN_R2 * ABOVE, False),
                                          (None, True)])
def test_min_r2_at_its_edge(r2, poor):
    notes = amdahl._notes(0.1, r2, [])
    assert any(n.startswith("poor fit") for n in notes) is poor


def _r2_by_hand(points):
    p = np.array([x[1] for x in points] + [1.0])
    s = np.array([x[2] for x in points] + [1.0])
    x, y = 1 - 1 / p, 1 / s - 1 / p
    serial = min(max(float((x * y).sum() / (x * x).sum()), 0.0), 1.0)
    fitted = 1 / (serial + (1 - serial) / p)
    return 1 - float(((s - fitted) ** 2).sum()) / float(((s - s.mean()) ** 2).sum())


@pytest.mark.parametrize(("at", "reliable"), [(BELOW, True), (1.0, True), (ABOVE, False)])
def test_min_r2_in_a_fit(monkeypatch, at, reliable):
    # a fit whose R² is known (computed here): the threshold put just under, on, and just over it
    points = [(2, 2.0, 1.7), (4, 4.0, 3.2), (8, 8.0, 4.1)]
    r2 = _r2_by_hand(points)
    monkeypatch.setattr(amdahl, "MIN_R2", r2 * at)
    fit = amdahl.amdahl_fit(points, 1)
    assert fit.r2 == pytest.approx(r2, rel=1e-12)
    assert fit.reliable is reliable and (fit.predicted is None) is not reliable


_WARMUP_CAUSE = "whole-run figures include warm-up"


@pytest.mark.parametrize(("ratio", "said"), [
    (1 + P.SAMPLES_RATIO_TOLERANCE * BELOW, False), (1 + P.SAMPLES_RATIO_TOLERANCE * ABOVE, True),
    (1 - P.SAMPLES_RATIO_TOLERANCE * BELOW, False), (1 - P.SAMPLES_RATIO_TOLERANCE * ABOVE, True),
])
def test_samples_ratio_tolerance_in_the_causes(ratio, said):
    causes = scaling._causes("superlinear", None, None, {"regime": "strong", "steady": False, "samples_ratio": ratio},
                             {}, {})
    assert any(c.startswith(_WARMUP_CAUSE) for c in causes) is said


_NOT_RESCALED = "Step count not rescaled for the number of GPUs"
_DIVIDED = "Step count divided although the batch is global"
_DIFFERENT = "Runs saw different numbers of samples"
TOL = P.SAMPLES_RATIO_TOLERANCE


@pytest.mark.parametrize(("regime", "ratio", "title"), [
    # the ratio's own window around 1: within it (either side), no finding
    ("strong", 1 + TOL * BELOW, None), ("strong", 1 + TOL * ABOVE, _DIFFERENT),
    ("strong", 1 - TOL * BELOW, None), ("strong", 1 - TOL * ABOVE, _DIFFERENT),
    # weak scaling on 2x the ranks: |ratio - 2| / 2 < tol at both edges of the window around 2
    ("weak", 2 * (1 + TOL * BELOW), _NOT_RESCALED), ("weak", 2 * (1 + TOL * ABOVE), _DIFFERENT),
    ("weak", 2 * (1 - TOL * BELOW), _NOT_RESCALED), ("weak", 2 * (1 - TOL * ABOVE), _DIFFERENT),
    # strong scaling on 2x the ranks: |ratio x 2 - 1| < tol at both edges of the window around 1/2
    ("strong", (1 + TOL * BELOW) / 2, _DIVIDED), ("strong", (1 + TOL * ABOVE) / 2, _DIFFERENT),
    ("strong", (1 - TOL * BELOW) / 2, _DIVIDED), ("strong", (1 - TOL * ABOVE) / 2, _DIFFERENT),
])
def test_samples_ratio_windows_in_the_findings(regime, ratio, title):
    c = SimpleNamespace(samples_ratio=ratio, rank_ratio=2.0, regime=regime)
    titles = [f.title for f in diagnose._samples_findings(c, "cand", "base", ["f"])]
    assert titles == ([] if title is None else [title])


# -- communication ---------------------------------------------------------------------------------

_LINK = {"link": "test link", "peak_busbw_gb_s": 200.0, "alpha_us": 10.0, "source": "test"}  # half peak at 2 MB


@pytest.mark.parametrize(("factor", "want"), [(BELOW, "below peak"), (1.0, "bandwidth-bound"),
                                              (ABOVE, "bandwidth-bound")])
def test_near_peak_in_the_communication_verdict(factor, want):
    busbw = P.NEAR_PEAK * 200.0 * 1000 * factor  # MB/s
    assert comm_verdict(50e6, busbw, _LINK)[0] == want


@pytest.mark.parametrize(("size", "want"), [(2e6 * BELOW, "latency-bound"), (2e6, "below peak"),
                                            (2e6 * ABOVE, "below peak")])
def test_half_peak_message_size_in_the_communication_verdict(size, want):
    assert comm_verdict(size, 1000.0, _LINK)[0] == want  # 0.5% of the peak: not bandwidth-bound


def _sweep(bus_gb_s: list[float]):
    rows = [{"op": "allreduce", "size_bytes": float(2 ** (10 + i)), "duration_ms": 1.0, "algbw_mb_s": b * 1000 / 1.75,
             "busbw_mb_s": b * 1000, "group_size": 8, "placement": "out-of-place", "source": f"x.log:{i}"}
            for i, b in enumerate(bus_gb_s)]
    s = session("t", comm=rows, formats=["nccl_tests"], gpus=[{"index": 0, "name": "NVIDIA A100-SXM4-80GB"}])
    (r,) = nccl_tests_table(s).to_dict("records")
    return r


@pytest.mark.parametrize(("factor", "want"), [(BELOW, "below peak"), (ABOVE, "bandwidth-bound")])
def test_near_peak_and_reach_in_the_nccl_sweep(factor, want):
    peak = 246.7  # NVLink 3 (A100 SXM): 300 GB/s line rate x 370/450 (NCCL's protocol overhead, nccl-tests#212)
    top = P.NEAR_PEAK * peak * factor  # the largest size's busbw, just below / above 60% of the peak
    r = _sweep([top * P.REACH * BELOW, top * P.REACH * ABOVE, top * 0.9, top])
    assert r["verdict"] == want
    assert r["size_at_80pct_bytes"] == 2.0 ** 11  # the first size whose busbw reaches 80% of the top
    r = _sweep([top * 0.5, top * P.REACH, top])  # on the edge: reached
    assert r["size_at_80pct_bytes"] == 2.0 ** 11


def _comm_session(share_factor: float):
    # 2 ranks, steps of 100 ms; each step's gradient sync takes 30% of it (x factor)
    steps = step_rows([0.1] * 6, rank=0) + step_rows([0.1] * 6, rank=1)
    dur = P.COMM_BOUND_SHARE * 100.0 * share_factor
    comm = comm_rows([4e6] * 6, [dur] * 6, rank=0) + comm_rows([4e6] * 6, [dur] * 6, rank=1)
    return session("c", world_size=2, steps=steps, comm=comm)


@pytest.mark.parametrize(("factor", "bound"), [(BELOW, False), (ABOVE, True)])
def test_comm_bound_finding_at_its_edge(factor, bound):
    a = analyze([_comm_session(factor)])
    share = a.communication["sync_share_of_step_time"]
    assert share.tolist() == pytest.approx([P.COMM_BOUND_SHARE * factor] * 2, rel=1e-9)
    assert ("communication_bound" in _kinds(a)) is bound


@pytest.mark.parametrize(("factor", "bound"), [(BELOW, False), (1.0, True), (ABOVE, True)])
def test_comm_bound_cause_and_advice_at_their_edge(factor, bound):
    share = P.COMM_BOUND_SHARE * factor
    causes = scaling._causes("slowdown", None, None, {"regime": "strong", "steady": True}, {"sync_share": share}, {})
    assert any(c.startswith("communication-bound") for c in causes) is bound
    row = pd.Series({"step_s": 1.0, "comm_exposed_s": share, "data_s": 0.0})
    advice = verdict._advice((), pd.DataFrame(), row, None)
    assert (advice is not None and advice.startswith("The exposed gradient sync")) is bound


@pytest.mark.parametrize(("factor", "heavy"), [(BELOW, False), (1.0, True), (ABOVE, True)])
def test_data_heavy_advice_and_finding_at_their_edge(factor, heavy):
    share = P.DATA_HEAVY * factor
    row = pd.Series({"step_s": 1.0, "comm_exposed_s": 0.0, "data_s": share})
    advice = verdict._advice((), pd.DataFrame(), row, None)
    assert (advice is not None and advice.startswith("Data loading is a large share")) is heavy
    s = session("d", world_size=2, config={"average_tokens_across_devices": True})
    rows = pd.DataFrame({"session_id": ["d", "d"], "rank": [0, 1], "data_s": [share, share], "step_s": [1.0, 1.0]})
    found = diagnose._data_wait_hidden(s, "d", rows)
    assert [f.kind for f in found] == (["data_wait_in_token_gather"] if heavy else [])


# -- performance -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("factor", "slow"), [(BELOW, 0), (1.0, 0), (ABOVE, 1)])
def test_slow_factor_at_its_edge(factor, slow):
    times = [1.0] * 8 + [P.SLOW_FACTOR * factor]  # median 1.0
    s = session("p", steps=step_rows(times))
    (row,) = step_stats(s).to_dict("records")
    assert row["slow_steps"] == slow and row["slow_threshold_s"] == P.SLOW_FACTOR * 1.0
    assert [w["step"] for w in slow_step_list(s)] == ([9] if slow else [])


@pytest.mark.parametrize(("busy", "idle", "found"), [
    (P.BUSY_UTIL, P.IDLE_UTIL, True),  # both edges are inclusive
    (P.BUSY_UTIL * BELOW, P.IDLE_UTIL, False), (P.BUSY_UTIL * ABOVE, P.IDLE_UTIL, True),
    (P.BUSY_UTIL, P.IDLE_UTIL * ABOVE, False), (P.BUSY_UTIL, P.IDLE_UTIL * BELOW, True),
])
def test_busy_and_idle_util_at_their_edges(busy, idle, found):
    gpus = pd.DataFrame({"gpu": [0, 1, 2], "avg_util": [busy, idle, idle]})
    got = busy_gpu(gpus)
    assert (got == {"busy": 0, "idle": [1, 2], "busy_util": busy}) if found else got is None


@pytest.mark.parametrize(("factor", "low"), [(BELOW, True), (1.0, False), (ABOVE, False)])
def test_low_util_at_its_edge(factor, low):
    util = P.LOW_UTIL * factor
    s = session("g", world_size=2, steps=step_rows([0.5] * 4), gpu=gpu_rows({0: [util, util], 1: [90.0, 90.0]}))
    a = analyze([s])
    found = [f for f in a.findings if f.kind == "low_gpu_util"]
    assert [f.title for f in found] == (["Low GPU utilization on 1 GPU(s)"] if low else [])


def _run(sid, ranks, step_time, hour):
    steps = [r for rank in range(ranks) for r in step_rows([step_time] * 8, rank=rank, batch=8)]
    return session(sid, world_size=ranks, steps=steps, start_time=f"2026-01-01T0{hour}:00:00+00:00")


@pytest.mark.parametrize(("factor", "low"), [(BELOW, True), (1.0, False), (ABOVE, False)])
def test_low_efficiency_at_its_edge(factor, low):
    eff = P.LOW_EFFICIENCY * factor
    # the same global batch on 2 ranks, each step 2 x eff faster: a steady speedup of 2 x eff
    a = analyze([_run("base", 1, 0.5, 0), _run("cand", 2, 0.5 / (2 * eff), 1)])
    (c,) = a.scaling.comparisons
    assert c.scaling_efficiency == pytest.approx(eff, rel=1e-9) and not c.flags
    assert ("low_scaling_efficiency" in _kinds(a)) is low
    # the counterfactual (hours against the baseline) comes first, the pay-off sentence after it
    assert a.verdict[0].startswith("On 1 GPU this run would have taken")
    assert a.verdict[1].startswith("Multi-GPU paid off only in part" if low else "Multi-GPU paid off:")


@pytest.mark.parametrize(("steps", "severity"), [(101, "info"), (100, "info"), (99, "warning")])
def test_slow_steps_warning_at_its_edge(steps, severity):
    # one slow step: 1 > 1% of the steps only when there are fewer than 100 of them
    assert P.SLOW_STEPS_WARNING * 100 == 1.0
    s = session("w", steps=step_rows([1.0] * (steps - 1) + [10.0]))
    (f,) = [f for f in analyze([s]).findings if f.kind == "slow_steps"]
    assert f.severity.value == severity


# -- still running (ingest/meta.py: the window the liveness and its finding use) -------------------------


@pytest.mark.parametrize(("median", "window"), [(None, 120.0), (12.0 * BELOW, 120.0), (12.0, 120.0),
                                                (12.0 * ABOVE, 120.0 * ABOVE), (30.0, 300.0)])
def test_in_progress_window_on_both_sides_of_its_terms(median, window):
    from logkit.ingest.meta import IN_PROGRESS_MIN_S, IN_PROGRESS_STEPS, in_progress_window

    assert (IN_PROGRESS_MIN_S, IN_PROGRESS_STEPS) == (120.0, 10)
    times = [] if median is None else [median * 0.5, median, median, median * 3]  # median: ``median``
    s = session("r", steps=step_rows(times))
    assert in_progress_window(s) == pytest.approx(window, rel=1e-12)
