"""Rank 0's human-readable logs, rendered from the same records as the JSONL stream.

Runs on the writer thread. Every line shape comes from ``logkit.schema`` (template beside
pattern), so what is written here is what the parsers read; record values are read through
their specs (``logkit.schema.records``).
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
from logkit.schema.findings import FindingKind
from logkit.schema.records import (
    ANOMALY,
    COLLECTIVE,
    ERROR,
    EVALUATION,
    EVENT_TYPES,
    NAN_DETECTED,
    RESOURCE_WARNING,
    SESSION_END,
    SESSION_START,
    TRAINING_STEP,
    RecordSpec,
)
from logkit.schema.records import COMMUNICATION as COMM_RECORD
from logkit.schema.records import PERFORMANCE as PERF_RECORD
from logkit.schema.values import per_second, to_float
from trainer_hooks.layout import COMMON_PART, reader, values_of
from trainer_hooks.settings import LEVELS


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


def _num(value, default=math.nan) -> float:
    """A figure for a line: unknown reads as ``default`` (NaN: the lines write "nan")."""
    number = to_float(value)
    return default if number is None else number


_TYPE_LEVEL = reader(COMMON_PART, "type level")
# the values of the lines written for every step (compiled once: read on the writer thread)
_STEP_VALUES = reader(TRAINING_STEP, "step max_steps loss learning_rate avg_step_time_s eta_minutes step_time_s "
                      "samples_per_s world_size local_rank rank")
_COMM_STEP = COMM_RECORD["step"]
_COMM_VALUES = reader(COMM_RECORD, "op size_bytes duration_ms algbw_mb_s rank world_size local_rank")
_COLLECTIVES = COMM_RECORD["collectives"]
_COLLECTIVE_VALUES = reader(COLLECTIVE, "op size_bytes duration_ms algbw_mb_s")


class TextRenderer:
    """Maps a record to ``(path, line)`` pairs for main, multigpu and performance logs.

    ``log_interval_steps``: a step line in main.log every N steps (the final step always).
    ``comm_log_interval``: the ``Multi-GPU Step`` line, followed by that step's
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
        # the record types that have lines: ``_<type>`` below
        self._handlers = {t: getattr(self, "_" + t) for t in EVENT_TYPES if hasattr(self, "_" + t)}

    def __call__(self, record: dict, wall: float) -> Iterator[tuple[Path, str]]:
        type_, level = _TYPE_LEVEL(record)
        handler = self._handlers.get(type_)
        if handler is None:
            return iter(())
        # unprefixed continuation lines carry their record's level
        level = LEVELS.get(level) or LEVELS.get(str(level or "INFO").upper(), 20)
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
        v = values_of(SESSION_START, r)
        yield self._main(when, "🚀 TRAINING SESSION STARTED")
        for key, value in (("Session ID", v["session_id"]), ("Mode", v["mode"]), ("GPU Count", v["gpu_count"]),
                           ("World size", v["world_size"]), ("Model", v["model"])):
            yield self._main(when, HEADER_FIELD.format(key=key, value=value))
        if (v["config"] or {}).get("force_single_gpu"):
            yield self._main(when, "FORCED SINGLE GPU MODE - Using GPU 0 only", "WARN")
        yield self.main, ""
        yield self.main, "📡 MULTI-GPU CONFIGURATION:" if (v["world_size"] or 1) > 1 else "🖥️ CONFIGURATION:"
        items = [
            ("Accelerator processes", v["world_size"]),
            ("Current process rank", v["rank"]),
            ("Distributed backend", v["backend"] or "none"),
            ("Mixed precision", v["mixed_precision"]),
            ("Per-device batch size", v["per_device_batch_size"]),
            ("Gradient accumulation steps", v["gradient_accumulation_steps"]),
            ("Total batch size", v["total_batch_size"]),
        ]
        items += [(f"GPU {g['index']}", f"{g.get('name')} ({_num(g.get('memory_total_mb'), 0) / 1000:.1f}GB)")
                  for g in v["gpus"] or []]
        for key, value in items:
            yield self.main, BULLET_LINE.format(key=key, value=value)
        yield self.main, ""
        for path in (self.multigpu, self.performance):
            yield self._proc(path, when, HEADER_FIELD.format(key="Session ID", value=v["session_id"]))
        for key, value in (("Distributed backend", v["backend"] or "none"), ("World size", v["world_size"]),
                           ("Local rank", v["local_rank"]), ("Process index", v["rank"]), ("Mode", v["mode"])):
            yield self._proc(self.multigpu, when, HEADER_FIELD.format(key=key, value=value))

    def _training_step_complete(self, r: dict, when: _Stamp):
        step, max_steps, loss, lr, avg, eta, step_time, samples_s, world, local_rank, rank = _STEP_VALUES(r)
        step = int(step)
        max_steps = int(max_steps or step)
        if step % self.log_interval_steps == 0 or step == max_steps:
            yield self.main, STEP_LINE.format(
                step=step, max_steps=max_steps, percent=100.0 * step / max(max_steps, 1), loss=_num(loss),
                learning_rate=_num(lr), steps_per_second=_num(per_second(1.0, avg)), eta_minutes=_num(eta))
            yield self.main, METRICS_LINE.format(step_duration=_num(step_time), samples_per_second=_num(samples_s))
        if (world or 1) > 1 and not self.comm_lines and self._comm_due(step):
            yield self._multigpu_step(step, world, local_rank, rank, when)

    def _comm_due(self, step: int) -> bool:
        return bool(self.comm_log_interval) and step % self.comm_log_interval == 0

    def _multigpu_step(self, step: int, world_size, local_rank, rank, when: _Stamp) -> tuple[Path, str]:
        self._mg_step = step
        return self._proc(self.multigpu, when, MULTIGPU_STEP.format(
            step=step, processes=world_size, local_rank=local_rank or 0, process_index=rank))

    def _communication(self, r: dict, when: _Stamp):
        step = int(_COMM_STEP.get(r) or 0)
        if not self._comm_due(step):
            return
        *own, rank, world, local_rank = _COMM_VALUES(r)
        if self._mg_step != step:
            yield self._multigpu_step(step, world, local_rank, rank, when)
        listed = _COLLECTIVES.get(r)  # a sharded step's collectives: a line each, as a bucket's record has
        for op, size, duration_ms, algbw in (own,) if listed is None else (
                _COLLECTIVE_VALUES(c) for c in listed if isinstance(c, dict)):
            yield self._proc(self.multigpu, when, COMMUNICATION.format(
                op=op, rank=rank, size_mb=size / 1e6, duration_ms=duration_ms, bandwidth_mb_s=_num(algbw)))

    def _performance(self, r: dict, when: _Stamp):
        v = values_of(PERF_RECORD, r)
        if v["throughput_samples_s"] is None or v["total_batch_size"] is None:
            # the performance line has no way to say "unknown": the JSONL record keeps the step times
            return
        yield self._proc(self.performance, when, PERFORMANCE.format(
            step=v["step"], avg_step_time_s=v["avg_step_time_s"], throughput_samples_s=v["throughput_samples_s"],
            total_batch_size=v["total_batch_size"]))

    def _evaluation(self, r: dict, when: _Stamp):
        yield self.main, ""
        yield self.main, f"📊 EVALUATION RESULTS (step {EVALUATION['step'].get(r)}):"
        for key, value in (EVALUATION["metrics"].get(r) or {}).items():
            text = f"{value:.4f}" if isinstance(value, float) and math.isfinite(value) else value
            yield self.main, BULLET_LINE.format(key=key, value=text)
        yield self.main, ""

    def _finding(self, spec: RecordSpec, r: dict, when: _Stamp):
        v = values_of(spec, r)
        if v["subkind"] == FindingKind.GPU_UTIL_LOW:
            message = GPU_UTIL_LOW.format(gpu=v["gpu"] or 0, utilization_pct=v["value"])
        elif v["subkind"] == FindingKind.SLOW_STEP:
            message = SLOW_STEP.format(step_time_s=v["value"])
        else:
            message = v["message"] or ""
        level = "ERROR" if v["level"] == "ERROR" else "WARNING"
        yield self._proc(self.performance, when, message, level)
        if level == "ERROR":
            yield self._main(when, f"⚠️ {message}", "ERROR")

    def _resource_warning(self, r: dict, when: _Stamp):
        return self._finding(RESOURCE_WARNING, r, when)

    def _anomaly(self, r: dict, when: _Stamp):
        return self._finding(ANOMALY, r, when)

    def _nan_detected(self, r: dict, when: _Stamp):
        # the NaN/Inf report, in main.log
        v = values_of(NAN_DETECTED, r)
        tensors = v["tensors"] or []
        yield self.main, "=" * 80
        yield self._main(when, f"NaN/Inf DETECTED [rank {v['rank']}] at step {v['step']} ({v['subkind']})", "ERROR")
        for t in tensors[:10]:
            yield self.main, (f"  • {t['name']} ({t['kind']}, shape {t['shape']}): NaN {t['nan_count']}/{t['numel']}, "
                              f"Inf {t['inf_count']}/{t['numel']}")
        if len(tensors) > 10:
            yield self.main, f"  ... and {len(tensors) - 10} more tensors"
        if v["dump_path"]:
            yield self.main, f"  Debug tensors saved: {v['dump_path']} (safetensors)"
        yield self.main, "=" * 80

    def _error(self, r: dict, when: _Stamp):
        yield self._main(when, f"❌ {ERROR['message'].get(r) or ''}", "ERROR")

    def _session_end(self, r: dict, when: _Stamp):
        v = values_of(SESSION_END, r)
        status = str(v["status"] or "").upper()
        yield self.main, ""
        yield self._main(when, f"🏁 TRAINING SESSION {status}", "INFO" if status == "COMPLETED" else "ERROR")
        for key, value in (("Duration", f"{_num(v['duration_s']):.1f}s"), ("Total steps", v["total_steps"]),
                           ("Final loss", v["final_loss"])):
            yield self._main(when, HEADER_FIELD.format(key=key, value=value))
        for path in (self.multigpu, self.performance):
            yield self._proc(path, when, HEADER_FIELD.format(key="Session status", value=v["status"]))
