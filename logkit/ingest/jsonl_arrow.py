"""The fast engine for our JSONL streams: ``pyarrow.json`` parses each stream in chunks of whole
lines (``chunks``) into the raw table ``mapping.RAW_SCHEMA`` derives from the record specs,
``mapping.map_records`` makes frame tables of each chunk, and they are added to the session's
frames before the next chunk is read: memory is the frames plus one chunk.

It takes a stream whole or not at all: a stream it cannot take whole (an invalid line, a
value of an unexpected type, blank lines, a device that is not an object) gives back the rows
it added and returns None, and the per-line engine (``jsonl_lines``) reads it, which
diagnoses each line. Only a torn last line (a killed run's) it reads as the per-line engine
would, so that a long stream of a killed run is not read line by line for it.
"""

from __future__ import annotations

import gc
import gzip
import zlib
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from logkit.ingest.assemble import diagnostic
from logkit.ingest.chunks import whole_lines
from logkit.ingest.jsonl_lines import Stream, decode_line
from logkit.ingest.mapping import (
    LINE,
    RAW_SCHEMA,
    TIME,
    TYPE,
    WHOLE_TYPES,
    evals_from,
    map_records,
    raw_records,
)
from logkit.ingest.record_checks import StreamChecks
from logkit.schema.records import GPU_SNAPSHOT

# Lines are parsed this many bytes at a time (in blocks of BLOCK_BYTES, on all cores): the
# parser's working memory is a few chunks, whatever the size of the stream.
CHUNK_BYTES = 4 << 20
BLOCK_BYTES = 1 << 20
_OPTIONS = pj.ParseOptions(explicit_schema=RAW_SCHEMA, unexpected_field_behavior="ignore")
_WHOLE = pa.array(WHOLE_TYPES)
_DEVICES = GPU_SNAPSHOT.items_key
_PARSE_POOL: pa.MemoryPool | None = None


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


def parse(chunk: memoryview, block_bytes: int = BLOCK_BYTES, schema: pa.Schema = RAW_SCHEMA,
          ends: np.ndarray | None = None) -> pa.Table:
    """Whole lines of JSON objects as a raw table of ``schema`` (raises what pyarrow raises on
    anything else; ``pa.ArrowInvalid`` for a line that does not open an object or for invalid
    UTF-8, which are never handed to pyarrow). ``ends``: the newlines' offsets, when the caller has them."""
    if not _objects_only(chunk, _line_ends(chunk) if ends is None else ends):
        raise pa.ArrowInvalid("a line that does not open a JSON object")
    # pyarrow's parser passes invalid UTF-8 through into its strings (they fail later, anywhere):
    # checked here, on the chunk as it is (no copy), so the per-line engine replaces and notes it
    pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, len(chunk)], np.int64)),
                                     pa.py_buffer(chunk)).validate(full=True)
    options = _OPTIONS if schema is RAW_SCHEMA else pj.ParseOptions(explicit_schema=schema,
                                                                      unexpected_field_behavior="ignore")
    return pj.read_json(pa.py_buffer(chunk), parse_options=options,
                        read_options=pj.ReadOptions(block_size=block_bytes), memory_pool=_pool())


class _Refused(Exception):
    """The stream needs the per-line engine."""


def _line_ends(view: memoryview, step: int = 1 << 20) -> np.ndarray:
    """Offsets of the newlines of ``view`` (scanned a MB at a time: no chunk-sized temporaries)."""
    data = np.frombuffer(view, np.uint8)
    return np.concatenate([np.flatnonzero(data[i:i + step] == 10) + i for i in range(0, len(data), step)]
                          or [np.zeros(0, np.int64)])


def _objects_only(chunk: memoryview, ends: np.ndarray) -> bool:
    """Every line opens a JSON object. pyarrow's parser must never see anything else: a bare value
    (``null`` as a stream's first line) crashes the process inside it, before any line is noted."""
    if not len(ends):
        return False
    data = np.frombuffer(chunk, np.uint8)
    starts = np.concatenate([np.zeros(1, np.int64), ends[:-1] + 1])
    return bool((data[starts] == ord("{")).all())


def _release(*views: memoryview) -> None:
    """Let go of the views of the reused buffer before it is refilled. A parse error's traceback
    can keep a view exported until the cyclic garbage collector runs: then it runs, once."""
    for view in views:
        try:
            view.release()
        except BufferError:
            gc.collect()
            view.release()


def _table(buf: bytearray, size: int, first_line: int) -> tuple[pa.Table, np.ndarray]:
    """One chunk's raw table with its line numbers, and where its lines end."""
    table = None
    whole = memoryview(buf)
    chunk = whole[:size]
    try:
        ends = _line_ends(chunk)
        try:  # blank lines, bare values, leading spaces are refused: the per-line engine says what they are
            table = parse(chunk, ends=ends)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, ValueError, OverflowError):
            pass  # not raised from here: its traceback would keep the chunk's buffer exported
    finally:
        _release(chunk, whole)
    if table is None:
        raise _Refused
    n = table.num_rows
    if n != len(ends) or table.column(TYPE.raw[0]).null_count:
        raise _Refused  # the parser skips blank lines: those, or records without a type, the per-line engine reports
    if pc.list_flatten(table.column(_DEVICES)).null_count:
        raise _Refused  # a device that is not an object: the per-line engine leaves it out
    return table.append_column(LINE, pa.array(np.arange(first_line, first_line + n, dtype=np.int64))), ends


def _whole_records(table: pa.Table, buf: bytearray, ends: np.ndarray, first_line: int) -> list[tuple[int, dict]]:
    """The chunk's records of ``WHOLE_TYPES`` (and the stream's first), parsed whole: few per stream."""
    wanted = pc.indices_nonzero(pc.is_in(table.column(TYPE.raw[0]), _WHOLE)).to_numpy().astype(np.int64)
    if first_line == 1:
        wanted = np.union1d(wanted, np.zeros(1, np.int64))
    out = []
    for i in wanted.tolist():
        start = int(ends[i - 1]) + 1 if i else 0
        out.append((first_line + i, orjson.loads(bytes(buf[start:int(ends[i])]))))
    return out


def _read(path: Path, file_rank: int, add, chunk_bytes: int) -> Stream:
    stream = Stream([], None)
    checks = StreamChecks(file_rank)
    first_line = 1
    for buf, size, torn in whole_lines(path, chunk_bytes):
        if torn:
            if first_line == 1:
                raise _Refused  # no whole line: the per-line engine says what the stream holds
            _tail(stream, bytes(buf[:size]), first_line, path, checks, add)
            break
        table, ends = _table(buf, size, first_line)
        _add(stream, table, path, checks, add)
        stream.records += _whole_records(table, buf, ends, first_line)
        first_line += table.num_rows
        del table
    if first_line == 1:
        raise _Refused  # an empty stream
    add("evals", evals_from(stream.records, file_rank))
    return stream


def _add(stream: Stream, table: pa.Table, path: Path, checks: StreamChecks, add) -> None:
    """A raw table's frame tables, and its latest time."""
    for name, part in map_records(table, path.name, checks.file_rank, checks).items():
        add(name, part)
    last = pc.max(table.column(TIME.raw[0])).as_py()
    if last is not None and (stream.last_time is None or last > stream.last_time):
        stream.last_time = last


def _tail(stream: Stream, raw: bytes, line: int, path: Path, checks: StreamChecks, add) -> None:
    """The unterminated last line of a stream a writer was cut off in (a killed run), read as
    the per-line engine reads it: a diagnostic, or a record when it is whole all the same."""
    raw = raw.rstrip(b"\r\n")
    if not raw.strip():
        return
    record, note, text = decode_line(raw, terminated=False)
    if note is not None:
        stream.diagnostics.append(diagnostic(str(path), line, note, text))
    if record is not None:
        checks.repair([(line, record)])
        _add(stream, raw_records([record], [line]), path, checks, add)
        stream.records += [(line, record)] if TYPE.get(record) in WHOLE_TYPES else []


def read_stream(path: Path, file_rank: int, frames, chunk_bytes: int | None = None) -> Stream | None:
    """Add the stream's frame tables to ``frames`` (``add(frame, table)``, ``mark()``,
    ``truncate(mark)``), chunk by chunk. None when it needs the per-line engine: ``frames``
    are then as before."""
    mark = frames.mark()
    try:
        return _read(path, file_rank, frames.add, chunk_bytes or CHUNK_BYTES)
    except (_Refused, OSError, EOFError, zlib.error, gzip.BadGzipFile, orjson.JSONDecodeError):
        frames.truncate(mark)
        return None
    finally:
        _pool().release_unused()  # the parser's freed chunks: the frames are what stays

