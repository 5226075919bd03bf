"""The fast path for our JSONL streams: ``pyarrow.json`` parses each stream in chunks of whole
lines, records are routed by ``type`` with vectorised filters, and each chunk's rows go into
the frames' builders (``frame_builder``) before the next chunk is read: memory is the frames
plus one chunk.

It gives exactly the frames ``records.FrameRows`` gives (tests compare both). A stream it
cannot take whole (a torn or invalid line, a value of an unexpected type, blank lines) returns
None and is read by the per-line reader, which diagnoses each line.
"""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from logkit.ingest.frame_builder import FrameBuilder
from logkit.ingest.records import integer, num
from logkit.schema import EventType

__all__ = ["SCHEMA", "FRAMES", "FastRead", "read_fast", "CHUNK_BYTES"]

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
# Lines are parsed this many bytes at a time (in blocks of BLOCK_BYTES, on all cores): the
# parser's working memory is a few chunks, whatever the size of the stream.
CHUNK_BYTES = 4 << 20
BLOCK_BYTES = 1 << 20
_OPTIONS = pj.ParseOptions(explicit_schema=SCHEMA, unexpected_field_behavior="ignore")
_READ = pj.ReadOptions(block_size=BLOCK_BYTES)
_ROUTED = pa.array([EventType.TRAINING_STEP, EventType.COMMUNICATION, EventType.PERFORMANCE,
                    EventType.GPU_SNAPSHOT, EventType.EVALUATION])
# Records read whole (for meta and the evals frame): few per stream.
_WANTED = pa.array([EventType.EVALUATION, EventType.SESSION_START, EventType.SESSION_END, EventType.MODEL_INFO,
                    EventType.DATASET_INFO, EventType.SYSTEM_INFO])
FRAMES = ("steps", "comm", "perf", "gpu", "events")  # the frames the fast path fills


def _pool() -> pa.MemoryPool:
    """The parser's pool: jemalloc where pyarrow has it (it hands freed parser memory back; the
    default mimalloc keeps tens of MB of it resident), else the default."""
    global _PARSE_POOL
    if _PARSE_POOL is None:
        try:
            _PARSE_POOL = pa.jemalloc_memory_pool()
        except (NotImplementedError, pa.ArrowNotImplementedError):
            _PARSE_POOL = pa.default_memory_pool()
    return _PARSE_POOL


_PARSE_POOL: pa.MemoryPool | None = None


class FastRead:
    """What one stream gave besides the frames' rows (those went into the builders): its
    evaluation rows, and the few whole records meta needs."""

    def __init__(self, evals: list[dict], meta_records: list[tuple[int, dict]]) -> None:
        self.evals, self.meta_records = evals, meta_records


class _Refused(Exception):
    """The stream needs the per-line reader."""


def _chunks(path: Path, chunk_bytes: int) -> Iterator[tuple[bytearray, int]]:
    """Whole lines, about ``chunk_bytes`` at a time, as (buffer, length): one buffer, reused (a
    chunk is read in place, never copied). A stream not ending in a newline is refused."""
    opener = gzip.open if path.name.endswith(".gz") else open
    buf, filled = bytearray(chunk_bytes), 0
    with opener(path, "rb") as fh:
        while True:
            with memoryview(buf) as view:
                got = fh.readinto(view[filled:])
            if not got:
                break
            filled += got
            cut = buf.rfind(b"\n", 0, filled) + 1
            if not cut:
                if filled == len(buf):  # a line longer than the buffer
                    buf = buf + bytearray(len(buf))
                continue
            yield buf, cut
            tail = filled - cut
            buf[:tail] = buf[cut:filled]
            filled = tail
    if filled:
        raise _Refused  # a torn last line


def _line_ends(view: memoryview, step: int = 1 << 20) -> np.ndarray:
    """Offsets of the newlines of ``view`` (scanned a MB at a time: no chunk-sized temporaries)."""
    data = np.frombuffer(view, np.uint8)
    return np.concatenate([np.flatnonzero(data[i:i + step] == 10) + i for i in range(0, len(data), step)]
                          or [np.zeros(0, np.int64)])


def _col(t: pa.Table, name: str, field: str) -> pa.Array:
    return pc.struct_field(t.column(name), field)


def _route(table: pa.Table, line: pa.Array, prefix: pa.Scalar) -> dict[str, pa.Table]:
    """One chunk's rows of each frame, only the columns the frames use."""
    kind = table.column("type")
    out: dict[str, pa.Table] = {}

    def rows(event_type: str, columns: dict) -> pa.Table:
        return pa.table(columns).filter(pc.equal(kind, event_type))

    def source(t: pa.Table) -> pa.Array:
        return pc.binary_join_element_wise(prefix, pc.cast(t.column("_line"), _S), "")

    out["steps"] = rows(EventType.TRAINING_STEP, {
        "rank": table["rank"], "step": table["step"], "time_s": table["elapsed_s"],
        "loss": _col(table, "metrics", "loss"), "learning_rate": _col(table, "metrics", "learning_rate"),
        "grad_norm": _col(table, "metrics", "grad_norm"),
        "step_time_s": _col(table, "timing", "step_time_seconds"),
        "samples_per_s": _col(table, "metrics", "samples_per_second"),
        "tokens_per_s": _col(table, "metrics", "tokens_per_second"),
        "total_batch_size": _col(table, "metrics", "total_batch_size"), "epoch": table["epoch"],
        "data_time_s": _col(table, "timing", "data_time_seconds"),
    })
    t = rows(EventType.COMMUNICATION, {
        "rank": table["rank"], "step": table["step"], "op": table["op"], "size_bytes": table["size_bytes"],
        "duration_ms": table["duration_ms"], "algbw_mb_s": table["algbw_mb_s"], "busbw_mb_s": table["busbw_mb_s"],
        "group_size": table["group_size"], "_line": line, "bucket": table["bucket"],
        "timing_source": table["timing_source"], "time_s": table["elapsed_s"],
    })
    out["comm"] = t.set_column(t.schema.get_field_index("_line"), "source", source(t))
    out["perf"] = rows(EventType.PERFORMANCE, {
        "rank": table["rank"], "step": table["step"], "avg_step_time_s": table["avg_step_time_s"],
        "throughput_samples_s": table["throughput_samples_s"], "total_batch_size": table["total_batch_size"],
        "window_steps": table["window_steps"], "time_s": table["elapsed_s"],
    })
    t = rows(EventType.GPU_SNAPSHOT, {"elapsed_s": table["elapsed_s"], "hostname": table["hostname"],
                                      "rank": table["rank"], "devices": table["devices"]})
    devices = t.column("devices").combine_chunks() if t.num_rows else pa.array([], pa.list_(_DEVICE))
    parent = pc.list_parent_indices(devices) if len(devices) else pa.array([], _I)
    flat = pc.list_flatten(devices)
    if flat.null_count:
        raise _Refused  # a device that is not an object: the per-line reader skips it
    owner = t.take(parent) if len(parent) else t.slice(0, 0)
    out["gpu"] = pa.table({
        "time_s": owner["elapsed_s"], "host": pc.fill_null(owner["hostname"], ""),
        "gpu": pc.struct_field(flat, "index"), "utilization_pct": pc.struct_field(flat, "utilization_percent"),
        "memory_used_mb": pc.struct_field(flat, "memory_used_mb"),
        "memory_total_mb": pc.struct_field(flat, "memory_total_mb"), "power_w": pc.struct_field(flat, "power_w"),
        "temperature_c": pc.struct_field(flat, "temperature_c"), "rank": owner["rank"],
        "memory_usage_pct": pc.struct_field(flat, "memory_usage_percent"),
        "sm_clock_mhz": pc.struct_field(flat, "sm_clock_mhz"),
    })
    t = pa.table({
        "time_s": table["elapsed_s"], "rank": table["rank"], "level": table["level"], "kind": kind,
        "message": table["message"], "_line": line, "step": table["step"], "subkind": table["kind"],
        "value": table["value"], "threshold": table["threshold"],
    }).filter(pc.invert(pc.is_in(kind, _ROUTED)))
    out["events"] = t.set_column(t.schema.get_field_index("_line"), "source", source(t))
    return out


def read_fast(path: Path, file_rank: int, builders: dict[str, FrameBuilder],
              chunk_bytes: int | None = None) -> FastRead | None:
    """Add the stream's rows to ``builders`` (one ``FrameBuilder`` per frame of ``FRAMES``),
    chunk by chunk. None when it needs the per-line reader: the builders are then as before."""
    marks = {name: b.rows for name, b in builders.items()}
    read = _read(path, file_rank, builders, chunk_bytes or CHUNK_BYTES)
    if read is None:
        for name, b in builders.items():
            b.truncate(marks[name])
    return read


def _read(path: Path, file_rank: int, builders: dict[str, FrameBuilder], chunk_bytes: int) -> FastRead | None:
    records: dict[int, dict] = {}
    prefix = pa.scalar(f"{path.name}:")
    first_line, last = 1, None
    try:
        for buf, size in _chunks(path, chunk_bytes):
            with memoryview(buf) as whole, whole[:size] as chunk:
                ends = _line_ends(chunk)
                try:
                    table = pj.read_json(pa.py_buffer(chunk), parse_options=_OPTIONS, read_options=_READ,
                                         memory_pool=_pool())
                except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, ValueError,
                        OverflowError):
                    return None
            n = table.num_rows
            if n != len(ends) or table.column("type").null_count:
                # the parser skips blank lines: those, or records without a type, the per-line reader reports
                return None
            line = pa.array(np.arange(first_line, first_line + n, dtype=np.int64))
            if table.column("rank").null_count:
                table = table.set_column(table.schema.get_field_index("rank"), "rank",
                                         pc.fill_null(table.column("rank"), file_rank))
            for name, part in _route(table, line, prefix).items():
                builders[name].add(part)
            # Evaluations name their metrics freely, and meta wants whole records: parse those few lines.
            wanted = pc.indices_nonzero(pc.is_in(table.column("type"), _WANTED)).to_numpy().astype(np.int64)
            if first_line == 1:
                wanted = np.union1d(wanted, np.zeros(1, np.int64))
            for i in wanted.tolist():
                start = int(ends[i - 1]) + 1 if i else 0
                records[first_line + i] = orjson.loads(bytes(buf[start:int(ends[i])]))
            chunk_last = pc.max(table.column("elapsed_s")).as_py()
            if chunk_last is not None and (last is None or chunk_last > last):
                last = chunk_last
            first_line += n
            del table
    except (_Refused, OSError, EOFError, zlib.error, gzip.BadGzipFile, orjson.JSONDecodeError):
        return None
    if first_line == 1:
        return None  # an empty stream
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
    meta_records = [(k, records[k]) for k in sorted(records)] + [(first_line, {"elapsed_s": last})]
    return FastRead(evals, meta_records)
