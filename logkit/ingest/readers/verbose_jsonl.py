"""Seed 004's ``verbose_training_logs.jsonl``: one stream, naive timestamps, no rank (rank 0).

Records are routed as our own (``records.FrameRows``); ``time_s`` comes from the timestamp
(read as local time of the writing machine, flagged in meta) since there is no ``elapsed_s``,
and ``resource_usage.gpu.devices[]`` of step records become ``gpu`` rows.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from logkit.ingest.jsonl import read_jsonl
from logkit.ingest.readers.base import Read, epoch
from logkit.ingest.records import FrameRows, num

__all__ = ["read_verbose_jsonl"]


def _time(record: dict) -> float | None:
    stamp = record.get("timestamp")
    if not isinstance(stamp, str):
        return None
    try:
        return epoch(datetime.fromisoformat(stamp.replace("Z", "+00:00")))
    except ValueError:
        return None


def read_verbose_jsonl(path: Path, rank: int | None = None) -> Read:
    read = Read(Path(path), "verbose_jsonl")
    stream = read_jsonl(read.path)
    read.diagnostics.extend(stream.diagnostics)
    rows = FrameRows()
    naive = False
    for line, record in stream.records:
        t = _time(record)
        if isinstance(record.get("timestamp"), str) and "+" not in record["timestamp"][10:] \
                and not record["timestamp"].endswith("Z"):
            naive = True
        if t is None and record.get("timestamp") is not None:
            read.note(line, f"value does not convert: timestamp {record.get('timestamp')!r}")
        record = {**record, "elapsed_s": t}
        rows.add(record, read.path, line, 0 if rank is None else rank)
        usage = record.get("resource_usage")
        gpu = usage.get("gpu") if isinstance(usage, dict) else None
        devices = gpu.get("devices") if isinstance(gpu, dict) else None
        if isinstance(devices, list) and record.get("type") != "gpu_snapshot":
            for i, dev in enumerate(d for d in devices if isinstance(d, dict)):
                rows.rows["gpu"].append({
                    "time_s": t, "host": "", "gpu": dev.get("index", i), "rank": 0,
                    "utilization_pct": num(dev.get("utilization_percent", dev.get("utilization"))),
                    "memory_used_mb": num(dev.get("memory_used_mb")), "memory_total_mb": num(dev.get("memory_total_mb")),
                    "memory_usage_pct": num(dev.get("memory_usage_percent")),
                    "temperature_c": num(dev.get("temperature_c")), "power_w": num(dev.get("power_w")),
                })
    read.rows = rows.rows
    read.meta["naive_timestamps"] = naive
    starts = [r for _, r in stream.records if r.get("type") in ("session_start", "training_start")]
    if starts:
        s = starts[0]
        read.meta.update({k: v for k, v in (("model", s.get("model_name")), ("mode", s.get("mode"))) if v})
    read.lines = len(stream.records) + len(stream.diagnostics)
    read.used = len(stream.records)
    return read
