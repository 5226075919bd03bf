"""The stall watch (``trainer_hooks/stall.py``) on a fake clock: its limit, max(stall_factor x the
median step time, stall_min_s), on both sides of each term; a stall reported at the limit and not just
before it, again at 2x and 4x the limit and then no more, and anew after the next step ends; how often
it looks; and the settings that reach it from the logger. The watch's loop runs here in the test's
thread (``_run``), its clock (``time.perf_counter`` in the module) and its stop event replaced, so
nothing waits.

| setting / constant            | test                                                          |
|-------------------------------|---------------------------------------------------------------|
| stall_factor, stall_min_s     | test_limit_on_both_sides_of_each_term,                        |
|                               | test_a_stall_is_reported_at_the_limit_not_before              |
| REPEATS (3: 1x, 2x, 4x)       | test_a_stall_is_reported_at_the_limit_not_before              |
| poll interval clip(min_s/4,   | test_the_watch_looks_every_quarter_limit_within_its_bounds    |
|  0.2, 5)                      |                                                               |
| the logger's median step (64) | test_the_loggers_median_step_is_of_its_last_64_steps          |
| settings -> watch             | test_the_logger_starts_the_watch_with_its_settings            |
"""

from __future__ import annotations

import statistics
from types import SimpleNamespace

import pytest

from trainer_hooks import session_logger as session_mod
from trainer_hooks import stall
from trainer_hooks import steps as steps_mod
from trainer_hooks.distributed import RankInfo
from trainer_hooks.stall import StallWatch

BELOW, ABOVE = 1 - 1e-6, 1 + 1e-6


class FakeLogger:
    def __init__(self, median, progress=0.0):
        self.median, self.progress = median, progress
        self.stalls: list[tuple[float, float]] = []
        self.faults: list[str] = []

    def median_step_time(self):
        return self.median

    def last_progress(self):
        return self.progress

    def report_stall(self, waited, limit):
        self.stalls.append((waited, limit))

    def _fault(self, what, exc):
        self.faults.append(f"{what}: {exc}")


class Script:
    """The stop event and the clock of a watch: each ``wait`` moves the clock to the next reading
    (and runs the action given with it); ``wait`` says stop when the readings are used up."""

    def __init__(self, steps):
        self.steps = list(steps)
        self.now = 0.0
        self.timeouts: list[float] = []

    def wait(self, timeout):
        self.timeouts.append(timeout)
        if not self.steps:
            return True
        step = self.steps.pop(0)
        now, action = step if isinstance(step, tuple) else (step, None)
        self.now = now
        if action is not None:
            action()
        return False

    def set(self):
        self.steps = []

    def perf_counter(self):
        return self.now


def _run(monkeypatch, logger, factor, min_s, steps) -> Script:
    script = Script(steps)
    monkeypatch.setattr(stall, "time", SimpleNamespace(perf_counter=script.perf_counter))
    watch = StallWatch(logger, factor, min_s)
    watch._stop = script
    watch._run()
    return script


@pytest.mark.parametrize(("median", "want"), [
    (None, 60.0), (0.0, 60.0),  # no step yet: stall_min_s
    (6.0 * BELOW, 60.0), (6.0, 60.0), (6.0 * ABOVE, 10 * 6.0 * ABOVE),  # 10 x median against 60 s
    (100.0, 1000.0),
])
def test_limit_on_both_sides_of_each_term(median, want):
    watch = StallWatch(FakeLogger(median), 10.0, 60.0)
    assert watch.limit() == pytest.approx(want, rel=1e-12)
    assert watch.limit() == (max(10.0 * median, 60.0) if median else 60.0)


def test_a_stall_is_reported_at_the_limit_not_before(monkeypatch):
    log = FakeLogger(median=1.0, progress=0.0)  # limit max(10 x 1, 60) = 60 s after the last step end
    readings = [60 * BELOW, 60.0, 120 * BELOW, 120.0, 240 * BELOW, 240.0, 480.0, 10_000.0]
    _run(monkeypatch, log, 10.0, 60.0, readings)
    assert log.stalls == [(60.0, 60.0), (120.0, 60.0), (240.0, 60.0)]  # 1x, 2x, 4x the limit; then no more
    assert log.faults == []
    # the next step ends: the count starts again from that step end
    log = FakeLogger(median=1.0, progress=0.0)

    def step_ended():
        log.progress = 1000.0

    _run(monkeypatch, log, 10.0, 60.0, [60.0, (1000.0, step_ended), 1000 + 60 * BELOW, 1060.0, 1120 * BELOW])
    assert log.stalls == [(60.0, 60.0), (60.0, 60.0)]


def test_the_limit_follows_the_median_step(monkeypatch):
    # a median of 10 s: the limit is 100 s (factor 10), not stall_min_s
    log = FakeLogger(median=10.0)
    _run(monkeypatch, log, 10.0, 60.0, [61.0, 100 * BELOW, 100.0])
    assert log.stalls == [(100.0, 100.0)]


def test_a_failing_logger_does_not_stop_the_watch(monkeypatch):
    log = FakeLogger(median=1.0)
    calls = []

    def broken():
        calls.append(1)
        if len(calls) == 1:
            raise RuntimeError("boom")
        return 0.0

    log.last_progress = broken
    _run(monkeypatch, log, 10.0, 60.0, [60.0, 60.0])
    assert log.faults == ["stall watch: boom"] and log.stalls == [(60.0, 60.0)]


@pytest.mark.parametrize(("min_s", "every"), [
    (20.0 * ABOVE, 5.0), (20.0, 5.0), (20.0 * BELOW, 5.0 * BELOW),  # a quarter of stall_min_s, at most 5 s
    (0.8 * ABOVE, 0.2 * ABOVE), (0.8, 0.2), (0.8 * BELOW, 0.2), (0.01, 0.2),  # at least 0.2 s
])
def test_the_watch_looks_every_quarter_limit_within_its_bounds(monkeypatch, min_s, every):
    script = _run(monkeypatch, FakeLogger(median=None), 10.0, min_s, [0.0])
    assert script.timeouts == [pytest.approx(every, rel=1e-12)] * 2


@pytest.fixture
def one_rank(monkeypatch):
    monkeypatch.setattr(session_mod, "rank_info", lambda: RankInfo(0, 1, 0, None, "cpu", "testhost"))


def test_the_logger_starts_the_watch_with_its_settings(tmp_path, one_rank):
    log = session_mod.SessionLogger(tmp_path, "high", gpu_snapshot_interval=0, stall_factor=4.0, stall_min_s=90.0)
    log.start(per_device_batch_size=2, max_steps=10)
    try:
        watch = log._stall_watch
        assert (watch.factor, watch.min_s, watch.logger) == (4.0, 90.0, log)
        assert watch._thread.is_alive()
    finally:
        log.end()
    assert not watch._thread.is_alive()
    off = session_mod.SessionLogger(tmp_path, "high", gpu_snapshot_interval=0, stall_min_s=0)
    off.start(per_device_batch_size=2, max_steps=10)
    try:
        assert off._stall_watch is None  # stall_min_s = 0 turns the watch off
    finally:
        off.end()


def test_the_loggers_median_step_is_of_its_last_64_steps(tmp_path, one_rank, monkeypatch):
    clock = SimpleNamespace(now=1000.0)
    monkeypatch.setattr(steps_mod, "time", SimpleNamespace(perf_counter=lambda: clock.now))
    log = session_mod.SessionLogger(tmp_path, "high", gpu_snapshot_interval=0, stall_min_s=0)
    log.start(per_device_batch_size=2, max_steps=100)
    assert log.median_step_time() is None
    log._last_step_end = clock.now
    # 33 steps of 10 s, 22 of 1 s, 10 of 2 s: the last 64 have a median of 6 (their mean: 5.66; the
    # last 65: 10; the last 63: 2)
    times = [10.0] * 33 + [1.0] * 22 + [2.0] * 10
    try:
        for step, t in enumerate(times, 1):
            log.step_begin()
            clock.now += t
            log.step_end(step)
        assert log.median_step_time() == statistics.median(times[-64:]) == 6.0
        assert log.last_progress() == clock.now
    finally:
        log.end()
