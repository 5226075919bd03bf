"""Our text logs read one line at a time, with the LineKinds of ``logkit.schema``: short logs
whole, and the lines of a long log that the columnar reader (``text_columns``) leaves.
"""

from __future__ import annotations

import math
from datetime import date, datetime, timedelta

from logkit.ingest.readers.base import Read, epoch
from logkit.schema import MB
from logkit.schema import lines as kinds
from logkit.schema.findings import FindingKind
from logkit.schema.records import EventType
from logkit.schema.values import to_float
from logkit.schema.vocab import EventKind

# Header fields ("Key: value") that become meta, and how their value converts.
HEADER_META: dict[str, tuple[str, type]] = {
    "session id": ("session_id", str), "mode": ("mode", str), "gpu count": ("gpu_count", int),
    "world size": ("world_size", int), "model": ("model", str), "distributed backend": ("backend", str),
    "accelerator processes": ("world_size", int), "mixed precision": ("mixed_precision", str),
    "total batch size": ("total_batch_size", int), "per-device batch size": ("per_device_batch_size", int),
    "gradient accumulation steps": ("gradient_accumulation_steps", int),
    "session status": ("status", str),  # the last line of multigpu.log and performance.log: how the run ended
}
_ALERT_LEVELS = ("WARNING", "WARN", "ERROR", "CRITICAL")


class LineReader:
    """Reads our text lines one at a time, in file order, keeping the state they share: the
    last step line (metrics and evaluations belong to it), the open block, the day of
    main.log's clock (which has no date) and the last multi-GPU step line."""

    def __init__(self, read: Read, day: date) -> None:
        self.read, self.day = read, day
        self.state: dict = {}
        self.last_clock: datetime | None = None

    # -- one line ---------------------------------------------------------------------------
    def line(self, number: int, line: str) -> None:
        if not line.strip():
            return
        self.read.lines += 1
        t = None
        if (m := kinds.MAIN_LINE.pattern.match(line)) is not None:
            level, message, t = m["level"], m["message"], self._clock(m["time"])
        elif (m := kinds.PROCESS_LINE.pattern.match(line)) is not None:
            level, message = m["level"], m["message"]
            try:
                t = epoch(datetime.fromisoformat(m["datetime"].replace(",", ".")))
            except ValueError:
                self.read.note(number, f"value does not convert: timestamp {m['datetime']!r}", line)
        else:
            level, message = "INFO", line  # unprefixed main.log lines (step lines, blocks)
            if self._block_line(line):
                self.read.used += 1
                return
        if self._message(number, message, level, t):
            self.read.used += 1
        elif m is not None:
            # A prefixed line is always ours: free text is used; a warning or an error is an event.
            self._level_event(number, level, message, t)
            self.read.used += 1
        else:
            self.read.unmatched(number, line)

    def _clock(self, text: str) -> float | None:
        try:
            clock = datetime.combine(self.day, datetime.strptime(text, "%H:%M:%S").time())
        except ValueError:
            return None
        # main.log has no date: a clock that goes back by more than 12 h crossed midnight
        if self.last_clock is not None and clock < self.last_clock - timedelta(hours=12):
            self.day += timedelta(days=1)
            clock += timedelta(days=1)
        self.last_clock = clock
        return epoch(clock)

    def _block_line(self, line: str) -> bool:
        """A rule or a block title of main.log (they open and close the blocks)."""
        state = self.state
        if kinds.NAN_RULE.parse(line) is not None:
            if state.get("section") == "nan":
                state["section"], state["nan"] = None, None  # the rule that closes the report
            return True
        if (v := kinds.SECTION_LINE.parse(line)) is not None and not kinds.HEADER_FIELD.parse(line.strip()):
            state["section"] = "eval" if "EVAL" in v["title"].upper() else "other"
            return True
        return False

    def _message(self, number: int, message: str, level: str, t: float | None) -> bool:
        """Route one message of our grammar; False when no message kind reads it."""
        for kind, handle in _HANDLERS:
            if (v := kind.parse(message)) is not None:
                handle(self, number, message, level, t, v)
                return True
        return False

    # -- message kinds ----------------------------------------------------------------------
    def _header(self, key: str, value: str, line: int) -> None:
        target = HEADER_META.get(key.strip().lower())
        if target is None:
            return
        name, convert = target
        try:
            self.read.meta.setdefault(name, convert(value.split()[0] if convert is int else value))
        except (ValueError, IndexError):
            self.read.note(line, f"value does not convert: {key}: {value!r}", value)

    def _level_event(self, line: int, level: str, message: str, t: float | None) -> None:
        if level in _ALERT_LEVELS:
            kind = EventKind.ERROR if level in ("ERROR", "CRITICAL") else EventKind.WARNING
            self.read.event(kind, line, time_s=t, rank=0, level=level, message=message)

    def _step_line(self, number, message, level, t, v) -> None:
        row = {"rank": 0, "step": v["step"], "time_s": t, "loss": v["loss"], "learning_rate": v["learning_rate"]}
        self.read.step(number, row)
        self.read.meta.fill(max_steps=v["max_steps"])
        self.state["last_step"], self.state["section"] = row, None

    def _metrics_line(self, number, message, level, t, v) -> None:
        if self.state.get("last_step") is not None:
            self.state["last_step"].update(step_time_s=v["step_duration"], samples_per_s=v["samples_per_second"])

    def _communication(self, number, message, level, t, v) -> None:
        self.read.rows["comm"].append({
            "rank": v["rank"] if v["rank"] is not None else 0, "op": v["op"],
            "size_bytes": round(v["size_mb"] * MB) if math.isfinite(v["size_mb"]) else None,
            "duration_ms": v["duration_ms"], "algbw_mb_s": v["bandwidth_mb_s"],
            "source": f"{self.read.label}:{number}", "time_s": t, "step": self.state.get("multigpu_step"),
        })

    def _multigpu_step(self, number, message, level, t, v) -> None:
        self.state["multigpu_step"] = v["step"]
        self.read.meta.fill(world_size=v["processes"])

    def _performance(self, number, message, level, t, v) -> None:
        self.read.rows["perf"].append({"rank": 0, "time_s": t, **v})

    def _gpu_util_low(self, number, message, level, t, v) -> None:
        self.read.event(EventType.RESOURCE_WARNING, number, time_s=t, rank=0, level=level, message=message,
                        subkind=FindingKind.GPU_UTIL_LOW, value=v["utilization_pct"], gpu=v["gpu"])

    def _slow_step(self, number, message, level, t, v) -> None:
        self.read.event(EventType.ANOMALY, number, time_s=t, rank=0, level=level, message=message, subkind=FindingKind.SLOW_STEP,
                        value=v["step_time_s"])

    def _nan_title(self, number, message, level, t, v) -> None:
        self.state["nan"] = self.read.event(EventType.NAN_DETECTED, number, time_s=t, rank=v["rank"], level=level,
                                            message=message, step=v["step"], subkind=v["kind"])
        self.state["section"] = "nan"

    def _nan_more(self, number, message, level, t, v) -> None:
        pass  # the report names its first tensors only; the JSONL record has them all

    def _nan_dump(self, number, message, level, t, v) -> None:
        if self.state.get("nan") is not None:
            self.state["nan"]["dump_path"] = v["path"]

    def _bullet_line(self, number, message, level, t, v) -> None:
        section = self.state.get("section")
        if section == "nan":
            return  # a tensor of the NaN report: "name (gradient, shape [4, 4]): NaN 3/16, Inf 0/16"
        if section != "eval":
            self._header(v["key"], v["value"], number)
            return
        value = to_float(v["value"])
        if value is None:
            self.read.note(number, f"value does not convert: {v['key']}: {v['value']!r}", message)
            return
        step = self.state["last_step"]["step"] if self.state.get("last_step") else None
        self.read.rows["evals"].append({"step": step, "name": v["key"], "value": value, "rank": 0, "time_s": t})

    def _header_field(self, number, message, level, t, v) -> None:
        self._header(v["key"], v["value"], number)
        self._level_event(number, level, message, t)


# Message kinds, most specific first (the schema's order); each is handled by the method of its name.
_HANDLERS = tuple((kind, getattr(LineReader, f"_{kind.name}")) for kind in kinds.MESSAGE_KINDS)
