"""The per-line engine for our JSONL streams (``<sid>_rank<N>.jsonl``, optionally gzipped): any
stream the fast engine refuses, and single-stream formats of our records.

It only repairs and diagnoses lines. A line that is not a JSON object with a string type (a
torn last line of a killed run, a stray print, bad bytes) becomes a diagnostic and is skipped;
NaN and Infinity literals (Python's json writes them) are read; each kept record becomes a
row of the raw table (``mapping.raw_records``: a value of the wrong type is missing, a device
that is not an object is left out), and ``mapping.map_records`` makes the frames of it, as it
does for the fast engine. Never raises on content.
"""

from __future__ import annotations

import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import pyarrow.compute as pc

from logkit.ingest.assemble import diagnostic
from logkit.ingest.chunks import open_stream
from logkit.ingest.mapping import TIME, TYPE, WHOLE_TYPES, evals_from, map_records, raw_records
from logkit.ingest.record_checks import StreamChecks


@dataclass
class StreamRead:
    """What one stream gave: ``records`` as (1-based line number, record) pairs, and diagnostics."""

    path: Path
    records: list[tuple[int, dict]] = field(default_factory=list)
    diagnostics: list[dict] = field(default_factory=list)


@dataclass
class Stream:
    """What one rank's stream gives besides its frame rows (either engine): the records read
    whole (the first, and those of ``WHOLE_TYPES``), its latest time, its diagnostics."""

    records: list[tuple[int, dict]]
    last_time: float | None
    diagnostics: list[dict] = field(default_factory=list)


def _lines(path: Path, out: StreamRead):
    """Raw lines of the file; a read failure (truncated gzip, I/O error) ends the stream with a note."""
    number = 0
    try:
        with open_stream(path) as fh:
            for number, raw in enumerate(fh, start=1):  # number also names the line a failure hit
                yield number, raw
    except (OSError, EOFError, zlib.error) as exc:
        out.diagnostics.append(diagnostic(str(path), number + 1, f"unreadable from here on: {exc}"))


def _lenient(text: str):
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return value if isinstance(value, dict) else None


def decode_line(raw: bytes, terminated: bool) -> tuple[dict | None, str | None, str]:
    """(the line's record or None, a note on it or None, its text)."""
    try:
        text, bad_utf8 = raw.decode("utf-8"), False
    except UnicodeDecodeError:
        # Keep what can be read: replacement characters in place of the bad bytes.
        text, bad_utf8 = raw.decode("utf-8", errors="replace"), True
    try:
        record = orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        record = _lenient(text)  # NaN / Infinity literals, as Python's json writes them
        if record is None:
            reason = "torn last line (no newline; the writer was cut off)" if not terminated else f"invalid JSON: {exc}"
            return None, reason + ("; invalid UTF-8" if bad_utf8 else ""), text
    if not isinstance(record, dict):
        return None, f"not a JSON object ({type(record).__name__})", text
    if not isinstance(TYPE.get(record), str):
        return None, "record without a 'type'", text
    return record, "invalid UTF-8 bytes replaced with U+FFFD" if bad_utf8 else None, text


def read_jsonl(path: str | Path) -> StreamRead:
    """Records of one JSONL stream, in file order, with a diagnostic per skipped line."""
    path = Path(path)
    out = StreamRead(path)
    name = str(path)
    for number, raw in _lines(path, out):
        terminated = raw.endswith(b"\n")
        raw = raw.rstrip(b"\r\n")
        if not raw.strip():
            continue
        record, note, text = decode_line(raw, terminated)
        if note is not None:
            out.diagnostics.append(diagnostic(name, number, note, text))
        if record is not None:
            out.records.append((number, record))
    return out


def read_stream(path: Path, file_rank: int, add, records: list[tuple[int, dict]] | None = None,
                label: str | None = None) -> Stream:
    """Read one stream line by line: its frame tables go to ``add(frame, table)``.
    ``records``: the stream's records already read (a reader that adjusts them first: they are
    not checked for records of other ranks and sessions); ``label``: how its lines are cited."""
    read = None
    checks = StreamChecks(file_rank, own_stream=records is None)
    if records is None:
        read = read_jsonl(path)
        records = read.records
    checks.repair(records)
    raw = raw_records([r for _, r in records], [n for n, _ in records])
    for name, table in map_records(raw, label or path.name, file_rank, checks).items():
        add(name, table)
    add("evals", evals_from(records, file_rank))
    whole = [(n, r) for i, (n, r) in enumerate(records) if i == 0 or TYPE.get(r) in WHOLE_TYPES]
    last = pc.max(raw.column(TIME.raw[0])).as_py() if raw.num_rows else None
    return Stream(whole, last, read.diagnostics if read is not None else [])
