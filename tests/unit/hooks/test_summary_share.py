"""The summary's share of training time spent in gradient sync is a share of wall time: per step
the union of its buckets' spans, never the sum of their durations (overlapping buckets: each waits
behind the ones launched before it, so the sum exceeded the step, e.g. "140.0% of training time")."""

from __future__ import annotations

import re

from logkit.schema.records import SESSION_END, SESSION_START
from trainer_hooks.builder import RecordBuilder
from trainer_hooks.commhook import CommTimer, union_length
from trainer_hooks.settings import resolve_settings
from trainer_hooks.summary import build_summary, summary_text


def test_union_length_counts_overlaps_once():
    assert union_length([]) == 0.0
    # [0, 3] holds [1, 2] and overlaps [2.5, 4]: [0, 4]; then [5, 6] apart, [6, 7] touching it
    assert union_length([(2.5, 4.0), (0.0, 3.0), (5.0, 6.0), (1.0, 2.0), (6.0, 7.0)]) == 4.0 + 2.0
    assert union_length([(1.0, 1.5)]) == 0.5


def _timer_with_steps(steps: int, step_s: float, launches: list[float], done: float) -> tuple[list, list]:
    """A CommTimer fed ``steps`` steps, each with buckets launched at ``launches`` (seconds after the
    step's start) and all completing at ``done`` (gloo runs them one after the other: each bucket's
    span includes its wait behind the earlier ones); returns collect's (items, phases) of every step."""
    timer = CommTimer()
    items, phases = [], []
    for k in range(steps):
        begin = 100.0 + k * step_s
        timer.anchor = timer.begin = begin
        timer.pending = [(i, 1000, begin + t, begin + done, i) for i, t in enumerate(launches)]
        got_items, got_phases = timer.collect(k + 1)
        items += got_items
        phases += got_phases
    return items, phases


def test_overlapping_buckets_give_a_share_of_wall_time_not_above_100_percent():
    step_s, launches, done = 0.035, [0.010, 0.012, 0.014], 0.030
    items, phases = _timer_with_steps(10, step_s, launches, done)
    durations = [done - t for t in launches]  # 20, 18, 16 ms: 54 ms of "sync" in a 35 ms step
    assert sum(durations) > step_s
    assert len(phases) == 10 and all(abs(p[6] - (done - min(launches))) < 1e-9 for p in phases)  # 20 ms
    builder = RecordBuilder(resolve_settings("high"), dict(session_id="s", rank=0, world_size=2, local_rank=0),
                            max_steps=10, total_batch_size=None)
    builder.comm(1.7e9, 1.0, items, "wall", group_size=2)
    builder.phases(1.7e9, 1.0, phases, "wall", clock_offset=0.0)
    start = SESSION_START.build(session_id="s", gpus=[])
    end = SESSION_END.build(status="completed", steps_logged=10, samples_seen=0)
    summary = build_summary(start, end, 10 * step_s, builder.comm_stats)
    sync = summary["communication"]["gradient_sync"]
    assert abs(sync["total_time_s"] - 10 * sum(durations)) < 1e-6  # the sum of durations: 154% of training time
    assert abs(sync["in_flight_s"] - 10 * 0.020) < 1e-6
    assert abs(sync["share_of_training_time"] - 0.020 / step_s) < 1e-6  # 57.1%, of wall time
    (line,) = [x for x in summary_text(summary).splitlines() if "gradient_sync" in x]
    (pct,) = re.findall(r"in flight ([0-9.]+)% of training time", line)
    assert float(pct) == round(100 * 0.020 / step_s, 1) and "counted once" in line


def test_the_share_is_never_above_one_and_unknown_without_timed_steps():
    builder = RecordBuilder(resolve_settings("high"), dict(session_id="s", rank=0, world_size=2, local_rank=0),
                            max_steps=None, total_batch_size=None)
    builder.comm(1.7e9, 1.0, [(1, 0, 1000, 0.5)], "wall", group_size=2)
    start = SESSION_START.build(session_id="s", gpus=[])
    end = SESSION_END.build(status="completed", steps_logged=1, samples_seen=0)
    sync = build_summary(start, end, 0.4, builder.comm_stats)["communication"]["gradient_sync"]
    assert sync["share_of_training_time"] is None and sync["in_flight_s"] is None  # no step's spans known
    assert "not measured" in summary_text(build_summary(start, end, 0.4, builder.comm_stats))
    # device time a little past the host's step time (GPU events): capped at the whole of it
    builder.phases(1.7e9, 1.0, [(1, 0.0, 0.1, 0.1, 0.3, 1, 0.45)], "cuda_event", clock_offset=0.0)
    sync = build_summary(start, end, 0.4, builder.comm_stats)["communication"]["gradient_sync"]
    assert sync["in_flight_s"] == 0.45 and sync["share_of_training_time"] == 1.0
