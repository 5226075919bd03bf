"""Our text logs (``*_main.log``, ``*_multigpu.log``, ``*_performance.log``), read with the
LineKinds of ``logkit.schema``. Used when a session has no JSONL streams (seed 000 folders).
"""

from __future__ import annotations

import math
import re
from datetime import date, datetime, timedelta
from pathlib import Path

from logkit.ingest.readers.base import Read, epoch, read_bytes, text_lines
from logkit.schema import (
    BULLET_LINE,
    COMMUNICATION,
    GPU_UTIL_LOW,
    HEADER_FIELD,
    MAIN_LINE,
    MB,
    METRICS_LINE,
    MULTIGPU_STEP,
    NAN_DUMP,
    NAN_MORE,
    NAN_RULE,
    NAN_TITLE,
    PERFORMANCE,
    PROCESS_LINE,
    SECTION_LINE,
    SLOW_STEP,
    STEP_LINE,
)

__all__ = ["read_logkit_text", "HEADER_META", "LineReader", "BULK_MIN_LINES"]

# Header fields ("Key: value") that become meta, and how their value converts.
HEADER_META: dict[str, tuple[str, type]] = {
    "session id": ("session_id", str), "mode": ("mode", str), "gpu count": ("gpu_count", int),
    "world size": ("world_size", int), "model": ("model", str), "distributed backend": ("backend", str),
    "accelerator processes": ("world_size", int), "mixed precision": ("mixed_precision", str),
    "total batch size": ("total_batch_size", int), "per-device batch size": ("per_device_batch_size", int),
    "gradient accumulation steps": ("gradient_accumulation_steps", int),
}
_DATE_IN_NAME = re.compile(r"(\d{8})_\d{6}")


def _date_hint(path: Path) -> date:
    m = _DATE_IN_NAME.search(path.name)
    if m:
        try:
            return datetime.strptime(m[1], "%Y%m%d").date()
        except ValueError:
            pass
    return date(1970, 1, 1)


def _header(read: Read, key: str, value: str, line: int) -> None:
    target = HEADER_META.get(key.strip().lower())
    if target is None:
        return
    name, convert = target
    try:
        read.meta.setdefault(name, convert(value.split()[0] if convert is int else value))
    except (ValueError, IndexError):
        read.note(line, f"value does not convert: {key}: {value!r}", value)


def _level_event(read: Read, line: int, level: str, message: str, t: float | None) -> None:
    if level in ("WARNING", "WARN", "ERROR", "CRITICAL"):
        kind = "error" if level in ("ERROR", "CRITICAL") else "warning"
        read.event(kind, line, time_s=t, rank=0, level=level, message=message)


def _message(read: Read, number: int, message: str, level: str, t: float | None, state: dict) -> bool:
    """Route one message of our grammar; False when no message kind reads it."""
    if (v := STEP_LINE.parse(message)) is not None:
        row = {"rank": 0, "step": v["step"], "time_s": t, "loss": v["loss"], "learning_rate": v["learning_rate"]}
        read.step(number, row)
        read.meta.setdefault("max_steps", v["max_steps"])
        state["last_step"], state["section"] = row, None
    elif (v := METRICS_LINE.parse(message)) is not None:
        if state.get("last_step") is not None:
            state["last_step"].update(step_time_s=v["step_duration"], samples_per_s=v["samples_per_second"])
    elif (v := COMMUNICATION.parse(message)) is not None:
        read.rows["comm"].append({
            "rank": v["rank"] if v["rank"] is not None else 0, "op": v["op"],
            "size_bytes": round(v["size_mb"] * MB) if math.isfinite(v["size_mb"]) else None,
            "duration_ms": v["duration_ms"], "algbw_mb_s": v["bandwidth_mb_s"],
            "source": f"{read.label}:{number}", "time_s": t, "step": state.get("multigpu_step"),
        })
    elif (v := MULTIGPU_STEP.parse(message)) is not None:
        state["multigpu_step"] = v["step"]
        read.meta.setdefault("world_size", v["processes"])
    elif (v := PERFORMANCE.parse(message)) is not None:
        read.rows["perf"].append({"rank": 0, "time_s": t, **v})
    elif (v := GPU_UTIL_LOW.parse(message)) is not None:
        read.event("resource_warning", number, time_s=t, rank=0, level=level, message=message,
                   subkind="gpu_util_low", value=v["utilization_pct"], gpu=v["gpu"])
    elif (v := SLOW_STEP.parse(message)) is not None:
        read.event("anomaly", number, time_s=t, rank=0, level=level, message=message, subkind="slow_step",
                   value=v["step_time_s"])
    elif (v := NAN_TITLE.parse(message)) is not None:
        state["nan"] = read.event("nan_detected", number, time_s=t, rank=v["rank"], level=level, message=message,
                                  step=v["step"], subkind=v["kind"])
        state["section"] = "nan"
    elif NAN_MORE.parse(message) is not None:
        pass  # the report names its first tensors only; the JSONL record has them all
    elif (v := NAN_DUMP.parse(message)) is not None:
        if state.get("nan") is not None:
            state["nan"]["dump_path"] = v["path"]
    elif (v := BULLET_LINE.parse(message)) is not None:
        if state.get("section") == "nan":
            pass  # a tensor of the NaN report: "name (gradient, shape [4, 4]): NaN 3/16, Inf 0/16"
        elif state.get("section") == "eval":
            try:
                value = float(v["value"])
            except ValueError:
                read.note(number, f"value does not convert: {v['key']}: {v['value']!r}", message)
                return True
            step = state["last_step"]["step"] if state.get("last_step") else None
            read.rows["evals"].append({"step": step, "name": v["key"], "value": value, "rank": 0, "time_s": t})
        else:
            _header(read, v["key"], v["value"], number)
    elif (v := HEADER_FIELD.parse(message)) is not None:
        _header(read, v["key"], v["value"], number)
        _level_event(read, number, level, message, t)
    else:
        return False
    return True


def read_logkit_text(path: Path, rank: int | None = None) -> Read:
    """Steps, comm, perf, evals, warnings and header meta from one of our text logs."""
    read = Read(Path(path), "logkit_text")
    data = read_bytes(read.path, read)
    if (len(data) > 1 << 20 or data.count(b"\n") >= BULK_MIN_LINES) and not read.diagnostics:
        from logkit.ingest.readers.text_columns import read_bulk

        bulk = read_bulk(read.path, data, _date_hint(read.path))
        if bulk is not None:
            return bulk
    reader = LineReader(read, _date_hint(read.path))
    for number, line in enumerate(text_lines(data, read), start=1):
        reader.line(number, line)
    return read


# Files with fewer lines are read line by line (the columnar reader's set-up costs more).
BULK_MIN_LINES = 2000


class LineReader:
    """Reads our text lines one at a time, in file order, keeping the state they share: the
    last step line (metrics and evaluations belong to it), the open block, the day of
    main.log's clock (which has no date) and the last multi-GPU step line."""

    def __init__(self, read: Read, day: date) -> None:
        self.read, self.day = read, day
        self.state: dict = {}
        self.last_clock: datetime | None = None

    def line(self, number: int, line: str) -> None:
        read, state = self.read, self.state
        if not line.strip():
            return
        read.lines += 1
        t = None
        if (m := MAIN_LINE.pattern.match(line)) is not None:
            level, message = m["level"], m["message"]
            try:
                clock = datetime.combine(self.day, datetime.strptime(m["time"], "%H:%M:%S").time())
            except ValueError:
                clock = None
            if clock is not None:
                # main.log has no date: a clock that goes back by more than 12 h crossed midnight
                if self.last_clock is not None and clock < self.last_clock - timedelta(hours=12):
                    self.day += timedelta(days=1)
                    clock += timedelta(days=1)
                self.last_clock = clock
                t = epoch(clock)
        elif (m := PROCESS_LINE.pattern.match(line)) is not None:
            level, message = m["level"], m["message"]
            try:
                t = epoch(datetime.fromisoformat(m["datetime"].replace(",", ".")))
            except ValueError:
                read.note(number, f"value does not convert: timestamp {m['datetime']!r}", line)
        else:
            level, message = "INFO", line  # unprefixed main.log lines (step lines, blocks)
            if NAN_RULE.parse(line) is not None:
                if state.get("section") == "nan":
                    state["section"], state["nan"] = None, None  # the rule that closes the report
                read.used += 1
                return
            if (v := SECTION_LINE.parse(line)) is not None and not HEADER_FIELD.parse(line.strip()):
                state["section"] = "eval" if "EVAL" in v["title"].upper() else "other"
                read.used += 1
                return
        if _message(read, number, message, level, t, state):
            read.used += 1
        elif m is not None:
            # A prefixed line is always ours: free text is used; a warning or an error is an event.
            _level_event(read, number, level, message, t)
            read.used += 1
        else:
            read.unmatched(number, line)
