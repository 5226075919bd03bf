"""Rank 0's human-readable logs, rendered from the same records as the JSONL stream.

Runs on the writer thread. Every line shape comes from ``logkit.schema`` (template beside
pattern), so what is written here is what the parsers read.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path

from logkit.schema import (
    BULLET_LINE,
    COMMUNICATION,
    GPU_UTIL_LOW,
    HEADER_FIELD,
    MAIN_LINE,
    METRICS_LINE,
    MULTIGPU_STEP,
    PERFORMANCE,
    PROCESS_LINE,
    SLOW_STEP,
    STEP_LINE,
    SessionFiles,
)
from trainer_hooks.settings import LEVELS

__all__ = ["TextRenderer"]


def _prefixed_level(line: str) -> int:
    for kind in (MAIN_LINE, PROCESS_LINE):
        parsed = kind.parse(line)
        if parsed:
            return LEVELS.get(parsed["level"], 20)
    return -1


class _Stamp:
    """A record's local time as the two text-log prefixes write it (made once per second)."""

    __slots__ = ("second", "hms", "full")

    def __init__(self, second: int) -> None:
        when = datetime.fromtimestamp(second)
        self.second, self.hms, self.full = second, when.strftime("%H:%M:%S"), when.strftime("%Y-%m-%d %H:%M:%S")


def _num(value, default=float("nan")) -> float:
    return default if value is None else float(value)


class TextRenderer:
    """Maps a record to ``(path, line)`` pairs for main, multigpu and performance logs.

    ``log_interval_steps``: a step line in main.log every N steps (the final step always).
    ``comm_log_interval``: the seed-000 ``Multi-GPU Step`` line, followed by that step's
    ``Communication`` lines, in multigpu.log every N steps; 0 turns them off
    (``detailed_communication_logs=False``). Readers attach a Communication line to the
    Multi-GPU Step line above it, so the two are written together: when communication
    records come (``comm_lines``, set once the sync hook is installed), the step line is
    written just before the first Communication line of its step (a timing read from the GPU
    a step late still lands under its own step); otherwise with the step record.
    """

    def __init__(self, folder: Path, files: SessionFiles, log_interval_steps: int = 1,
                 comm_log_interval: int = 1, process_name: str = "MainProcess", main_level: str = "INFO",
                 multigpu_level: str = "INFO") -> None:
        self.main = Path(folder) / files.main_log
        self.multigpu = Path(folder) / files.multigpu_log
        self.performance = Path(folder) / files.performance_log
        self.log_interval_steps = max(1, int(log_interval_steps))
        self.comm_log_interval = int(comm_log_interval)
        self.process = process_name
        self.comm_lines = False
        self._mg_step: int | None = None  # the step of the last Multi-GPU Step line written
        self._stamp: _Stamp | None = None
        # lowest level written per file (TRAINING_LOG_LEVEL / MULTIGPU_LOG_LEVEL)
        self._min_level = {self.main: LEVELS.get(main_level, 20), self.multigpu: LEVELS.get(multigpu_level, 20),
                           self.performance: 0}

    def __call__(self, record: dict, wall: float) -> Iterator[tuple[Path, str]]:
        handler = getattr(self, "_" + str(record.get("type")), None)
        if handler is None:
            return iter(())
        # unprefixed continuation lines carry their record's level
        level = LEVELS.get(str(record.get("level", "INFO")).upper(), 20)
        second = int(wall // 1)
        if self._stamp is None or self._stamp.second != second:
            self._stamp = _Stamp(second)
        return ((path, line) for path, line in handler(record, self._stamp)
                if level >= self._min_level[path] or _prefixed_level(line) >= self._min_level[path])

    # -- line helpers ------------------------------------------------------------------
    def _main(self, when: _Stamp, message: str, level: str = "INFO") -> tuple[Path, str]:
        return self.main, MAIN_LINE.format(time=when.hms, level=level, message=message)

    def _proc(self, path: Path, when: _Stamp, message: str, level: str = "INFO") -> tuple[Path, str]:
        return path, PROCESS_LINE.format(datetime=when.full, level=level,
                                         process=self.process, message=message)

    # -- record kinds ------------------------------------------------------------------
    def _session_start(self, r: dict, when: _Stamp):
        yield self._main(when, "🚀 TRAINING SESSION STARTED")
        for key, value in (("Session ID", r["session_id"]), ("Mode", r.get("mode")),
                           ("GPU Count", r.get("gpu_count")), ("World size", r.get("world_size")),
                           ("Model", r.get("model_name"))):
            yield self._main(when, HEADER_FIELD.format(key=key, value=value))
        if (r.get("config") or {}).get("force_single_gpu"):
            yield self._main(when, "FORCED SINGLE GPU MODE - Using GPU 0 only", "WARN")
        yield self.main, ""
        yield self.main, "📡 MULTI-GPU CONFIGURATION:" if r.get("world_size", 1) > 1 else "🖥️ CONFIGURATION:"
        items = [
            ("Accelerator processes", r.get("world_size")),
            ("Current process rank", r.get("rank")),
            ("Distributed backend", r.get("backend") or "none"),
            ("Mixed precision", r.get("mixed_precision")),
            ("Per-device batch size", r.get("per_device_batch_size")),
            ("Gradient accumulation steps", r.get("gradient_accumulation_steps")),
            ("Total batch size", r.get("total_batch_size")),
        ]
        items += [(f"GPU {g['index']}", f"{g.get('name')} ({_num(g.get('memory_total_mb'), 0) / 1000:.1f}GB)")
                  for g in r.get("gpus") or []]
        for key, value in items:
            yield self.main, BULLET_LINE.format(key=key, value=value)
        yield self.main, ""
        for path in (self.multigpu, self.performance):
            yield self._proc(path, when, HEADER_FIELD.format(key="Session ID", value=r["session_id"]))
        for key, value in (("Distributed backend", r.get("backend") or "none"), ("World size", r.get("world_size")),
                           ("Local rank", r.get("local_rank")), ("Process index", r.get("rank")),
                           ("Mode", r.get("mode"))):
            yield self._proc(self.multigpu, when, HEADER_FIELD.format(key=key, value=value))

    def _training_step_complete(self, r: dict, when: _Stamp):
        step, max_steps = int(r["step"]), int(r.get("max_steps") or r["step"])
        timing, metrics = r.get("timing") or {}, r.get("metrics") or {}
        if step % self.log_interval_steps == 0 or step == max_steps:
            avg = _num(timing.get("avg_step_time_seconds"))
            yield self.main, STEP_LINE.format(
                step=step, max_steps=max_steps, percent=100.0 * step / max(max_steps, 1),
                loss=_num(metrics.get("loss")), learning_rate=_num(metrics.get("learning_rate")),
                steps_per_second=1.0 / avg if avg and avg > 0 else float("nan"),
                eta_minutes=_num(timing.get("eta_minutes")),
            )
            yield self.main, METRICS_LINE.format(step_duration=_num(timing.get("step_time_seconds")),
                                                 samples_per_second=_num(metrics.get("samples_per_second")))
        if r.get("world_size", 1) > 1 and not self.comm_lines and self._comm_due(step):
            yield self._multigpu_step(r, step, when)

    def _comm_due(self, step: int) -> bool:
        return bool(self.comm_log_interval) and step % self.comm_log_interval == 0

    def _multigpu_step(self, r: dict, step: int, when: _Stamp) -> tuple[Path, str]:
        self._mg_step = step
        return self._proc(self.multigpu, when, MULTIGPU_STEP.format(
            step=step, processes=r["world_size"], local_rank=r.get("local_rank", 0), process_index=r["rank"]))

    def _communication(self, r: dict, when: _Stamp):
        step = int(r.get("step") or 0)
        if not self._comm_due(step):
            return
        if self._mg_step != step:
            yield self._multigpu_step(r, step, when)
        yield self._proc(self.multigpu, when, COMMUNICATION.format(
            op=r["op"], rank=r["rank"], size_mb=r["size_bytes"] / 1e6, duration_ms=r["duration_ms"],
            bandwidth_mb_s=_num(r.get("algbw_mb_s"))))

    def _performance(self, r: dict, when: _Stamp):
        if r.get("throughput_samples_s") is None or r.get("total_batch_size") is None:
            # seed 000's line has no way to say "unknown": the JSONL record keeps the step times
            return
        yield self._proc(self.performance, when, PERFORMANCE.format(
            step=r["step"], avg_step_time_s=r["avg_step_time_s"], throughput_samples_s=r["throughput_samples_s"],
            total_batch_size=r["total_batch_size"]))

    def _evaluation(self, r: dict, when: _Stamp):
        yield self.main, ""
        yield self.main, f"📊 EVALUATION RESULTS (step {r.get('step')}):"
        for key, value in (r.get("metrics") or {}).items():
            text = f"{value:.4f}" if isinstance(value, float) and math.isfinite(value) else value
            yield self.main, BULLET_LINE.format(key=key, value=text)
        yield self.main, ""

    def _resource_warning(self, r: dict, when: _Stamp):
        kind = r.get("kind")
        if kind == "gpu_util_low":
            message = GPU_UTIL_LOW.format(gpu=r.get("gpu", 0), utilization_pct=r["value"])
        elif kind == "slow_step":
            message = SLOW_STEP.format(step_time_s=r["value"])
        else:
            message = r.get("message", "")
        level = "ERROR" if r.get("level") == "ERROR" else "WARNING"
        yield self._proc(self.performance, when, message, level)
        if level == "ERROR":
            yield self._main(when, f"⚠️ {message}", "ERROR")

    _anomaly = _resource_warning

    def _nan_detected(self, r: dict, when: _Stamp):
        # seed 003's report, in main.log
        tensors = r.get("tensors") or []
        yield self.main, "=" * 80
        yield self._main(when, f"NaN/Inf DETECTED [rank {r.get('rank')}] at step {r.get('step')} ({r.get('kind')})",
                         "ERROR")
        for t in tensors[:10]:
            yield self.main, (f"  • {t['name']} ({t['kind']}, shape {t['shape']}): NaN {t['nan_count']}/{t['numel']}, "
                              f"Inf {t['inf_count']}/{t['numel']}")
        if len(tensors) > 10:
            yield self.main, f"  ... and {len(tensors) - 10} more tensors"
        if r.get("dump_path"):
            yield self.main, f"  Debug tensors saved: {r['dump_path']} (safetensors)"
        yield self.main, "=" * 80

    def _error(self, r: dict, when: _Stamp):
        yield self._main(when, f"❌ {r.get('message', '')}", "ERROR")

    def _session_end(self, r: dict, when: _Stamp):
        status = str(r.get("status", "")).upper()
        yield self.main, ""
        yield self._main(when, f"🏁 TRAINING SESSION {status}", "INFO" if status == "COMPLETED" else "ERROR")
        for key, value in (("Duration", f"{_num(r.get('duration_s')):.1f}s"), ("Total steps", r.get("total_steps")),
                           ("Final loss", r.get("final_loss"))):
            yield self._main(when, HEADER_FIELD.format(key=key, value=value))
        for path in (self.multigpu, self.performance):
            yield self._proc(path, when, HEADER_FIELD.format(key="Session status", value=r.get("status")))
