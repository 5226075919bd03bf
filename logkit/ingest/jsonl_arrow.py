"""The fast engine for our JSONL streams: ``pyarrow.json`` parses each stream in chunks of whole
lines (``chunks``) into the raw table ``mapping.RAW_SCHEMA`` derives from the record specs,
``mapping.map_records`` makes frame tables of them, and they are added to each stream's frames in
file order: memory is the frames plus a few chunks (``PARSERS + 1``, and their raw tables).

Chunks are parsed ``PARSERS`` at a time, each in one thread, while this thread maps the ones
parsed before; the streams of a session are read as one flow (``read_streams``):
the next stream's first chunks are parsed while the last of the one before is mapped, so that the
cores are not left idle at each stream's end. pyarrow's parse costs per column
of the schema, whether a line has it or not: a chunk is parsed at the columns the record types that
make most of its rows are read at (``mapping.read_at``: a stream's steps and comm records, not the
event columns), and its rows of other types (GPU snapshots, events...) again at theirs.

It takes a stream whole or not at all: a stream it cannot take whole (an invalid line, a
value of an unexpected type, blank lines, a device that is not an object) gives back the rows
it added and returns None, and the per-line engine (``jsonl_lines``) reads it, which
diagnoses each line. Only a torn last line (a killed run's) it reads as the per-line engine
would, so that a long stream of a killed run is not read line by line for it.
"""

from __future__ import annotations

import functools
import gc
import gzip
import os
import threading
import zlib
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from logkit.ingest.assemble import diagnostic
from logkit.ingest.chunks import Ring, whole_lines
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
    read_at,
    read_of,
)
from logkit.ingest.parse_memory import HAND_BACK_BYTES, hand_back, pool
from logkit.ingest.record_checks import StreamChecks
from logkit.ingest.safe_io import size_of
from logkit.schema.records import FRAME_SPECS

# Lines are parsed this many bytes at a time, PARSERS chunks at once: the parser's working memory is
# a few chunks, whatever the size of the stream. Each chunk is parsed in one thread, in blocks of
# BLOCK_BYTES (or the longest line): on 2 cores (100 MB, 8 streams) that costs 5-7% less CPU than
# on pyarrow's threads in blocks of 1 MB, and 3 chunks of 4 MB in flight keep the cores about as
# busy as pyarrow's own reader (CPU time / wall time 1.79-1.89 against 1.86-1.91); 2 of 8 MB or 4
# of 4 MB are no faster. One block per chunk costs no less CPU, and holds more memory at once
# (peak at 1 GB 1.48x the frames against 1.43x).
CHUNK_BYTES = 4 << 20
BLOCK_BYTES = 2 << 20
PARSERS = 3
MIN_CHUNK_BYTES = 256 << 10
# A stream is read in STREAM_CHUNKS chunks or more, of SMALL_CHUNK_BYTES at least (1: chunks of CHUNK_BYTES).
# 9 measured (docs/BENCHMARKS.md): less memory, more CPU, faster only on a loaded machine: not taken.
STREAM_CHUNKS = 1
SMALL_CHUNK_BYTES = 1 << 20
# A chunk is parsed at the columns of the record types that made one in RARE or more of the last
# chunk's rows (the first chunks: of the stream read last); its other rows again at the rest.
RARE = 8
_OPTIONS = {RAW_SCHEMA: pj.ParseOptions(explicit_schema=RAW_SCHEMA, unexpected_field_behavior="ignore")}
_NONE = np.zeros(0, np.int64)
_KINDS: list[frozenset[str] | None] = [None]  # the kinds the stream read last ended with (None: all)
_WHOLE = pa.array(WHOLE_TYPES)
_LISTS = tuple(spec.items_key for spec in FRAME_SPECS.values() if spec.items is not None)  # devices[], collectives[]


def parse(chunk: memoryview, schema: pa.Schema, ends: np.ndarray) -> pa.Table:
    """Whole lines of JSON objects as a raw table of ``schema`` (raises what pyarrow raises on
    anything else; ``pa.ArrowInvalid`` for a line that does not open an object or for invalid
    UTF-8, which are never handed to pyarrow). ``ends``: the newlines' offsets."""
    if not _objects_only(chunk, ends):
        raise pa.ArrowInvalid("a line that does not open a JSON object")
    # pyarrow's parser passes invalid UTF-8 through into its strings (they fail later, anywhere):
    # checked here, on the chunk as it is (no copy), so the per-line engine replaces and notes it
    pa.LargeStringArray.from_buffers(1, pa.py_buffer(np.array([0, len(chunk)], np.int64)),
                                     pa.py_buffer(chunk)).validate(full=True)
    return _json(chunk, schema, _block(ends))


def _block(ends: np.ndarray) -> int:
    """pyarrow's block: BLOCK_BYTES, or the longest line."""
    longest = int(max(ends[0] + 1, np.diff(ends).max(initial=0))) if len(ends) else 1
    return max(BLOCK_BYTES, longest + 1)


@functools.lru_cache(maxsize=64)
def _options(schema: pa.Schema) -> pj.ParseOptions:
    return pj.ParseOptions(explicit_schema=schema, unexpected_field_behavior="ignore")


def _json(lines, schema: pa.Schema, block_bytes: int | None = None) -> pa.Table:
    """``lines`` parsed in this thread, in blocks of ``block_bytes`` (None: as one block)."""
    options = _OPTIONS.get(schema) or _options(schema)
    block = len(lines) if block_bytes is None else block_bytes
    return pj.read_json(pa.py_buffer(lines), parse_options=options, memory_pool=pool(),
                        read_options=pj.ReadOptions(use_threads=False, block_size=max(1, min(block, 2**31 - 1))))


_LOCK = threading.Lock()
_PARSERS: tuple[int, ThreadPoolExecutor] | None = None  # (the process it was made in, the threads)


def parsers() -> ThreadPoolExecutor:
    """The parsing threads, made once per process (a forked child makes its own)."""
    global _PARSERS
    with _LOCK:
        if _PARSERS is None or _PARSERS[0] != os.getpid():
            _PARSERS = (os.getpid(), ThreadPoolExecutor(PARSERS, thread_name_prefix="logkit-parse"))
        return _PARSERS[1]


class _Refused(Exception):
    """The stream needs the per-line engine."""


def _line_ends(view: memoryview, step: int = 1 << 20) -> np.ndarray:
    """Offsets of the newlines of ``view`` (scanned a MB at a time: no chunk-sized temporaries)."""
    data = np.frombuffer(view, np.uint8)
    return np.concatenate([np.flatnonzero(data[i:i + step] == 10) + i for i in range(0, len(data), step)]
                          or [np.zeros(0, np.int64)])


def line_starts(ends: np.ndarray) -> np.ndarray:
    """The lines' first offsets, of their newlines' ``ends``."""
    return np.concatenate([np.zeros(1, np.int64), ends[:-1] + 1])


def _objects_only(chunk: memoryview, ends: np.ndarray) -> bool:
    """Every line opens a JSON object. pyarrow's parser must never see anything else: a bare value
    (``null`` as a stream's first line) crashes the process inside it, before any line is noted."""
    if not len(ends):
        return False
    return bool((np.frombuffer(chunk, np.uint8)[line_starts(ends)] == ord("{")).all())


def _release(*views: memoryview) -> None:
    """Let go of the views of the reused buffer before it is refilled. A parse error's traceback
    can keep a view exported until the cyclic garbage collector runs: then it runs, once."""
    for view in views:
        try:
            view.release()
        except BufferError:
            gc.collect()
            view.release()


def _chunk(buf: bytearray, size: int, first: bool, kinds: frozenset[str] | None) -> tuple:
    """One chunk's raw table; its records of ``WHOLE_TYPES`` (and the stream's first, when ``first``)
    parsed whole, as (line in the chunk from 0, record); how many rows of each record type it has; and
    its rows parsed apart (None, or (their record types, their raw table, their rows in the chunk)).
    Parsed at the columns of the types ``kinds`` (``mapping.read_at``; None: all of ``RAW_SCHEMA``),
    then the rows of other types apart at theirs, unless they are half or more. Runs on the parsing
    threads."""
    schema = RAW_SCHEMA if kinds is None else read_at(kinds)
    ends, table = parsed_chunk(buf, size, schema)
    n = table.num_rows
    check_rows(table, len(ends))
    counts = dict(zip(*(c.to_pylist() for c in pc.value_counts(table.column(TYPE.raw[0])).flatten()), strict=True))
    rest = None
    if schema is not RAW_SCHEMA:
        others = frozenset(k for k in counts if not read_of(k) <= set(schema.names))
        rows = pc.indices_nonzero(pc.is_in(table.column(TYPE.raw[0]), pa.array(others, pa.string()))).to_numpy() \
            if others else _NONE
        if 2 * len(rows) > n:
            ends, table = parsed_chunk(buf, size, RAW_SCHEMA)
        elif len(rows):
            rest = (others, _padded(_apart(buf, ends, rows, read_at(others))), rows)
    table = _padded(table)
    for raw in [table, *(rest[1:2] if rest else ())]:
        check_devices(raw)
    return table, _whole_records(table, buf, ends, first), counts, rest


def check_rows(table: pa.Table, lines: int) -> None:
    """Raises ``_Refused`` unless the raw table of ``lines`` whole lines has a row per line, each with a
    record type."""
    if table.num_rows != lines or table.column(TYPE.raw[0]).null_count:
        raise _Refused  # the parser skips blank lines: those, or records without a type, the per-line engine reports


def check_devices(table: pa.Table) -> None:
    """Raises ``_Refused`` where a raw table (at all of ``RAW_SCHEMA``) has a device, or a collective, that is
    not an object."""
    if any(pc.list_flatten(table.column(key)).null_count for key in _LISTS):
        raise _Refused  # an item that is not an object: the per-line engine leaves it out


def parsed_chunk(buf: bytearray, size: int, schema: pa.Schema) -> tuple[np.ndarray, pa.Table]:
    """The newlines' offsets of a chunk, and its raw table at ``schema``."""
    table = None
    whole = memoryview(buf)
    chunk = whole[:size]
    try:
        ends = _line_ends(chunk)
        try:  # blank lines, bare values, leading spaces are refused: the per-line engine says what they are
            table = parse(chunk, schema, ends)
        except (pa.ArrowInvalid, pa.ArrowNotImplementedError, UnicodeDecodeError, ValueError, OverflowError):
            pass  # not raised from here: its traceback would keep the chunk's buffer exported
    finally:
        _release(chunk, whole)
    if table is None:
        raise _Refused
    return ends, table


_NULLS: dict[pa.DataType, pa.Array] = {}


def _nulls(n: int, kind: pa.DataType) -> pa.Array:
    """``n`` missing values of ``kind`` (a slice of one array, made once)."""
    nulls = _NULLS.get(kind)
    if nulls is None or len(nulls) < n:
        nulls = _NULLS[kind] = pa.nulls(max(n, 1 << 16), kind)
    return nulls.slice(0, n)


def _padded(table: pa.Table) -> pa.Table:
    """A raw table at part of ``RAW_SCHEMA`` at all of it: the other columns missing (no frame reads
    them of its rows)."""
    if table.schema.names == RAW_SCHEMA.names:
        return table
    n, names = table.num_rows, set(table.schema.names)
    return pa.Table.from_arrays([table.column(f.name) if f.name in names else _nulls(n, f.type) for f in RAW_SCHEMA],
                                schema=RAW_SCHEMA)


def _apart(buf: bytearray, ends: np.ndarray, rows: np.ndarray, schema: pa.Schema) -> pa.Table:
    """The chunk's lines ``rows`` parsed again, at ``schema``."""
    starts = line_starts(ends)[rows]
    lines = b"".join(buf[s:e] for s, e in zip(starts.tolist(), (ends[rows] + 1).tolist(), strict=True))
    try:
        parsed = _json(lines, schema)
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError, ValueError, OverflowError):
        raise _Refused from None
    if parsed.num_rows != len(rows):
        raise _Refused
    return parsed


def whole_rows(table: pa.Table) -> np.ndarray:
    """The rows of a raw table whose records are read whole (``WHOLE_TYPES``)."""
    return pc.indices_nonzero(pc.is_in(table.column(TYPE.raw[0]), _WHOLE)).to_numpy().astype(np.int64)


def _whole_records(table: pa.Table, buf: bytearray, ends: np.ndarray, first: bool) -> list[tuple[int, dict]]:
    """The chunk's records of ``WHOLE_TYPES`` (and the stream's first), parsed whole: few per stream."""
    wanted = whole_rows(table)
    if first:
        wanted = np.union1d(wanted, np.zeros(1, np.int64))
    starts = line_starts(ends)
    return [(i, orjson.loads(bytes(buf[int(starts[i]):int(ends[i])]))) for i in wanted.tolist()]


def _even(path: Path, chunk_bytes: int) -> int:
    """Chunks of at most ``chunk_bytes`` (and of the stream's ``STREAM_CHUNKS``-th part, but not under
    ``SMALL_CHUNK_BYTES``), as many as a multiple of ``PARSERS`` and of even size (no small last chunk: a
    parse that leaves cores idle); for a small stream, or one gzipped: ``chunk_bytes``."""
    if path.name.endswith(".gz"):
        return chunk_bytes
    size = path.stat().st_size
    if size < 2 * MIN_CHUNK_BYTES:
        return chunk_bytes
    chunk_bytes = min(chunk_bytes, max(SMALL_CHUNK_BYTES, size // STREAM_CHUNKS))
    chunks = PARSERS * -(-size // (PARSERS * chunk_bytes))
    return min(chunk_bytes, max(MIN_CHUNK_BYTES, -(-size // chunks) + (64 << 10)))  # a margin: lines are cut


class _Reading:
    """One stream being read: its chunks are mapped in file order as they come back parsed."""

    def __init__(self, path: Path, file_rank: int, frames, fallback=None) -> None:
        self.path, self.frames, self.fallback = path, frames, fallback
        self.mark = None  # where its rows start in ``frames``, once the streams before it are mapped
        self.size = size_of(path)
        self.stream, self.checks = Stream([], None), StreamChecks(file_rank)
        self.line = 1  # the next chunk's first line
        self.submitted = 0
        self.kinds = _KINDS[0]  # the record types the next chunk is parsed at the columns of
        self.refused = False
        self.result: Stream | None = None
        self.parsed: list = []  # chunks parsed, not mapped yet: (first line, what _chunk gave, types apart)
        # chunks mapped together (the mapping costs ~2 ms a call, hardly per row): as many as make the
        # chunk size asked for, where they were cut smaller
        self.batch = 1

    def submit(self, parsers: ThreadPoolExecutor, buf: bytearray, size: int) -> Future:
        self.submitted += 1
        return parsers.submit(_chunk, buf, size, self.submitted == 1, self.kinds)

    def take(self, job) -> None:
        """What came back for the stream, in file order: a parsed chunk (a future), its torn last line
        (bytes) or its end (None). At the end of a stream it refused: ``fallback``, when given."""
        if self.mark is None:
            self.mark = self.frames.mark()
        if not self.refused:
            try:
                self._take(job)
            except REFUSALS:
                self.refuse()
        elif isinstance(job, Future):
            wait([job])  # its buffer is free once it is done
        if job is None and self.refused and self.fallback is not None:
            self.result = self.fallback(self.path, self.checks.file_rank, self.frames)

    def _take(self, job) -> None:
        if isinstance(job, Future):
            self._parsed(job.result())
            return
        self._map()
        if job is not None:
            if self.line == 1:
                raise _Refused  # no whole line: the per-line engine says what the stream holds
            _tail(self.stream, job, self.line, self.path, self.checks, self.frames.add)
        elif self.line == 1:
            raise _Refused  # an empty stream
        else:
            self.frames.add("evals", evals_from(self.stream.records, self.checks.file_rank))
            self.result = self.stream

    def _parsed(self, parsed: tuple) -> None:
        """A chunk parsed: kept until ``batch`` of them are, then mapped together; chunks whose rows were
        parsed apart at other record types are mapped apart."""
        table, _, counts, rest = parsed
        self.kinds = _KINDS[0] = frozenset(k for k, c in counts.items() if c * RARE >= table.num_rows)
        apart = None if rest is None else rest[0]  # the types of the rows parsed apart
        if self.parsed and self.parsed[-1][2] != apart:
            self._map()
        self.parsed.append((self.line, parsed, apart))
        self.line += table.num_rows
        if len(self.parsed) >= self.batch:
            self._map()

    def _map(self) -> None:
        """The chunks parsed so far, mapped as one table (in file order: their lines are numbered)."""
        if not self.parsed:
            return
        parsed, self.parsed = self.parsed, []
        tables, aparts, kinds = [], [], None
        for first, (table, records, _, rest), _ in parsed:
            tables.append(table.append_column(LINE, pa.array(np.arange(first, first + table.num_rows,
                                                                       dtype=np.int64))))
            if rest is not None:
                kinds, apart, rows = rest
                aparts.append(apart.append_column(LINE, pa.array(rows.astype(np.int64) + first)))
            self.stream.records += [(first + i, record) for i, record in records]
        table = tables[0] if len(tables) == 1 else pa.concat_tables(tables).combine_chunks()
        rest = None if kinds is None else (
            kinds, aparts[0] if len(aparts) == 1 else pa.concat_tables(aparts).combine_chunks())
        _add(self.stream, table, self.path, self.checks, self.frames.add, rest)

    def refuse(self) -> None:
        """The stream needs the per-line engine: what it added is taken back."""
        self.refused = True
        self.parsed = []
        if self.mark is not None:
            self.frames.truncate(self.mark)


# What makes the fast engine leave a stream to the per-line engine.
REFUSALS = (_Refused, OSError, EOFError, zlib.error, gzip.BadGzipFile, orjson.JSONDecodeError)


class _Queue:
    """The streams' chunks in flight, in file order across the streams, and what comes after them
    (a torn last line, a stream's end): taken in that order."""

    def __init__(self) -> None:
        self.entries: deque = deque()
        self.chunks = 0  # parsing or parsed, not taken yet: each holds a buffer of the ring
        self.ended: deque = deque()  # the streams' results, as each ends
        self.read_bytes = 0  # bytes of the streams ended since the parser's memory was last handed back

    def put(self, reading: _Reading, job) -> None:
        self.entries.append((reading, job))
        self.chunks += isinstance(job, Future)

    def drain(self, keep: int = 0) -> None:
        """Take the oldest entries until ``keep`` chunks are left in flight."""
        while self.entries:
            reading, job = self.entries[0]
            if isinstance(job, Future):
                if self.chunks <= keep:
                    return
                self.chunks -= 1
            self.entries.popleft()
            reading.take(job)
            if job is None:
                self.ended.append(reading.result)
                self.read_bytes += reading.size
                if self.read_bytes >= HAND_BACK_BYTES:  # the parser's freed memory: memory is a stream's
                    hand_back()
                    self.read_bytes = 0

    def stop(self) -> None:
        jobs = [job for _, job in self.entries if isinstance(job, Future)]
        for job in jobs:
            job.cancel()
        wait(jobs)


def _feed(reading: _Reading, queue: _Queue, parsers: ThreadPoolExecutor, ring: Ring, chunk_bytes: int) -> bool:
    """Put the stream's chunks in flight, taking the oldest entries as it goes. False when it ended
    otherwise than with a whole line (torn, refused, unreadable): the caller drains before the next."""
    clean = False
    try:
        sized = _even(reading.path, chunk_bytes)
        reading.batch = max(1, round(chunk_bytes / sized))
        for buf, size, torn in whole_lines(reading.path, sized, ring):
            if reading.refused:
                break
            if torn:
                queue.put(reading, bytes(buf[:size]))
                break
            queue.put(reading, reading.submit(parsers, buf, size))
            queue.drain(keep=PARSERS)  # before the next chunk: its buffer is the oldest's, round again
        else:
            clean = True
    except REFUSALS:
        reading.refuse()
    queue.put(reading, None)
    return clean


def _add(stream: Stream, table: pa.Table, path: Path, checks: StreamChecks, add, rest=None) -> None:
    """A raw table's frame tables (``rest``: its rows parsed apart, ``map_records``), and its latest time."""
    for name, part in map_records(table, path.name, checks.file_rank, checks, rest).items():
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


def read_streams(streams, chunk_bytes: int | None = None, fallback=None) -> Iterator[Stream | None]:
    """Each stream's frame tables added to its ``frames`` (``add(frame, table)``, ``mark()``,
    ``truncate(mark)``), chunk by chunk, for ``streams`` of (path, file rank, frames); the streams
    are mapped in order, so that they may share one ``frames``. The chunks of the next stream are
    parsed while the last of the one before is mapped. As each stream ends, in order: its ``Stream``,
    or, where it needs the per-line engine, ``fallback(path, file rank, frames)`` (None without one:
    its ``frames`` are then as before)."""
    threads, ring, queue = parsers(), Ring(PARSERS), _Queue()
    chunk_bytes = chunk_bytes or CHUNK_BYTES
    try:
        for path, file_rank, frames in streams:
            reading = _Reading(Path(path), file_rank, frames, fallback)
            if not _feed(reading, queue, threads, ring, chunk_bytes):
                queue.drain()  # its chunks done: every buffer is free for the next stream's
            while queue.ended:
                yield queue.ended.popleft()
        queue.drain()
        yield from queue.ended
    finally:
        queue.stop()
        ring.buffers.clear()  # the chunks' buffers go with the read (a new one costs ~1 ms to touch, as a reused one)
        hand_back()  # the parser's freed chunks: the frames are what stays


def read_stream(path: Path, file_rank: int, frames, chunk_bytes: int | None = None) -> Stream | None:
    """One stream by ``read_streams``."""
    (stream,) = read_streams([(path, file_rank, frames)], chunk_bytes)
    return stream
