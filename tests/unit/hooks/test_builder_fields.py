"""The emitter's records to the digit: each figure rounded as the schema says (times to the
microsecond, rates to 4 or 2 decimals), each record's level, non-finite metrics as null, and
the trends and resource usage a step record carries. Every expected value is worked out by hand
in the comments (inputs chosen with more digits than are kept, so a digit more or less shows)."""

from __future__ import annotations

import math

from logkit.schema.records import COMMUNICATION, PERFORMANCE, STEP_PHASES, TRAINING_STEP
from trainer_hooks.builder import RecordBuilder
from trainer_hooks.settings import resolve_settings
from trainer_hooks.steps import PendingStep

WALL = 1_733_495_422.5
HEADER = dict(session_id="s", rank=0, world_size=4, local_rank=0)


def _pending(step, step_time, *, batch=None, tokens=None, loss=None, lr=None, grad_norm=None, data_time=None,
             avg=0.5, elapsed=10.0, extra=None):
    return PendingStep(wall=WALL, elapsed=elapsed, step=step, epoch=None, step_time=step_time, data_time=data_time,
                       batch=batch, tokens=tokens, avg_step_time=avg, loss=loss, learning_rate=lr,
                       grad_norm=grad_norm, extra_metrics=extra)


def test_a_step_and_its_performance_record_to_the_digit():
    settings = resolve_settings("high", performance_log_steps=1, trends=False, resource_usage_steps=0)
    builder = RecordBuilder(settings, HEADER, max_steps=1000, total_batch_size=7)
    records = builder.step(_pending(2, 0.30000012, batch=7, tokens=1000, data_time=0.01234567, avg=0.23456789,
                                    elapsed=10.12345678))
    step_raw, perf_raw = records
    s = TRAINING_STEP.read(step_raw)
    assert (s["level"], s["message"]) == ("INFO", "Step 2 completed")  # no loss: nothing after "completed"
    assert s["time_s"] == 10.123457  # 10.12345678 to 6 decimals
    assert s["step_time_s"] == 0.3  # 0.30000012 -> 0.300000
    assert s["avg_step_time_s"] == 0.234568
    assert s["data_time_s"] == 0.012346
    assert s["eta_minutes"] == 3.902  # 0.23456789 s x 998 steps left / 60 = 3.90164...
    assert s["samples_per_s"] == 23.3333  # 7 / 0.30000012 = 23.333324...
    assert s["tokens_per_s"] == 3333.33  # 1000 / 0.30000012 = 3333.332...
    p = PERFORMANCE.read(perf_raw)
    assert (p["level"], p["window_steps"], p["total_batch_size"]) == ("INFO", 1, 7)
    assert p["avg_step_time_s"] == 0.3 and p["throughput_samples_s"] == 23.3333


def test_non_finite_metrics_are_null_in_the_record():
    settings = resolve_settings("high", performance_log_steps=0, trends=False, resource_usage_steps=0)
    builder = RecordBuilder(settings, HEADER, max_steps=None, total_batch_size=None)
    (raw,) = builder.step(_pending(1, 0.5, loss=math.inf, lr=math.nan, grad_norm=-math.inf,
                                   extra={"accuracy": math.nan, "ppl": 2.5}))
    s = TRAINING_STEP.read(raw)
    assert (s["loss"], s["learning_rate"], s["grad_norm"]) == (None, None, None)
    assert (raw["metrics"]["accuracy"], raw["metrics"]["ppl"]) == (None, 2.5)
    assert s["message"] == "Step 1 completed - Loss: inf"  # the message still says what it was


def test_communication_and_step_phase_records_to_the_digit():
    builder = RecordBuilder(resolve_settings("high"), HEADER, max_steps=None, total_batch_size=None)
    (raw,) = builder.comm(WALL, 7.12345678, [(1, 0, 7_000_000, 0.0030000013)], "cuda_event", group_size=4)
    c = COMMUNICATION.read(raw)
    assert c["level"] == "INFO" and c["time_s"] == 7.123457
    assert c["duration_ms"] == 3.000001  # 3.0000013 ms to 6 decimals
    assert c["algbw_mb_s"] == 2333.3323  # 7 MB / 0.0030000013 s = 2333.33232...
    assert c["busbw_mb_s"] == 3499.9985  # x 2 (4 - 1) / 4 = 3499.99848...
    (raw,) = builder.phases(WALL, 7.12345678, [(1, 100.12345678, 0.12345678, 0.0123456789, 0.00123456789, 3)],
                            "cuda_event", clock_offset=0.25)
    ph = STEP_PHASES.read(raw)
    assert ph["level"] == "DEBUG" and ph["time_s"] == 7.123457
    assert (ph["begin_clock_s"], ph["compute_s"], ph["first_ready_s"], ph["sync_s"]) == (
        99.873457, 0.123457, 0.012346, 0.001235)


class _Sampler:
    """Resource readings: memory 50, 60, 70 % on successive calls."""

    def __init__(self):
        self.calls = 0

    def resource_usage(self):
        self.calls += 1
        return {"memory": {"usage_percent": 40.0 + 10.0 * self.calls}, "cpu_percent": 12.5}


def test_trends_and_resource_usage_on_the_steps_that_ask_for_them():
    settings = resolve_settings("high", performance_log_steps=0, trends=True, resource_usage_steps=2)
    sampler = _Sampler()
    builder = RecordBuilder(settings, HEADER, max_steps=None, total_batch_size=None, sampler=sampler)
    losses = [5.0, 5.0, 1.0, 0.9, 0.8, 0.7, 0.6]
    times = [0.9, 0.9, 0.5, 0.5, 0.5, 0.5, 0.6]
    steps = {}
    for i, (loss, t) in enumerate(zip(losses, times, strict=True), start=1):
        (raw,) = builder.step(_pending(i, t, loss=loss))
        steps[i] = raw
    usage = {i: TRAINING_STEP.read(r).get("resource_usage") for i, r in steps.items()}
    assert usage == {1: None, 2: {"memory": {"usage_percent": 50.0}, "cpu_percent": 12.5}, 3: None,
                     4: {"memory": {"usage_percent": 60.0}, "cpu_percent": 12.5}, 5: None,
                     6: {"memory": {"usage_percent": 70.0}, "cpu_percent": 12.5}, 7: None}
    assert sampler.calls == 3
    # step 7: the last five losses 1.0 .. 0.6 (mean 0.8, the first two 5.0s out of the window),
    # step times 0.5 x 4 and 0.6 (mean 0.52), memory 50, 60, 70 (mean 60)
    assert TRAINING_STEP.read(steps[7])["trends"] == {
        "loss_trend": {"current": 0.6, "avg_last_5": 0.8, "trend_direction": "decreasing"},
        "step_time_trend": {"current": 0.6, "avg_last_5": 0.52, "trend_direction": "increasing"},
        "memory_usage_trend": {"current": 70.0, "avg_last_5": 60.0, "trend_direction": "increasing"},
    }
    # step 1: one value each, no memory reading yet (no trend rather than a made-up one)
    assert TRAINING_STEP.read(steps[1])["trends"] == {
        "loss_trend": {"current": 5.0, "avg_last_5": 5.0, "trend_direction": "stable"},
        "step_time_trend": {"current": 0.9, "avg_last_5": 0.9, "trend_direction": "stable"},
    }
