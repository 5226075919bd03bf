"""The writer-thread half of the emitter: compact measurements in, full records out.

The training thread hands over a few floats per step and per gradient-sync bucket; this
class, called on the writer thread, rounds them, derives the figures (averages, ETA,
throughput, bandwidth), keeps the performance window, the trends and the findings that
need history (slow steps, loss spikes), and returns the records to write. Its state is
touched by the writer thread only.
"""

from __future__ import annotations

import math
from collections import deque

from logkit.schema import EventType, bandwidth_mb_s, busbw_factor
from trainer_hooks.findings import LossSpikeDetector, SlowStepDetector, trend
from trainer_hooks.settings import LogSettings
from trainer_hooks.writer import iso_timestamp

__all__ = ["RecordBuilder"]


def _finite(value):
    """JSON has no NaN/Inf: they are written as null and reported by their own records."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


class _Window:
    """Running sums over the steps of one performance window (constant memory: at ``low`` the
    window is the whole run)."""

    __slots__ = ("steps", "time", "samples", "unknown_batches", "batches")

    def __init__(self) -> None:
        self.steps, self.time, self.samples, self.unknown_batches = 0, 0.0, 0, 0
        self.batches: set[int] = set()

    def add(self, step_time: float, batch: int | None) -> None:
        self.steps += 1
        self.time += step_time
        if batch:
            self.samples += batch
            if len(self.batches) < 2:  # only "one size or several" matters
                self.batches.add(batch)
        else:
            self.unknown_batches += 1


class RecordBuilder:
    """Builds step, communication and performance records for one rank's stream."""

    def __init__(self, settings: LogSettings, header: dict, max_steps: int | None,
                 total_batch_size: int | None, sampler=None) -> None:
        self.settings = settings
        self.header = header  # session_id, rank, world_size
        self.max_steps = max_steps
        self.total_batch_size = total_batch_size
        self.sampler = sampler
        self.comm_stats: dict[str, list[float]] = {}
        self._window = _Window()
        self._slow = SlowStepDetector(settings.slow_step_factor)
        self._spike = LossSpikeDetector(settings.loss_spike_factor)
        self._recent = {"loss": deque(maxlen=5), "step_time": deque(maxlen=5), "memory": deque(maxlen=5)}
        self._last_step = 0

    def _record(self, type_: str, message: str, wall: float, elapsed: float, step=None, level="INFO",
                **fields) -> dict:
        record = {"timestamp": wall, "elapsed_s": round(elapsed, 6), "type": type_, "level": level,
                  "message": message, **self.header}
        if step is not None:
            record["step"] = step
        record.update(fields)
        return record

    # -- steps -----------------------------------------------------------------------------
    def step(self, wall: float, elapsed: float, step: int, epoch, step_time: float, data_time, batch, tokens,
             metrics: dict, avg_step_time: float, local_rank: int, layer_norms) -> list[dict]:
        s = self.settings
        self._last_step = step
        out = []
        slow = self._slow.check(step_time)
        if slow is not None:
            out.append(self._record(EventType.ANOMALY, f"Slow training detected: {step_time:.1f}s per step",
                                    wall, elapsed, step, "WARNING", **slow))
        loss = metrics.get("loss")
        if loss is not None and math.isfinite(loss):
            self._recent["loss"].append(loss)
            spike = self._spike.check(loss)
            if spike is not None:
                out.append(self._record(EventType.ANOMALY, f"Loss spike at step {step}: {loss:.4f} "
                                        f"(recent median {spike['median']:.4f})", wall, elapsed, step, "WARNING",
                                        **spike))
        self._recent["step_time"].append(step_time)
        remaining = (self.max_steps - step) if self.max_steps else None
        eta_min = avg_step_time * remaining / 60.0 if remaining is not None else None
        timing = {
            "step_time_seconds": round(step_time, 6),
            "avg_step_time_seconds": round(avg_step_time, 6),
            "data_time_seconds": round(data_time, 6) if data_time is not None else None,
            "eta_minutes": round(eta_min, 3) if eta_min is not None else None,
            "estimated_completion": iso_timestamp(wall + eta_min * 60) if eta_min is not None else None,
        }
        values = {k: _finite(v) for k, v in metrics.items()}
        values["samples_per_second"] = round(batch / step_time, 4) if batch and step_time > 0 else None
        values["tokens_per_second"] = round(tokens / step_time, 2) if tokens and step_time > 0 else None
        values["total_batch_size"] = batch
        message = f"Step {step} completed" + (f" - Loss: {loss:.6f}" if loss is not None else "")
        record = self._record(EventType.TRAINING_STEP, message, wall, elapsed, step, max_steps=self.max_steps,
                              epoch=epoch, local_rank=local_rank, timing=timing, metrics=values)
        if s.resource_usage_steps and step % s.resource_usage_steps == 0 and self.sampler is not None:
            usage = self.sampler.resource_usage()
            record["resource_usage"] = usage
            self._recent["memory"].append((usage.get("memory") or {}).get("usage_percent"))
        if s.trends:
            record["trends"] = {k: t for k, t in (
                ("loss_trend", trend(self._recent["loss"])),
                ("step_time_trend", trend(self._recent["step_time"])),
                ("memory_usage_trend", trend(self._recent["memory"])),
            ) if t is not None}
        if layer_norms is not None:
            record["layer_grad_norms"] = layer_norms
        if step % s.step_records_every == 0 or step == self.max_steps:
            out.insert(0, record)
        self._window.add(step_time, batch)
        if s.performance_log_steps and self._window.steps >= s.performance_log_steps:
            out.extend(self.performance(wall, elapsed, step))
        return out

    def performance(self, wall: float, elapsed: float, step: int | None = None) -> list[dict]:
        """A ``performance`` record over the steps since the last one (``performance_log_steps``
        0: only the one at session end, over the whole run).

        Throughput needs the batch size of every step in the window; without it (a
        ``TrainingLogger`` given no batch size) both are None, never a made-up 0.
        """
        w, self._window = self._window, _Window()
        if not w.steps:
            return []
        known = w.unknown_batches == 0
        batch = next(iter(w.batches)) if known and len(w.batches) == 1 else None
        return [self._record(
            EventType.PERFORMANCE, f"Performance over {w.steps} steps", wall, elapsed,
            step if step is not None else self._last_step, window_steps=w.steps,
            avg_step_time_s=round(w.time / w.steps, 6),
            throughput_samples_s=round(w.samples / w.time, 4) if known and w.time > 0 else None,
            total_batch_size=batch,
        )]

    # -- communication ------------------------------------------------------------------------
    def comm(self, wall: float, elapsed: float, items: list, timing_source: str, group_size: int,
             local_rank: int, op: str = "gradient_sync") -> list[dict]:
        """One ``communication`` record per bucket: ``items`` are (step, bucket, bytes, seconds)."""
        out = []
        factor = busbw_factor(op, group_size)
        stats = self.comm_stats.setdefault(op, [0, 0.0, 0.0, 0.0, 0.0])
        for step, bucket, size, seconds in items:
            algbw = bandwidth_mb_s(size, seconds)
            busbw = algbw * factor if factor is not None else math.nan
            stats[0] += 1
            stats[1] += size
            stats[2] += algbw if math.isfinite(algbw) else 0.0
            stats[3] += busbw if math.isfinite(busbw) else 0.0
            stats[4] += seconds
            if self.settings.communication_records:
                out.append(self._record(
                    EventType.COMMUNICATION, f"{op} bucket {bucket}: {size} bytes in {seconds * 1e3:.3f} ms",
                    wall, elapsed, step, op=op, size_bytes=size, duration_ms=round(seconds * 1e3, 6),
                    algbw_mb_s=round(algbw, 4), busbw_mb_s=round(busbw, 4), group_size=group_size,
                    bucket=bucket, timing_source=timing_source, local_rank=local_rank,
                ))
        return out
