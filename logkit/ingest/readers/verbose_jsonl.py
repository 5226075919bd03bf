"""``verbose_training_logs.jsonl``: one stream of our records as a verbose single-process logger
writes it: naive timestamps, no ``elapsed_s``, no rank (rank 0).

Records are mapped as our streams are (the per-line engine and ``mapping``); ``time_s``
comes from the timestamp (read as local time of the writing machine, flagged in meta), and
the ``resource_usage.gpu.devices[]`` of a record become ``gpu`` rows (as a ``gpu_snapshot``
of that moment would).
"""

from __future__ import annotations

from pathlib import Path

from logkit.ingest.jsonl_lines import read_jsonl, read_stream
from logkit.ingest.mapping import TIME, TYPE
from logkit.ingest.readers.base import Read, ReadResult
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.session import iso_seconds
from logkit.schema.records import GPU_DEVICE, GPU_SNAPSHOT, SESSION_START, TRAINING_STEP
from logkit.schema.values import to_int
from logkit.schema.vocab import EventKind

_STAMP, _USAGE = TRAINING_STEP["timestamp"], TRAINING_STEP["resource_usage"]
# resource_usage{}: the sampler's reading, its GPUs as gpu_snapshot's devices[] (under "gpu").
_USAGE_DEVICES = ("gpu", GPU_SNAPSHOT.items_key)
# What a device of resource_usage gives (loggers of this kind wrote these), and an older name.
_DEVICE_FIELDS = ("utilization_pct", "memory_used_mb", "memory_total_mb", "memory_usage_pct", "temperature_c",
                  "power_w")
_OLDER_NAMES = {"utilization_pct": "utilization"}
# Our session_start, or this logger's own name for it.
_STARTS = (SESSION_START.type, EventKind.TRAINING_START)


def _device(dev: dict, i: int) -> dict:
    values = {}
    for name in _DEVICE_FIELDS:
        key = GPU_DEVICE[name].raw[0]
        values[name] = dev.get(key) if key in dev else dev.get(_OLDER_NAMES.get(name, key))
    index = GPU_DEVICE["gpu"].raw[0]
    return GPU_DEVICE.build(gpu=to_int(dev.get(index, i)), **values)


def _snapshot(record: dict, t: float | None) -> dict | None:
    """The GPU snapshot a record's resource_usage holds (None where it holds no devices)."""
    usage = _USAGE.get(record)
    node = usage
    for key in _USAGE_DEVICES:
        node = node.get(key) if isinstance(node, dict) else None
    if not isinstance(node, list) or TYPE.get(record) == GPU_SNAPSHOT.type:
        return None
    devices = [_device(d, i) for i, d in enumerate(d for d in node if isinstance(d, dict))]
    return GPU_SNAPSHOT.build(type=GPU_SNAPSHOT.type, time_s=t, rank=0, host="", devices=devices)


def read_verbose_jsonl(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.VERBOSE_JSONL)
    stream = read_jsonl(read.path)
    read.diagnostics.extend(stream.diagnostics)
    records: list[tuple[int, dict]] = []
    naive = False
    for line, record in stream.records:
        stamp = _STAMP.get(record)
        t = iso_seconds(stamp)
        if isinstance(stamp, str) and "+" not in stamp[10:] and not stamp.endswith("Z"):
            naive = True
        if t is None and stamp is not None:
            read.note(line, f"value does not convert: timestamp {stamp!r}")
        records.append((line, {**record, TIME.raw[0]: t}))
        if (snapshot := _snapshot(record, t)) is not None:
            records.append((line, snapshot))
    read_stream(read.path, 0 if rank is None else rank, read.tables.__setitem__, records=records)
    read.meta.naive_timestamps = naive
    starts = [r for _, r in stream.records if TYPE.get(r) in _STARTS]
    if starts:
        found = ((name, SESSION_START[name].get(starts[0])) for name in ("model", "mode"))
        read.meta.update({k: v for k, v in found if v})
    read.lines = len(stream.records) + len(stream.diagnostics)
    read.used = len(stream.records)
    return read.result()
