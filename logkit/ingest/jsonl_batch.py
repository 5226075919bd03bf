"""Small streams parsed together: a session of hundreds of tiny rank streams costs what its records
cost, not a stream's fixed cost (a parse, a mapping, the frames' appends: ~3 ms) per file.

The fast engine (``jsonl_arrow``) reads a stream in chunks, each parsed and mapped on its own. A
stream of a few records is all fixed cost: 400 of them cost 400 parses and mappings for 1,600
records. Here consecutive small streams (``SMALL_STREAM_BYTES`` each, ``BATCH_BYTES`` together) whose
rows go to the same frames are read whole, their bytes joined into one chunk (each ends with a newline:
lines stay lines), parsed once, and each row is told its stream (its rank, its file and line, cited
as the stream's own read cites it). The streams that any check of a stream's own would note something
in (``record_checks.noted_streams``) are mapped one by one from their rows of the table, each with its
checks; the rest are mapped together: the frames, diagnostics and meta are those of the streams read
one by one (``tests/unit/ingest/test_jsonl_batch.py`` compares them).

What the fast engine refuses (an invalid line, a blank line, a value of another type...) refuses the
batch: it is split in two and each half tried again, down to the one stream, which is read as every
stream is (the fast engine, or line by line, with its diagnostics). A stream that is not whole lines
(a torn last line), empty, compressed or not a regular file is read as every stream is too.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import numpy as np
import orjson
import pyarrow as pa
import pyarrow.compute as pc

from logkit.ingest import jsonl_arrow
from logkit.ingest.jsonl_lines import Stream
from logkit.ingest.mapping import CITED, LINE, RAW_SCHEMA, TIME, TYPE, evals_from, map_records
from logkit.ingest.parse_memory import hand_back
from logkit.ingest.record_checks import StreamChecks, noted_streams
from logkit.ingest.safe_io import READ_ERRORS, display, is_gzip_name, read_whole, size_of
from logkit.schema.records import EVALUATION

SMALL_STREAM_BYTES = 256 << 10  # a stream of a few hundred records: its fixed cost is much of its cost
BATCH_BYTES = jsonl_arrow.CHUNK_BYTES  # bytes parsed at once: the fast engine's chunk


def small(path: str | Path) -> bool:
    """A stream read with others: a regular file, not compressed, of at most ``SMALL_STREAM_BYTES``."""
    return not is_gzip_name(path) and 0 < size_of(path) <= SMALL_STREAM_BYTES


class _Part:
    """One stream of a batch: its bytes once read (``read``: False where it is to be read on its own)."""

    def __init__(self, path: Path, rank: int) -> None:
        self.path, self.rank = path, rank
        self.data: bytes | None = None
        self.lines = 0
        self.whole: bool | None = None  # None: not read yet

    def read(self) -> bool:
        """Its bytes read: whole lines (True), or not (unreadable, grown past the bound, gone, empty, a torn
        last line: read on its own, which says what it is)."""
        if self.whole is None:
            try:
                data = read_whole(self.path, unzip=False, limit=SMALL_STREAM_BYTES)
            except READ_ERRORS:
                data = b""
            self.whole = bool(data) and data.endswith(b"\n")
            if self.whole:
                self.data, self.lines = data, data.count(b"\n")
        return self.whole


def read_small(streams: list[tuple[Path, int]], frames, fallback=None) -> Iterator[Stream | None]:
    """Each (path, file rank)'s ``Stream`` in order, their frame tables added to ``frames`` (one for all:
    rows of several streams are added as one table), the small ones parsed together, ``BATCH_BYTES`` at
    a time (only a batch's bytes held at once). ``fallback`` as ``jsonl_arrow.read_streams`` takes it,
    for a stream the fast engine refuses."""
    parts = [_Part(Path(path), rank) for path, rank in streams]
    i = 0
    while i < len(parts):
        batch, size = [], 0
        while i < len(parts) and parts[i].read() and (not batch or size + len(parts[i].data) <= BATCH_BYTES):
            batch.append(parts[i])
            size += len(parts[i].data)
            i += 1
        if batch:
            yield from _batch(batch, frames, fallback)
            for part in batch:
                part.data = None  # its rows are in the frames now
        else:
            yield from _alone(parts[i], frames, fallback)
            i += 1
    hand_back()  # the parser's freed memory: the frames are what stays


def _alone(part: _Part, frames, fallback) -> Iterator[Stream | None]:
    """A stream read as the fast engine reads each stream."""
    yield from jsonl_arrow.read_streams([(part.path, part.rank, frames)], fallback=fallback)


def _batch(parts: list[_Part], frames, fallback) -> Iterator[Stream | None]:
    """``parts`` parsed and mapped together; where the fast engine refuses them, in halves."""
    try:  # on a parsing thread, as every chunk: the parser's memory in its arenas, handed back as theirs
        parsed = jsonl_arrow.parsers().submit(_parse, parts).result()
    except jsonl_arrow.REFUSALS:
        parsed = None
    if parsed is not None:
        mark = frames.mark()
        try:
            streams = _map(parts, *parsed, frames)
        except jsonl_arrow.REFUSALS:
            frames.truncate(mark)
        else:
            yield from streams
            return
    if len(parts) == 1:
        yield from _alone(parts[0], frames, fallback)
        return
    half = len(parts) // 2
    yield from _batch(parts[:half], frames, fallback)
    yield from _batch(parts[half:], frames, fallback)


def _parse(parts: list[_Part]) -> tuple[pa.Table, list[list[tuple[int, dict]]]]:
    """The raw table of the streams' lines, one after the other, and each stream's records read whole
    (its first, and those of ``WHOLE_TYPES``, as (its line, record)); raises what refuses a chunk."""
    buf = bytearray(b"".join(p.data for p in parts))
    ends, table = jsonl_arrow.parsed_chunk(buf, len(buf), RAW_SCHEMA)
    jsonl_arrow.check_rows(table, len(ends))
    jsonl_arrow.check_devices(table)
    firsts = np.cumsum([0] + [p.lines for p in parts[:-1]])
    whole = np.union1d(jsonl_arrow.whole_rows(table), firsts)
    starts = jsonl_arrow.line_starts(ends)
    records: list[list[tuple[int, dict]]] = [[] for _ in parts]
    owner = np.searchsorted(firsts, whole, side="right") - 1
    for row, k in zip(whole.tolist(), owner.tolist(), strict=True):
        records[k].append((row - int(firsts[k]) + 1,
                           orjson.loads(bytes(buf[int(starts[row]):int(ends[row])]))))
    return table, records


def _map(parts: list[_Part], table: pa.Table, records: list, frames) -> list[Stream]:
    """The streams' frame tables added in stream order (runs of streams no check notes anything in as
    one table), then each one's ``Stream``."""
    counts = np.array([p.lines for p in parts], np.int64)
    firsts = np.r_[0, np.cumsum(counts)[:-1]]
    stream = np.repeat(np.arange(len(parts)), counts)
    lines = np.arange(table.num_rows, dtype=np.int64) - firsts[stream] + 1
    ranks = np.array([p.rank for p in parts], np.int64)[stream]
    table = table.append_column(LINE, pa.array(lines))
    noted = noted_streams(table, stream, ranks, len(parts))
    names = [display(p.path.name) for p in parts]
    k = 0
    while k < len(parts):
        end = k + 1 if noted[k] else next((e for e in range(k + 1, len(parts)) if noted[e]), len(parts))
        rows = table.slice(int(firsts[k]), int(counts[k:end].sum()))
        if noted[k]:  # one stream, with its checks, as it is read alone
            mapped = map_records(rows, names[k], parts[k].rank, StreamChecks(parts[k].rank))
        else:
            cited = pc.binary_join_element_wise(
                pa.array([f"{n}:" for n in names[k:end]]).take(pa.array(stream[firsts[k]:firsts[k] + len(rows)] - k)),
                pc.cast(rows.column(LINE), pa.string()), "")
            mapped = map_records(rows.append_column(CITED, cited), None, pa.array(ranks[firsts[k]:firsts[k] + len(rows)]))
        for name, part in mapped.items():
            frames.add(name, part)
        for i in range(k, end):
            if any(TYPE.get(r) == EVALUATION.type for _, r in records[i]):
                frames.add("evals", evals_from(records[i], parts[i].rank))
        k = end
    latest = _latest(table.column(TIME.raw[0]), firsts)
    return [Stream(records[i], latest[i]) for i in range(len(parts))]


def _latest(times: pa.ChunkedArray, firsts: np.ndarray) -> list[float | None]:
    """Each stream's latest time (None where its records name none)."""
    values = pc.fill_null(pc.cast(times, pa.float64()), np.nan).to_numpy()
    latest = np.fmax.reduceat(values, firsts) if len(values) else np.full(len(firsts), np.nan)
    return [None if v != v else float(v) for v in latest.tolist()]
