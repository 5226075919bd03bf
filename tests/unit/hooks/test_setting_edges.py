"""Every threshold-like setting of the emitter (``trainer_hooks/settings.py``) and the warm-up and
window constants of its checks (``trainer_hooks/findings.py``, ``nonfinite.py``) on both sides of
its edge: just below and just above (``edge * (1 -/+ 1e-6)``) give opposite decisions, the edge
itself falls on the side the rule says; a window of recent values is told from one a value longer
or shorter. The expected thresholds are computed here from the definitions (numpy, statistics),
never read from the finding under test. The stall watch has its own module (test_stall_watch.py).

| setting / constant                         | rule                                   | test                                   |
|--------------------------------------------|----------------------------------------|----------------------------------------|
| defaults (all below)                       | settings.LogSettings                   | test_the_default_settings              |
| memory_high_pct (90)                       | host memory % > it                     | test_resource_thresholds_at_their_edges|
| gpu_memory_high_pct (95)                   | GPU memory % > it                      | test_resource_thresholds_at_their_edges|
| gpu_util_low_pct (50)                      | GPU utilization % < it                 | test_resource_thresholds_at_their_edges|
| the three, as set on the logger            | SessionLogger._on_snapshot             | test_resource_settings_reach_the_checks|
| slow_step_factor (3)                       | step > factor x running median         | test_slow_step_factor_at_its_edge      |
| SlowStepDetector warmup (5), window (50)   |                                        | test_slow_step_warmup_and_window       |
| loss_spike_factor (3), floor (log 1.05)    | log loss > log median + f x max(MAD,   | test_loss_spike_floor_at_its_edge,     |
|  1.4826 x MAD                              |  floor)                                | test_loss_spike_mad_and_window         |
| LossSpikeDetector warmup (5), window (20)  |                                        | test_loss_spike_warmup,                |
|                                            |                                        | test_loss_spike_mad_and_window         |
| linear scale: floor 5% of the median       | a window holding a loss <= 0           | test_loss_spike_linear_floor_at_its_edge|
| both factors, as set on the logger         | RecordBuilder                          | test_factors_set_on_the_logger_reach_the_detectors|
| GradNormWatch factor (10), share (>= rms)  | norm > f x layer median and >= rms     | test_grad_explode_factor_and_share     |
| GradNormWatch vanish_abs (1e-8),           | norm <= vanish_abs, median >= active   | test_grad_vanish_edges                 |
|  active_abs (1e-6)                         |                                        |                                        |
| GradNormWatch warmup (3), window (20)      |                                        | test_grad_watch_warmup_and_window      |
| trend: 2% of the mean of the last 5        | |current - mean| <= 2% of it: stable   | test_trend_tolerance_at_both_edges,    |
|                                            |                                        | test_trend_window_is_the_last_five     |
| nan_dump_max_bytes (64 MiB)                | tensors' bytes > it: truncated         | test_dump_truncation_at_its_edge,      |
|                                            |                                        | test_nan_dump_max_bytes_reaches_the_dump|
| MAX_NAN_REPORTS (3)                        | reports with tensors: the first 3 steps| test_nan_dump_max_bytes_reaches_the_dump|
"""

from __future__ import annotations

import math
import statistics

import pytest

from tests.support.launch import read_jsonl
from trainer_hooks import nonfinite
from trainer_hooks import session_logger as session_mod
from trainer_hooks.builder import RecordBuilder
from trainer_hooks.distributed import RankInfo
from trainer_hooks.findings import (
    GradNormWatch,
    LossSpikeDetector,
    SlowStepDetector,
    resource_findings,
    trend,
)
from trainer_hooks.settings import LogSettings, resolve_settings
from trainer_hooks.steps import PendingStep

BELOW, ABOVE = 1 - 1e-6, 1 + 1e-6
DEFAULTS = {"memory_high_pct": 90.0, "gpu_memory_high_pct": 95.0, "gpu_util_low_pct": 50.0, "slow_step_factor": 3.0,
            "loss_spike_factor": 3.0, "nan_dump_max_bytes": 64 * 1024 * 1024, "stall_factor": 10.0,
            "stall_min_s": 60.0}


def test_the_default_settings():
    s = LogSettings()
    assert {k: getattr(s, k) for k in DEFAULTS} == DEFAULTS
    for level in ("low", "medium", "high", "ultra"):  # no verbosity moves a threshold
        r = resolve_settings(level, env={})
        assert {k: getattr(r, k) for k in DEFAULTS} == DEFAULTS, level
    assert nonfinite.MAX_NAN_REPORTS == 3


# -- resource findings ---------------------------------------------------------------------------------


def _usage(mem=None, gmem=None, util=None) -> dict:
    dev = {"index": 0}
    if gmem is not None:
        dev["memory_usage_percent"] = gmem
    if util is not None:
        dev["utilization_percent"] = util
    return {"memory": {"usage_percent": mem}, "gpu": {"devices": [dev]}}


def _kinds(findings) -> list[str]:
    return sorted(f["kind"] for f in findings)


@pytest.mark.parametrize(("name", "kind", "above_flags"), [
    ("memory_high_pct", "memory_high", True), ("gpu_memory_high_pct", "gpu_memory_high", True),
    ("gpu_util_low_pct", "gpu_util_low", False),
])
def test_resource_thresholds_at_their_edges(name, kind, above_flags):
    s = LogSettings()
    args = (s.memory_high_pct, s.gpu_memory_high_pct, s.gpu_util_low_pct)
    edge = DEFAULTS[name]
    key = {"memory_high_pct": "mem", "gpu_memory_high_pct": "gmem", "gpu_util_low_pct": "util"}[name]
    neutral = {"mem": 10.0, "gmem": 10.0, "util": 90.0}
    for value, flagged in ((edge * BELOW, not above_flags), (edge, False), (edge * ABOVE, above_flags)):
        found = resource_findings(_usage(**{**neutral, key: value}), *args)
        assert _kinds(found) == ([kind] if flagged else []), (name, value)
        if flagged:
            assert found[0]["value"] == value and found[0]["threshold"] == edge


@pytest.fixture
def one_rank(monkeypatch):
    monkeypatch.setattr(session_mod, "rank_info", lambda: RankInfo(0, 1, 0, None, "cpu", "testhost"))


def _logger(tmp_path, **settings):
    log = session_mod.SessionLogger(tmp_path, "high", gpu_snapshot_interval=0, stall_min_s=0, **settings)
    log.start(per_device_batch_size=2, max_steps=10)
    return log


def _records(tmp_path, log) -> list[dict]:
    log.end()
    return read_jsonl(tmp_path / log.session_id / f"{log.session_id}_rank0.jsonl")


def test_resource_settings_reach_the_checks(tmp_path, one_rank):
    # thresholds unlike the defaults and unlike each other: each must reach its own check
    mem, gmem, util = 70.0, 80.0, 30.0
    log = _logger(tmp_path, memory_high_pct=mem, gpu_memory_high_pct=gmem, gpu_util_low_pct=util,
                  snapshot_records=False)
    below = _usage(mem * BELOW, gmem * BELOW, util * ABOVE)  # nothing to say
    above = _usage(mem * ABOVE, gmem * ABOVE, util * BELOW)  # all three
    log._on_snapshot({"devices": [], "resource_usage": below})
    log._on_snapshot({"devices": [], "resource_usage": above})
    warnings = [r for r in _records(tmp_path, log) if r["type"] == "resource_warning"]
    assert sorted((r["kind"], r["threshold"]) for r in warnings) == [
        ("gpu_memory_high", gmem), ("gpu_util_low", util), ("memory_high", mem)]


# -- slow steps ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("factor", "slow"), [(BELOW, False), (1.0, False), (ABOVE, True)])
def test_slow_step_factor_at_its_edge(factor, slow):
    d = SlowStepDetector(DEFAULTS["slow_step_factor"])
    for t in (1.0, 1.0, 1.0, 1.2, 0.8, 1.0):
        d.check(t)
    step = DEFAULTS["slow_step_factor"] * 1.0 * factor  # the median of the six above is 1.0
    finding = d.check(step)
    assert (finding is not None) is slow
    if slow:
        assert finding["median"] == 1.0 and finding["threshold"] == DEFAULTS["slow_step_factor"]


def test_slow_step_warmup_and_window():
    d = SlowStepDetector()
    # the first 5 steps only feed the median, however slow; the 6th is judged
    assert [d.check(t) for t in (1.0, 1.0, 1.0, 1.0, 100.0)] == [None] * 5
    assert d.check(3.0 * ABOVE) is not None  # median of the five: 1.0
    # the window: the last 50 steps. 26 steps of 1 s then 25 of 2 s: the last 50 have a median of 1.5
    # (51 of them: 1.0; 49: 2.0)
    d = SlowStepDetector()
    for t in [1.0] * 26 + [2.0] * 25:
        assert d.check(t) is None
    assert d.check(3 * 1.5 * BELOW) is None
    d2 = SlowStepDetector()
    for t in [1.0] * 26 + [2.0] * 25:
        d2.check(t)
    f = d2.check(3 * 1.5 * ABOVE)
    assert f is not None and f["median"] == 1.5


# -- loss spikes ---------------------------------------------------------------------------------------


def _spike_threshold(window, factor=3.0) -> float:
    """The definition, on the log scale: median x exp(factor x max(1.4826 x MAD of the logs, log 1.05))."""
    med = statistics.median(window)
    logs = [math.log(x) for x in window]
    mad = statistics.median(abs(v - math.log(med)) for v in logs)
    return med * math.exp(factor * max(1.4826 * mad, math.log(1.05)))


@pytest.mark.parametrize(("factor", "spike"), [(BELOW, False), (ABOVE, True)])
def test_loss_spike_floor_at_its_edge(factor, spike):
    d = LossSpikeDetector(DEFAULTS["loss_spike_factor"])
    for _ in range(5):
        d.check(2.0)
    edge = 2.0 * 1.05 ** DEFAULTS["loss_spike_factor"]  # a flat window: the floor sets the spread
    assert edge == pytest.approx(_spike_threshold([2.0] * 5))
    finding = d.check(edge * factor)
    assert (finding is not None) is spike
    if spike:
        assert finding["threshold"] == pytest.approx(edge, rel=1e-12)


def test_loss_spike_warmup():
    d = LossSpikeDetector()
    for loss in (2.0, 2.0, 2.0, 2.0):
        d.check(loss)
    assert d.check(1000.0) is None  # 4 losses: not judged yet
    d = LossSpikeDetector()
    for loss in (2.0,) * 5:
        d.check(loss)
    assert d.check(1000.0) is not None  # 5 losses: judged


@pytest.mark.parametrize(("factor", "spike"), [(BELOW, False), (ABOVE, True)])
def test_loss_spike_mad_and_window(factor, spike):
    # 11 losses of 1.0 then 10 of 2.0: the last 20 are ten of each (median 1.5, MAD well above the floor);
    # a window of 21 would have a median of 1.0, one of 19 a median of 2.0
    history = [1.0] * 11 + [2.0] * 10
    d = LossSpikeDetector()
    for loss in history:
        d.check(loss)
    window = history[-20:]
    edge = _spike_threshold(window)
    assert 1.4826 * statistics.median(abs(math.log(x) - math.log(1.5)) for x in window) > math.log(1.05)
    finding = d.check(edge * factor)
    assert (finding is not None) is spike
    if spike:
        assert finding["median"] == 1.5 and finding["threshold"] == pytest.approx(edge, rel=1e-9)


@pytest.mark.parametrize(("factor", "spike"), [(BELOW, False), (ABOVE, True)])
def test_loss_spike_linear_floor_at_its_edge(factor, spike):
    # a loss of 0 in the window: the linear scale; MAD 0, so the floor (5% of the median) sets the spread
    d = LossSpikeDetector()
    for loss in [0.0] + [1.0] * 19:
        d.check(loss)
    edge = 1.0 + 3 * 0.05 * 1.0
    finding = d.check(edge * factor)
    assert (finding is not None) is spike
    if spike:
        assert finding["threshold"] == pytest.approx(edge, rel=1e-12)


def _pending(step: int, step_time: float, loss: float) -> PendingStep:
    return PendingStep(1e9 + step, float(step), step, None, step_time, None, 8, None, step_time, loss, 1e-3, 1.0)


@pytest.mark.parametrize(("factor", "found"), [(BELOW, set()), (ABOVE, {"slow_step", "loss_spike"})])
def test_factors_set_on_the_logger_reach_the_detectors(factor, found):
    # factors unlike the defaults and unlike each other: 2 for slow steps, 5 for loss spikes
    settings = resolve_settings("high", env={}, slow_step_factor=2.0, loss_spike_factor=5.0)
    b = RecordBuilder(settings, {"session_id": "s", "rank": 0, "world_size": 1, "local_rank": 0}, 100, 8)
    for step in range(1, 7):
        b.step(_pending(step, 1.0, 2.0))
    out = b.step(_pending(7, 2.0 * factor, 2.0 * 1.05 ** 5 * factor))
    anomalies = {r["kind"]: r for r in out if r["type"] == "anomaly"}
    assert set(anomalies) == found
    if found:
        assert anomalies["slow_step"]["threshold"] == 2.0
        assert anomalies["loss_spike"]["threshold"] == pytest.approx(2.0 * 1.05 ** 5, rel=1e-12)


# -- gradient norms -------------------------------------------------------------------------------------


def _watch(history: list[float], **kw) -> GradNormWatch:
    w = GradNormWatch(**kw)
    for norm in history:
        w.check({"layer": norm})
    return w


@pytest.mark.parametrize(("factor", "explode"), [(BELOW, False), (1.0, False), (ABOVE, True)])
def test_grad_explode_factor_and_share(factor, explode):
    w = _watch([1.0, 1.0, 1.0])
    found = w.check({"layer": 10.0 * factor})
    assert [f["kind"] for f in found] == (["grad_explode"] if explode else [])
    # the share: a layer that explodes against its median, beside another of norm b: flagged while
    # its norm is at or above the root-mean-square of both (b <= 20 for a norm of 20)
    for b, flagged in ((20.0 * BELOW, True), (20.0, True), (20.0 * ABOVE, False)):
        w = GradNormWatch()
        for _ in range(3):
            w.check({"a": 1.0, "b": b})
        found = w.check({"a": 20.0, "b": b})
        assert [(f["kind"], f["tensor"]) for f in found] == ([("grad_explode", "a")] if flagged else []), b


def test_grad_vanish_edges():
    for norm, vanish in ((1e-8 * BELOW, True), (1e-8, True), (1e-8 * ABOVE, False)):
        found = _watch([1.0, 1.0, 1.0]).check({"layer": norm})
        assert [f["kind"] for f in found] == (["grad_vanish"] if vanish else []), norm
    for median, vanish in ((1e-6 * BELOW, False), (1e-6, True), (1e-6 * ABOVE, True)):
        found = _watch([median] * 3).check({"layer": 0.0})
        assert [f["kind"] for f in found] == (["grad_vanish"] if vanish else []), median


def test_grad_watch_warmup_and_window():
    assert _watch([1.0, 1.0]).check({"layer": 1000.0}) == []  # two norms: not judged yet
    assert [f["kind"] for f in _watch([1.0, 1.0, 1.0]).check({"layer": 1000.0})] == ["grad_explode"]
    # the window: the last 20 norms. 11 of 1.0 then 10 of 5.0 (never 10x a median): the last 20 have a
    # median of 3.0 (21 of them: 1.0; 19: 5.0)
    history = [1.0] * 11 + [5.0] * 10
    assert _watch(history).check({"layer": 30.0 * BELOW}) == []
    assert [f["kind"] for f in _watch(history).check({"layer": 30.0 * ABOVE})] == ["grad_explode"]


# -- trends ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("current", "direction"), [
    (1.02 * ABOVE, "increasing"), (1.02 * BELOW, "stable"), (1.0, "stable"),
    (0.98 * ABOVE, "stable"), (0.98 * BELOW, "decreasing"),
])
def test_trend_tolerance_at_both_edges(current, direction):
    assert trend([1.0] * 5, current)["trend_direction"] == direction
    # on the edges exactly (2% of 50 is 1.0, exactly representable): within the tolerance
    assert trend([50.0] * 5, 50.0 * current)["trend_direction"] == direction
    assert trend([50.0] * 5, 51.0)["trend_direction"] == trend([50.0] * 5, 49.0)["trend_direction"] == "stable"


def test_trend_window_is_the_last_five():
    t = trend([100.0] + [1.0] * 5)
    assert t == {"current": 1.0, "avg_last_5": 1.0, "trend_direction": "stable"}
    t = trend([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])
    assert t["avg_last_5"] == 4.0 and t["current"] == 6.0 and t["trend_direction"] == "increasing"


# -- NaN dumps ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("cap", "truncated"), [(64, False), (65, False), (63, True)])
def test_dump_truncation_at_its_edge(tmp_path, cap, truncated):
    torch = pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    from safetensors.torch import load_file

    tensors = {"a": torch.arange(10, dtype=torch.float32), "b": torch.arange(3, dtype=torch.float64)}
    total = 10 * 4 + 3 * 8  # 64 bytes
    got, size = nonfinite.dump_tensors(tmp_path / "d.safetensors", tensors, cap)
    assert got is truncated and size == (tmp_path / "d.safetensors").stat().st_size
    back = load_file(str(tmp_path / "d.safetensors"))
    if truncated:
        per = cap // 2  # bytes per tensor
        assert (back["a"].numel(), back["b"].numel()) == (per // 4, per // 8)
    else:
        assert total <= cap and back["a"].tolist() == list(range(10)) and back["b"].tolist() == [0.0, 1.0, 2.0]


@pytest.mark.parametrize(("cap", "truncated"), [(24, False), (23, True)])
def test_nan_dump_max_bytes_reaches_the_dump(tmp_path, one_rank, cap, truncated):
    torch = pytest.importorskip("torch")
    pytest.importorskip("safetensors")
    model = torch.nn.Linear(3, 2)
    with torch.no_grad():
        model.weight.fill_(float("nan"))  # 6 float32 values: 24 bytes to dump
    log = _logger(tmp_path, nan_dump_max_bytes=cap)
    for step in range(1, nonfinite.MAX_NAN_REPORTS + 3):
        log.report_nonfinite(step, "nan_grad", model=model)
    records = _records(tmp_path, log)
    reports = [r for r in records if r["type"] == "nan_detected"]
    # one anomaly per step; reports with tensors and dumps for the first MAX_NAN_REPORTS steps only
    assert [r["step"] for r in records if r["type"] == "anomaly"] == list(range(1, nonfinite.MAX_NAN_REPORTS + 3))
    assert [r["step"] for r in reports] == list(range(1, nonfinite.MAX_NAN_REPORTS + 1))
    for r in reports:
        assert r["affected"] == ["weight"] and r["dump_truncated"] is truncated

