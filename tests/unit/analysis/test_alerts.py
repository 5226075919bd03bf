"""The live alerts' rules (``analysis/alerts.py``) on both sides of each threshold, with a fake clock:
a stall (the limit, the two moments it is raised at, the rank named and how), a slowdown (raised within
50 steps at 20 steps/s, not for a smaller one or a few slow steps, cleared when the steps are back),
NaN/Inf (at once, cleared by a finite loss), a straggler that appears (and its hysteresis); each alert
raised once and cleared once, its times from the clock it is given."""

from __future__ import annotations

from collections import deque
from datetime import datetime, timedelta, timezone

import numpy as np
import pytest

from logkit.analysis.alerts import AlertBook, RankProgress, nonfinite_call, stall_call, stall_limit
from logkit.analysis.results.frames import ArrivalRow, StepRow
from logkit.analysis.results.live import WindowFigures
from logkit.analysis.thresholds import (
    SLOWDOWN_CHECKS,
    SLOWDOWN_RATIO,
    STALL_EARLY,
    STALL_FACTOR,
    STALL_LATE,
    STALL_MIN_S,
    STRAGGLER_CHECKS,
    STRAGGLER_CLEAR,
)

WALL = datetime(2026, 1, 1, 12, 0, 0, tzinfo=timezone.utc)
FAST = 0.1  # the median step of the runs below: the stall limit is STALL_MIN_S


def rank(r: int, step: int | None = 20, still: float = 0.0, idle: float | None = None, **kw) -> RankProgress:
    return RankProgress(r, step, still, still if idle is None else idle, evidence=f"s_rank{r}.jsonl:{step or 0}",
                        last_step_at=f"2026-01-01T11:59:00.{r:06d}+00:00", **kw)


# --- stall ---------------------------------------------------------------------------------------
def test_the_stall_limit_is_max_60_s_and_10_median_steps():
    assert STALL_MIN_S == 60 and STALL_FACTOR == 10
    assert stall_limit(None) == stall_limit(0.0) == stall_limit(float("nan")) == 60
    assert stall_limit(5.9) == 60 and stall_limit(6.0) == 60 and stall_limit(6.5) == 65 and stall_limit(30) == 300


@pytest.mark.parametrize("median, limit", [(FAST, 60.0), (12.0, 120.0)])
def test_a_rank_behind_the_others_is_named_at_half_the_limit(median, limit):
    early = STALL_EARLY * limit
    assert stall_call([rank(0, 20, early - 0.1), rank(1, 19, early - 0.1)], median) is None
    call = stall_call([rank(0, 20, early), rank(1, 19, early + 0.5)], median)
    assert call.kind == "stall" and call.rank == 1 and call.since == "2026-01-01T11:59:00.000001+00:00"
    assert "rank 1 stopped at step 19 while rank 0 reached step 20 and waits" in call.detail
    assert call.evidence == ("s_rank1.jsonl:19",) and call.ago_s == early + 0.5


def test_a_run_that_logs_every_50th_step_has_a_limit_50_times_longer():
    every50 = dict(step_stride=50.0)
    assert stall_call([rank(0, 100, 60, **every50), rank(1, 50, 60, **every50)], 1.0) is None  # limit 500 s
    assert stall_call([rank(0, 100, 250, **every50), rank(1, 50, 250, **every50)], 1.0).rank == 1


def test_with_every_rank_at_the_same_step_and_nothing_else_it_waits_for_90_percent_of_the_limit():
    late = STALL_LATE * STALL_MIN_S
    assert stall_call([rank(0, 20, late - 0.1), rank(1, 20, late - 0.1)], FAST) is None
    call = stall_call([rank(0, 20, late), rank(1, 20, late)], FAST)
    assert call.rank is None and "every rank stopped after step 20" in call.detail
    assert "which rank the others wait for" in call.detail and len(call.evidence) == 2


def test_one_rank_still_advancing_is_no_stall():
    assert stall_call([rank(0, 25, 0.5), rank(1, 19, 500.0)], FAST) is None


def test_the_stall_records_name_the_rank_that_never_reached_the_sync():
    ranks = [rank(0, 19, 31, position=(20, "gradient_sync"), position_evidence="s_rank0.jsonl:90"),
             rank(1, 19, 31, position=(20, "forward_backward"), position_evidence="s_rank1.jsonl:88"),
             rank(2, 19, 31, position=(20, "gradient_sync"), position_evidence="s_rank2.jsonl:91")]
    call = stall_call(ranks, FAST)
    assert call.rank == 1 and "rank 1 never reached the gradient sync of step 20" in call.detail
    assert "ranks 0, 2 wait in it" in call.detail and call.evidence[0] == "s_rank1.jsonl:88"


def test_a_stream_that_stopped_while_the_others_write_names_its_rank_only_at_90_percent():
    early, late = STALL_EARLY * STALL_MIN_S, STALL_LATE * STALL_MIN_S
    assert stall_call([rank(0, 20, early + 5, idle=3), rank(1, 20, early + 5)], FAST) is None
    call = stall_call([rank(0, 20, late, idle=3), rank(1, 20, late)], FAST)
    assert call.rank == 1 and "rank 1's stream stopped 54 s ago while rank 0 still writes" in call.detail
    # most streams silent (a sampler on rank 0 only): no rank named, never every rank
    many = [rank(0, 20, late, idle=3)] + [rank(r, 20, late) for r in range(1, 8)]
    assert stall_call(many, FAST).rank is None


def test_a_single_rank_is_named_at_90_percent():
    assert stall_call([rank(0, 20, STALL_LATE * STALL_MIN_S - 0.1)], FAST) is None
    assert stall_call([rank(0, 20, STALL_LATE * STALL_MIN_S)], FAST).rank == 0


def test_no_stall_before_the_first_step_after_the_last_or_once_a_rank_has_ended():
    assert stall_call([rank(0, None, 500), rank(1, None, 500)], FAST) is None
    assert stall_call([rank(0, 20, 500, running=False), rank(1, 19, 500)], FAST) is None
    assert stall_call([], FAST) is None
    # every rank reached its max steps: the model is being saved
    assert stall_call([rank(0, 20, 500, max_steps=20), rank(1, 20, 500, max_steps=20)], FAST) is None
    assert stall_call([rank(0, 20, 500, max_steps=20), rank(1, 19, 500, max_steps=20)], FAST).rank == 1


def _window(median: float) -> WindowFigures:
    return WindowFigures(performance=(StepRow(rank=0, step_p50_s=median), StepRow(rank=1, step_p50_s=median)))


def test_a_stall_is_raised_once_and_cleared_when_a_step_ends():
    book, events = AlertBook("s1"), []
    for t in range(0, 120):  # both ranks finished step 20 at t=0; rank 1 is behind from t=0
        events += [(t, e) for e in book.update([rank(0, 20, t), rank(1, 19, t)], _window(FAST), 1, t,
                                               WALL + timedelta(seconds=t))]
    (t, raised), = events
    assert t == 30 and raised.state == "raised" and raised.rank == 1 and raised.raised_at == "2026-01-01T12:00:30.000+00:00"
    assert raised.since == "2026-01-01T11:59:00.000001+00:00" and raised.kind == "stall"
    assert book.shown(119, 60) == (raised,)
    (cleared,) = book.update([rank(0, 20, 121), rank(1, 20, 0)], _window(FAST), 1, 121, WALL + timedelta(seconds=121))
    assert cleared.state == "cleared" and cleared.cleared == "rank 1 finished step 20"
    assert cleared.cleared_at == "2026-01-01T12:02:01.000+00:00" and cleared.since == raised.since
    assert book.update([rank(0, 21, 0), rank(1, 21, 0)], _window(FAST), 1, 122, WALL) == []
    assert book.shown(150, 60) == (cleared,) and book.shown(182, 60) == ()


def test_the_median_step_of_the_window_sets_the_limit():
    book = AlertBook("s1")
    slow = _window(12.0)  # limit 120 s: the rank behind is named at 60 s, not 30
    assert book.update([rank(0, 20, 59), rank(1, 19, 59)], slow, 1, 59, WALL) == []
    assert [e.rank for e in book.update([rank(0, 20, 60), rank(1, 19, 60)], slow, 1, 60, WALL)] == [1]


def test_when_the_session_ends_its_alerts_are_cleared():
    book = AlertBook("s1")
    book.update([rank(0, 20, 40), rank(1, 19, 40)], _window(FAST), 1, 40, WALL)
    (cleared,) = book.update([], WindowFigures(), 1, 50, WALL, ended=True)
    assert cleared.cleared == "the session ended" and book.active == {}
    assert book.update([], WindowFigures(), 1, 51, WALL, ended=True) == []


# --- slowdown --------------------------------------------------------------------------------------
def run_steps(times_of, steps: int, refresh_s: float = 1.0, ranks: int = 2, seed: int = 0):
    """A run of ``steps`` steps per rank, each step taking ``times_of(step)`` seconds (2% noise), followed
    by a refresh every ``refresh_s``: the events as (the last step at that refresh, the alert)."""
    rng = np.random.default_rng(seed)
    book, windows, events = AlertBook("s1"), [deque(maxlen=50) for _ in range(ranks)], []
    step, t, ends = 0, 0.0, 0.0  # ends: when the next step ends
    while step < steps:
        t += refresh_s
        while step < steps and ends + times_of(step + 1) <= t:
            step += 1
            ends += times_of(step)
            for w in windows:
                w.append(times_of(step) * (1 + 0.02 * rng.standard_normal()))
        progress = [RankProgress(r, step, 0.0, 0.0, step_times=tuple(w), recent_from=(None, f"r{r}:{step - 19}"))
                    for r, w in enumerate(windows)]
        events += [(step, e) for e in book.update(progress, WindowFigures(), 0, t, WALL)]
    return events


def slowed(factor: float, at: int, until: int | None = None):
    return lambda step: 0.05 * (factor if at <= step and (until is None or step < until) else 1.0)


def test_a_20_percent_slowdown_is_raised_within_50_steps_once_and_names_every_rank():
    events = run_steps(slowed(1.2, 200), 400)  # 20 steps/s, then 16.7
    raised = [(s, e) for s, e in events if e.state == "raised"]
    (step, alert), = raised
    assert alert.kind == "slowdown" and alert.rank is None and "on every rank" in alert.detail
    assert 200 + 10 <= step < 200 + 50
    assert all(e.state == "raised" for _, e in events)  # still slow: it never clears


@pytest.mark.parametrize("seed", range(5))
def test_a_10_percent_slowdown_or_a_few_very_slow_steps_raise_nothing(seed):
    assert run_steps(slowed(1.1, 100), 300, seed=seed) == []
    assert run_steps(slowed(3.0, 100, until=109), 300, seed=seed) == []  # 9 steps 3x slower: a checkpoint


def test_a_slowdown_is_cleared_when_the_steps_are_back():
    events = run_steps(slowed(1.5, 100, until=200), 400)
    assert [e.state for _, e in events] == ["raised", "cleared"]
    (_, up), (step, down) = events
    assert 200 + 10 <= step < 200 + 50 and "back to" in down.cleared and down.since == up.since


def test_a_slowdown_is_judged_at_checks_in_a_row():
    """Slow at one check, not at the next: no alert; ``SLOWDOWN_CHECKS`` in a row: one."""
    assert SLOWDOWN_CHECKS == 2
    base = [0.05] * 30
    slow = base + [0.05 * SLOWDOWN_RATIO * 1.01] * 20
    fast = base + [0.05] * 20
    book = AlertBook("s1")

    def check(step, times):
        return book.update([RankProgress(0, step, step_times=tuple(times))], WindowFigures(), 0, step, WALL)

    assert check(1, slow) == [] and check(2, fast) == [] and check(3, slow) == []
    assert check(3, slow) == []  # no new step: no check
    assert [e.kind for e in check(4, slow)] == ["slowdown"]


# --- NaN/Inf -----------------------------------------------------------------------------------------
def test_a_nan_loss_is_raised_at_once_and_cleared_by_a_finite_loss():
    nan = (10, "nan_loss", "2026-01-01T11:59:10+00:00", "s_rank0.jsonl:33")
    call = nonfinite_call([rank(0, 10, nonfinite=nan, finite_step=9), rank(1, 10)])
    assert call.rank == 0 and call.detail == "the logged loss is NaN at step 10 on rank 0"
    assert call.since == nan[2] and call.evidence == ("s_rank0.jsonl:33",)
    assert nonfinite_call([rank(0, 10, nonfinite=nan, finite_step=10)]) is not None  # a step at or before: still NaN
    assert nonfinite_call([rank(0, 11, nonfinite=nan, finite_step=11)]) is None
    both = nonfinite_call([rank(0, 10, nonfinite=nan), rank(1, 10, nonfinite=(10, "inf_loss", None, "s_rank1.jsonl:31"))])
    assert both.rank is None and both.detail.endswith("on ranks 0, 1") and len(both.evidence) == 2
    book = AlertBook("s1")
    (raised,) = book.update([rank(0, 10, nonfinite=nan, finite_step=9)], WindowFigures(), 0, 5.0, WALL)
    assert raised.kind == "nonfinite" and raised.since == nan[2]
    assert book.update([rank(0, 10, nonfinite=nan, finite_step=9)], WindowFigures(), 0, 6.0, WALL) == []
    (cleared,) = book.update([rank(0, 12, nonfinite=nan, finite_step=12)], WindowFigures(), 0, 7.0, WALL)
    assert cleared.state == "cleared" and cleared.cleared == "a finite loss was logged after it"


# --- straggler ---------------------------------------------------------------------------------------
def test_a_straggler_is_raised_when_named_in_two_analyses_in_a_row_and_cleared_after_three_without():
    assert (STRAGGLER_CHECKS, STRAGGLER_CLEAR) == (2, 3)
    named = WindowFigures(stragglers=(ArrivalRow(rank=0, is_straggler=False),
                                      ArrivalRow(rank=3, is_straggler=True, median_step_s=0.2, vs_fastest=1.4)))
    none = WindowFigures(stragglers=(ArrivalRow(rank=0, is_straggler=False), ArrivalRow(rank=3, is_straggler=False)))
    book = AlertBook("s1")

    def at(analysis, window):
        return [(e.state, e.rank) for e in book.update([rank(0, 20), rank(3, 20)], window, analysis, 1.0, WALL)]

    assert at(1, named) == [] and at(1, named) == []  # the same analysis counts once
    assert at(2, none) == [] and at(3, named) == []  # not in a row
    assert at(4, named) == [("raised", 3)]
    assert book.active[("straggler", 3)].detail.startswith("rank 3 is a straggler: median step 0.2 s, 1.40x")
    assert at(5, named) == [] and at(6, none) == [] and at(7, none) == [] and at(8, named) == []
    assert at(9, none) == [] and at(10, none) == [] and at(11, none) == [("cleared", 3)]
    assert at(12, named) == [] and at(13, named) == [("raised", 3)]  # it appears again
