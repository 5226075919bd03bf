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
from logkit.ingest.chunks import MAX_LINE_BYTES, numbered_lines, open_stream
from logkit.ingest.mapping import TIME, TYPE, WHOLE_TYPES, evals_from, map_records, raw_records
from logkit.ingest.record_checks import StreamChecks
from logkit.ingest.safe_io import display
from logkit.schema.values import plain_json


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


KEEP_NOTES = 1000  # diagnostics kept with their text per stream; the rest are counted in one


def _notes(path: Path, out: StreamRead):
    """``note(line, reason, text)``: a diagnostic of the stream, the first ``KEEP_NOTES`` with their text,
    the rest counted (``note(None, None)`` at the end adds the count)."""
    name, more = display(path), [0, None, None]

    def note(line, reason, text=""):
        if reason is None:
            if more[0]:
                out.diagnostics.append(diagnostic(name, more[1], f"{more[0]} more lines noted (lines "
                                                  f"{more[1]}-{more[2]}; the first {KEEP_NOTES} are listed)"))
            return
        if len(out.diagnostics) < KEEP_NOTES:
            out.diagnostics.append(diagnostic(name, line, reason, text))
            return
        more[0] += 1
        more[1] = line if more[1] is None else more[1]
        more[2] = line
    return note


def _lines(path: Path, note):
    """(line number, raw line without its newline, whether a newline ended it) of each line that is not
    blank (``chunks.numbered_lines``: runs of blank lines cost what scanning their bytes costs); a line
    longer than ``MAX_LINE_BYTES`` is skipped and noted; a read failure (truncated or oversized gzip, I/O
    error, a file that is no regular file) ends the stream with a note."""
    number = 0
    try:
        with open_stream(path) as fh:
            for number, raw, terminated, cut in numbered_lines(fh):
                if cut:
                    note(number, f"a line of more than {MAX_LINE_BYTES} bytes: skipped", raw[:200].decode(
                        "utf-8", "replace"))
                elif raw.strip():
                    yield number, raw, terminated
    except (OSError, EOFError, zlib.error) as exc:
        note(number + 1, f"unreadable from here on: {exc}")


def _lenient(text: str):
    """What Python's json reads of a line orjson refuses (NaN literals, lone surrogate escapes), made plain:
    text escaped, integers beyond 64 bits missing (``values.plain_json``)."""
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return None
    return plain_json(value) if isinstance(value, dict) else None


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
    note = _notes(path, out)
    for number, raw, terminated in _lines(path, note):
        record, why, text = decode_line(raw.rstrip(b"\r"), terminated)
        if why is not None:
            note(number, why, text)
        if record is not None:
            out.records.append((number, record))
    note(None, None)
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
