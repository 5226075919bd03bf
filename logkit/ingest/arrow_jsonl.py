"""The fast path for our JSONL streams: one ``pyarrow.json`` parse per file, routed by ``type``
with vectorised filters, instead of a Python loop over records.

It gives exactly the frames ``records.FrameRows`` gives (tests compare both). A stream it
cannot take whole (a torn or invalid line, a value of an unexpected type, blank lines) returns
None and is read by the per-line reader, which diagnoses each line.
"""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from logkit.ingest.records import integer, num
from logkit.schema import EventType

__all__ = ["SCHEMA", "FastRead", "read_fast"]

_F, _I, _S = pa.float64(), pa.int64(), pa.string()
_DEVICE = pa.struct([("index", _I), ("utilization_percent", _F), ("memory_used_mb", _F), ("memory_total_mb", _F),
                     ("power_w", _F), ("temperature_c", _F), ("memory_usage_percent", _F), ("sm_clock_mhz", _F)])
# Only the keys the frames use: pyarrow skips the rest (config{}, versions{}, resource_usage{} ...).
SCHEMA = pa.schema([
    ("type", _S), ("elapsed_s", _F), ("rank", _I), ("step", _I), ("level", _S), ("message", _S), ("epoch", _F),
    ("timing", pa.struct([("step_time_seconds", _F), ("data_time_seconds", _F)])),
    ("metrics", pa.struct([("loss", _F), ("learning_rate", _F), ("grad_norm", _F), ("samples_per_second", _F),
                           ("tokens_per_second", _F), ("total_batch_size", _I)])),
    ("op", _S), ("size_bytes", _I), ("duration_ms", _F), ("algbw_mb_s", _F), ("busbw_mb_s", _F),
    ("group_size", _I), ("bucket", _I), ("timing_source", _S),
    ("avg_step_time_s", _F), ("throughput_samples_s", _F), ("total_batch_size", _I), ("window_steps", _I),
    ("hostname", _S), ("devices", pa.list_(_DEVICE)), ("kind", _S), ("value", _F), ("threshold", _F),
])
BLOCK_BYTES = 2 << 20
_OPTIONS = pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")
_ROUTED = (EventType.TRAINING_STEP, EventType.COMMUNICATION, EventType.PERFORMANCE, EventType.GPU_SNAPSHOT,
           EventType.EVALUATION)


class FastRead:
    """Frames (as arrow tables) of one stream, and the few records meta needs."""

    def __init__(self, tables: dict[str, pa.Table], meta_records: list[tuple[int, dict]]) -> None:
        self.tables, self.meta_records = tables, meta_records


def _data(path: Path) -> bytes | None:
    try:
        if path.name.endswith(".gz"):
            with gzip.open(path, "rb") as fh:
                return fh.read()
        return path.read_bytes()
    except (OSError, EOFError, zlib.error):
        return None


def _col(table: pa.Table, name: str, field: str | None = None) -> pa.Array:
    col = table.column(name)
    if field is not None:
        col = pc.struct_field(col, field)
    return col


def read_fast(path: Path, file_rank: int) -> FastRead | None:
    """The stream's frames, or None when it needs the per-line reader."""
    data = _data(path)
    if data is None or not data.endswith(b"\n") or b"\n\n" in data or data.startswith(b"\n"):
        return None
    try:
        # Blocks of a few MB: the parser's working memory is a few times its block, not the file.
        table = pj.read_json(pa.BufferReader(data), parse_options=_OPTIONS,
                             read_options=pj.ReadOptions(block_size=BLOCK_BYTES))
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, ValueError, OverflowError):
        return None
    n = table.num_rows
    if n != data.count(b"\n") or table.column("type").null_count:
        return None  # whitespace-only lines or records without a type: the per-line reader says which
    line = pa.array(range(1, n + 1), _I)
    table = table.append_column("_line", line)
    rank = pc.fill_null(table.column("rank"), file_rank)
    table = table.set_column(table.schema.get_field_index("rank"), "rank", rank)
    kind = table.column("type")
    tables: dict[str, pa.Table] = {}
    prefix = pa.scalar(f"{path.name}:")

    def rows(event_type: str) -> pa.Table:
        return table.filter(pc.equal(kind, event_type))

    def source(t: pa.Table) -> pa.Array:
        return pc.binary_join_element_wise(prefix, pc.cast(t.column("_line"), _S), "")

    t = rows(EventType.TRAINING_STEP)
    tables["steps"] = pa.table({
        "rank": t["rank"], "step": t["step"], "time_s": t["elapsed_s"],
        "loss": _col(t, "metrics", "loss"), "learning_rate": _col(t, "metrics", "learning_rate"),
        "grad_norm": _col(t, "metrics", "grad_norm"), "step_time_s": _col(t, "timing", "step_time_seconds"),
        "samples_per_s": _col(t, "metrics", "samples_per_second"),
        "tokens_per_s": _col(t, "metrics", "tokens_per_second"),
        "total_batch_size": _col(t, "metrics", "total_batch_size"), "epoch": t["epoch"],
        "data_time_s": _col(t, "timing", "data_time_seconds"),
    })
    t = rows(EventType.COMMUNICATION)
    tables["comm"] = pa.table({
        "rank": t["rank"], "step": t["step"], "op": t["op"], "size_bytes": t["size_bytes"],
        "duration_ms": t["duration_ms"], "algbw_mb_s": t["algbw_mb_s"], "busbw_mb_s": t["busbw_mb_s"],
        "group_size": t["group_size"], "source": source(t), "bucket": t["bucket"],
        "timing_source": t["timing_source"], "time_s": t["elapsed_s"],
    })
    t = rows(EventType.PERFORMANCE)
    tables["perf"] = pa.table({
        "rank": t["rank"], "step": t["step"], "avg_step_time_s": t["avg_step_time_s"],
        "throughput_samples_s": t["throughput_samples_s"], "total_batch_size": t["total_batch_size"],
        "window_steps": t["window_steps"], "time_s": t["elapsed_s"],
    })
    t = rows(EventType.GPU_SNAPSHOT)
    devices = t.column("devices").combine_chunks() if t.num_rows else pa.array([], pa.list_(_DEVICE))
    parent = pc.list_parent_indices(devices) if len(devices) else pa.array([], _I)
    flat = pc.list_flatten(devices)
    if flat.null_count:
        return None  # a device that is not an object: the per-line reader skips it
    owner = t.take(parent) if len(parent) else t.slice(0, 0)
    tables["gpu"] = pa.table({
        "time_s": owner["elapsed_s"], "host": pc.fill_null(owner["hostname"], ""),
        "gpu": pc.struct_field(flat, "index"), "utilization_pct": pc.struct_field(flat, "utilization_percent"),
        "memory_used_mb": pc.struct_field(flat, "memory_used_mb"),
        "memory_total_mb": pc.struct_field(flat, "memory_total_mb"), "power_w": pc.struct_field(flat, "power_w"),
        "temperature_c": pc.struct_field(flat, "temperature_c"), "rank": owner["rank"],
        "memory_usage_pct": pc.struct_field(flat, "memory_usage_percent"),
        "sm_clock_mhz": pc.struct_field(flat, "sm_clock_mhz"),
    })
    others = table.filter(pc.invert(pc.is_in(kind, pa.array(_ROUTED[:4]))))
    t = others.filter(pc.not_equal(others.column("type"), EventType.EVALUATION))
    tables["events"] = pa.table({
        "time_s": t["elapsed_s"], "rank": t["rank"], "level": t["level"], "kind": t["type"],
        "message": t["message"], "source": source(t), "step": t["step"], "subkind": t["kind"],
        "value": t["value"], "threshold": t["threshold"],
    })
    # Evaluations name their metrics freely, and meta wants whole records: parse those few lines.
    wanted = others.filter(pc.is_in(others.column("type"), pa.array([EventType.EVALUATION, EventType.SESSION_START,
                                                                      EventType.SESSION_END])))
    wanted_lines = set(wanted.column("_line").to_pylist()) | {1}
    records: dict[int, dict] = {}
    number, start = 1, 0
    for want in sorted(wanted_lines):  # walk to each wanted line without splitting the whole file
        while number < want:
            start = data.index(b"\n", start) + 1
            number += 1
        records[want] = orjson.loads(data[start:data.index(b"\n", start)])
    evals: list[dict] = []
    for number in sorted(records):
        rec = records[number]
        if rec.get("type") != EventType.EVALUATION:
            continue
        metrics = rec.get("metrics") if isinstance(rec.get("metrics"), dict) else {}
        r = integer(rec.get("rank"))
        r = file_rank if r is None else r
        for name, value in metrics.items():
            evals.append({"step": integer(rec.get("step")), "name": str(name), "value": num(value), "rank": r,
                          "time_s": num(rec.get("elapsed_s"))})
    tables["evals"] = evals  # type: ignore[assignment]  # rows; make_frame coerces them
    last = pc.max(table.column("elapsed_s")).as_py()
    meta_records = [(k, records[k]) for k in sorted(records)] + [(n + 1, {"elapsed_s": last})]
    return FastRead(tables, meta_records)
