"""The emitter's communication and step-phase records and its per-op totals, built directly from
the measurements a hook hands over; every expected field computed here by hand."""

from __future__ import annotations

import pytest

from logkit.schema.records import COMMUNICATION, STEP_PHASES
from trainer_hooks.builder import RecordBuilder
from trainer_hooks.settings import resolve_settings

WALL = 1_733_495_422.5
HEADER = dict(session_id="s", rank=1, world_size=3, local_rank=1)


def test_communication_records_field_by_field_and_the_totals_they_add_up_to():
    builder = RecordBuilder(resolve_settings("high"), HEADER, max_steps=10, total_batch_size=None)
    items = [(2, 0, 6_000_000, 0.004), (2, 1, 3_000_000, 0.0015)]  # (step, bucket, bytes, seconds)
    records = builder.comm(WALL, 3.1234567, items, "cuda_event", group_size=3)
    first, second = (COMMUNICATION.read(r) for r in records)
    factor = 2 * (3 - 1) / 3  # all-reduce over 3 ranks
    assert {k: first[k] for k in ("step", "rank", "time_s", "op", "size_bytes", "duration_ms", "algbw_mb_s",
                                  "busbw_mb_s", "group_size", "bucket", "timing_source", "local_rank")} == {
        "step": 2, "rank": 1, "time_s": 3.123457, "op": "gradient_sync", "size_bytes": 6_000_000, "duration_ms": 4.0,
        "algbw_mb_s": 1500.0, "busbw_mb_s": 2000.0, "group_size": 3, "bucket": 0, "timing_source": "cuda_event",
        "local_rank": 1}
    assert first["message"] == "gradient_sync bucket 0: 6000000 bytes in 4.000 ms"
    assert (second["bucket"], second["duration_ms"], second["algbw_mb_s"]) == (1, 1.5, 2000.0)
    assert second["busbw_mb_s"] == round(2000.0 * factor, 4) == 2666.6667
    assert [r["timestamp"] for r in records] == [WALL, WALL]  # the wall time handed over (the writer formats it)
    # the totals for summary.json add up over calls; a broadcast has its own
    builder.comm(WALL, 4.0, [(3, 0, 1_000_000, 0.001)], "cuda_event", group_size=3)
    (b,) = builder.comm(WALL, 4.0, [(3, 0, 500, 0.0005)], "cuda_event", group_size=3, op="broadcast")
    assert COMMUNICATION.read(b)["busbw_mb_s"] == COMMUNICATION.read(b)["algbw_mb_s"] == 1.0
    g = builder.comm_stats["gradient_sync"]
    assert (g.count, g.bytes, g.algbw_n, g.busbw_n) == (3, 10_000_000, 3, 3)
    assert g.seconds == pytest.approx(0.0065)
    assert g.algbw_sum == pytest.approx(1500.0 + 2000.0 + 1000.0)
    assert g.busbw_sum == pytest.approx((1500.0 + 2000.0 + 1000.0) * factor)
    assert builder.comm_stats["broadcast"].count == 1
    # without per-bucket records the totals still count
    quiet = RecordBuilder(resolve_settings("high", communication_records=False), HEADER, None, None)
    assert quiet.comm(WALL, 1.0, items, "wall", group_size=3) == []
    assert quiet.comm_stats["gradient_sync"].count == 2


def test_step_phase_records_field_by_field():
    builder = RecordBuilder(resolve_settings("high", step_records_every=2), HEADER, max_steps=5, total_batch_size=8)
    items = [(2, 100.5, 0.2, 0.05, 0.0125, 4),  # (step, begin, compute_s, first_ready_s, sync_s, buckets)
             (3, 101.0, 0.2, 0.05, 0.01, 4),  # not a step that gets records (every 2)
             (5, None, None, None, None, 0)]  # the last step always does; nothing measured on it
    records = builder.phases(WALL, 7.0000004, items, "cuda_event", clock_offset=0.25)
    a, b = (STEP_PHASES.read(r) for r in records)
    assert {k: a[k] for k in ("step", "rank", "time_s", "begin_clock_s", "compute_s", "first_ready_s", "sync_s",
                              "buckets", "timing_source")} == {
        "step": 2, "rank": 1, "time_s": 7.0, "begin_clock_s": 100.25, "compute_s": 0.2, "first_ready_s": 0.05,
        "sync_s": 0.0125, "buckets": 4, "timing_source": "cuda_event"}
    assert a["message"] == "Step 2: gradients ready after 200.0 ms, last bucket synced in 12.5 ms"
    assert (b["step"], b["begin_clock_s"], b["compute_s"], b["sync_s"], b["buckets"]) == (5, None, None, None, 0)
    assert b["message"] == "Step 5: gradients ready after ? ms, last bucket synced in ? ms"
    assert [r["timestamp"] for r in records] == [WALL, WALL]


def _pending(step, step_time, batch=8, loss=None, wall=WALL, elapsed=10.0, grad_norm=None):
    from trainer_hooks.steps import PendingStep

    return PendingStep(wall=wall, elapsed=elapsed, step=step, epoch=None, step_time=step_time, data_time=None,
                       batch=batch, tokens=None, avg_step_time=0.5, loss=loss, learning_rate=None, grad_norm=grad_norm)


def test_performance_records_over_each_window_and_a_slow_step_anomaly():
    from logkit.schema.records import ANOMALY, PERFORMANCE, TRAINING_STEP
    from trainer_hooks.writer import iso_timestamp

    settings = resolve_settings("high", performance_log_steps=3, trends=False, resource_usage_steps=0)
    builder = RecordBuilder(settings, HEADER, max_steps=20, total_batch_size=None)
    out = []
    for i, (t, b) in enumerate([(0.5, 8), (0.5, 8), (0.5, None), (0.5, 8), (0.25, 16), (0.5, 8)]):
        out += builder.step(_pending(i + 1, t, batch=b, elapsed=1.0000004 * (i + 1)))
    perf = [(r, PERFORMANCE.read(r)) for r in out if r.get("type") == PERFORMANCE.type]
    (r1, p1), (r2, p2) = perf
    assert (p1["step"], p1["window_steps"], p1["avg_step_time_s"], p1["time_s"]) == (3, 3, 0.5, 3.000001)
    assert (p1["throughput_samples_s"], p1["total_batch_size"]) == (None, None)  # one batch unknown: no figure
    assert p1["message"] == "Performance over 3 steps" and r1["timestamp"] == WALL
    assert p2["throughput_samples_s"] == round(32 / 1.25, 4) and p2["total_batch_size"] is None  # two sizes
    assert p2["avg_step_time_s"] == round(1.25 / 3, 6)
    assert builder.performance(WALL, 99.0) == []  # at session end, nothing since step 6: no record
    # a step 3x slower than the running median, after the detector's five warm-up steps
    for i in range(7, 13):
        out += builder.step(_pending(i, 0.5, elapsed=7.0))
    (record,) = builder.step(_pending(13, 2.0, loss=1.25, wall=WALL + 13, elapsed=13.1234567, grad_norm=0.5))[1:2]
    a = ANOMALY.read(record)
    assert (a["step"], a["time_s"], a["message"]) == (13, 13.123457, "Slow training detected: 2.0s per step")
    assert record["timestamp"] == WALL + 13
    (step_record,) = [r for r in builder.step(_pending(14, 0.5, loss=1.25, wall=WALL, grad_norm=0.75))
                      if r.get("type") == TRAINING_STEP.type]
    s = TRAINING_STEP.read(step_record)
    assert (s["grad_norm"], s["message"]) == (0.75, "Step 14 completed - Loss: 1.250000")
    eta_min = 0.5 * (20 - 14) / 60.0  # the mean step time x the steps left
    assert step_record["timestamp"] == WALL and s["eta_minutes"] == round(eta_min, 3)
    assert s["estimated_completion"] == iso_timestamp(WALL + eta_min * 60)
