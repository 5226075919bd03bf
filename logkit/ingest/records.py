"""Map JSONL records (LOG_FORMATS.md) to rows of the ``Session`` frames."""

from __future__ import annotations

import math
from pathlib import Path

from logkit.schema import EventType

__all__ = ["FrameRows", "num", "integer", "text", "nonfinite_event"]


def num(value) -> float | None:
    """A number as float; anything else (bool, text, dict, null) is None (NaN in a frame)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value)


def integer(value) -> int | None:
    """An integral number as int; anything else is None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return None


def text(value) -> str | None:
    return value if isinstance(value, str) else None


def nonfinite_event(row: dict) -> dict | None:
    """The ``nan_detected`` event a steps row implies when its loss or grad norm was logged as
    NaN or Inf (in the frame NaN also means "not logged", so the event keeps what was seen)."""
    bad = [(k, row[k]) for k in ("loss", "grad_norm") if isinstance(row.get(k), float) and not math.isfinite(row[k])]
    if not bad:
        return None
    return {"time_s": row.get("time_s"), "rank": row.get("rank"), "level": "ERROR", "kind": "nan_detected",
            "step": row.get("step"), "subkind": f"nan_{bad[0][0]}",
            "message": ", ".join(f"{k} logged as {v}" for k, v in bad)}


def _group(record: dict, key: str) -> dict:
    # A nested group (timing{}, metrics{}) that is missing or malformed reads as empty.
    value = record.get(key)
    return value if isinstance(value, dict) else {}


class FrameRows:
    """Accumulates frame rows from the records of one session's streams."""

    def __init__(self) -> None:
        self.rows: dict[str, list[dict]] = {k: [] for k in ("steps", "comm", "perf", "gpu", "evals", "events")}

    def add(self, record: dict, file: Path, line: int, file_rank: int) -> None:
        """Route one record (already known to be a dict with a string ``type``)."""
        rank = integer(record.get("rank"))
        rank = file_rank if rank is None else rank
        kind = record["type"]
        time_s = num(record.get("elapsed_s"))
        step = integer(record.get("step"))
        source = f"{file.name}:{line}"
        if kind == EventType.TRAINING_STEP:
            timing, metrics = _group(record, "timing"), _group(record, "metrics")
            self.rows["steps"].append({
                "rank": rank, "step": step, "time_s": time_s,
                "loss": num(metrics.get("loss")),
                "learning_rate": num(metrics.get("learning_rate")),
                "grad_norm": num(metrics.get("grad_norm")),
                "step_time_s": num(timing.get("step_time_seconds")),
                "samples_per_s": num(metrics.get("samples_per_second")),
                "tokens_per_s": num(metrics.get("tokens_per_second")),
                "total_batch_size": integer(metrics.get("total_batch_size")),
                "epoch": num(record.get("epoch")),
                "data_time_s": num(timing.get("data_time_seconds")),
            })
            if (event := nonfinite_event(self.rows["steps"][-1])) is not None:
                self.rows["events"].append({**event, "source": source})
        elif kind == EventType.COMMUNICATION:
            self.rows["comm"].append({
                "rank": rank, "step": step, "op": text(record.get("op")),
                "size_bytes": integer(record.get("size_bytes")),
                "duration_ms": num(record.get("duration_ms")),
                "algbw_mb_s": num(record.get("algbw_mb_s")),
                "busbw_mb_s": num(record.get("busbw_mb_s")),
                "group_size": integer(record.get("group_size")),
                "source": source, "bucket": integer(record.get("bucket")),
                "timing_source": text(record.get("timing_source")), "time_s": time_s,
            })
        elif kind == EventType.PERFORMANCE:
            self.rows["perf"].append({
                "rank": rank, "step": step,
                "avg_step_time_s": num(record.get("avg_step_time_s")),
                "throughput_samples_s": num(record.get("throughput_samples_s")),
                "total_batch_size": integer(record.get("total_batch_size")),
                "window_steps": integer(record.get("window_steps")), "time_s": time_s,
            })
        elif kind == EventType.GPU_SNAPSHOT:
            host = text(record.get("hostname")) or ""
            devices = record.get("devices")
            for dev in devices if isinstance(devices, list) else []:
                if not isinstance(dev, dict):
                    continue
                self.rows["gpu"].append({
                    "time_s": time_s, "host": host, "gpu": integer(dev.get("index")),
                    "utilization_pct": num(dev.get("utilization_percent")),
                    "memory_used_mb": num(dev.get("memory_used_mb")),
                    "memory_total_mb": num(dev.get("memory_total_mb")),
                    "power_w": num(dev.get("power_w")),
                    "temperature_c": num(dev.get("temperature_c")),
                    "rank": rank, "memory_usage_pct": num(dev.get("memory_usage_percent")),
                    "sm_clock_mhz": num(dev.get("sm_clock_mhz")),
                })
        elif kind == EventType.EVALUATION:
            for name, value in _group(record, "metrics").items():
                self.rows["evals"].append({"step": step, "name": str(name), "value": num(value),
                                           "rank": rank, "time_s": time_s})
        else:
            message = record.get("message")
            self.rows["events"].append({
                "time_s": time_s, "rank": rank, "level": text(record.get("level")), "kind": kind,
                "message": message if isinstance(message, str) else (None if message is None else str(message)),
                "source": source, "step": step, "subkind": text(record.get("kind")),
                "value": num(record.get("value")), "threshold": num(record.get("threshold")),
            })
