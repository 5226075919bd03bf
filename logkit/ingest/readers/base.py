"""What every reader gives back (``ReadResult``: arrow tables, meta, diagnostics), the ``Read``
that readers which collect rows as dicts fill on the way, and the text plumbing readers share.

A reader turns one file into frame tables, meta fields and diagnostics; it never raises on
content. Text readers see lines already cleaned of what terminals add: ANSI colour codes,
CRLF endings, undecodable bytes (replaced, and noted). ``iter_lines`` streams a file line by
line (memory follows what a reader keeps, not the file's size), and a ``Read`` keeps the first
``KEEP_NOTES`` diagnostics of each reason with their text, then counts the rest in one summary
diagnostic per reason (a capture of a million unmatched lines costs a thousand rows).
"""

from __future__ import annotations

import gzip
import io
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import pyarrow as pa

from logkit.ingest.assemble import diagnostic, rows_table
from logkit.ingest.chunks import numbered_lines
from logkit.ingest.mapping import nonfinite_event
from logkit.ingest.safe_io import LIMITS, READ_ERRORS, display, is_gzip_name, open_file, read_whole, size_of
from logkit.schema.meta import SessionMeta

FRAMES = ("steps", "comm", "perf", "gpu", "evals", "events")
UNMATCHED = "line matches no known grammar"
KEEP_NOTES = 1000  # diagnostics kept with their text, per reason and file; the rest are counted
MAX_LINE_CHARS = 1 << 20  # a longer "line" (a binary blob, a log without newlines) is cut, and noted
_CHUNK = 1 << 18  # bytes read at a time: memory for the lines in flight stays a few MB

_RANK_DIR = re.compile(r"^rank[_-]?\d+$")  # as discovery names the folders of a run's ranks
# CSI sequences (colours, cursor moves) and OSC sequences (window titles, hyperlinks).
_ANSI = re.compile(r"\x1b\[[0-9;?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")


@dataclass
class ReadResult:
    """One file's contribution to a session: an arrow table per frame it has rows of, meta
    fields, diagnostics. ``time_base`` says what ``time_s`` in the tables means:
    ``"elapsed"`` (seconds since the rank started, as our JSONL) or ``"epoch"`` (absolute
    POSIX seconds, shifted to the session start when the session is built). ``lines``/``used``
    count the non-blank lines seen and those a grammar used (text readers only): the rest
    are diagnostics."""

    path: Path
    format: str
    tables: dict[str, pa.Table] = field(default_factory=dict)
    meta: SessionMeta = field(default_factory=SessionMeta)
    diagnostics: list[dict] = field(default_factory=list)
    time_base: str = "epoch"
    lines: int = 0
    used: int = 0


@dataclass
class Read:
    """What a reader collects on its way through a file: ``rows`` (a frame name to row dicts,
    in file order), ``tables`` (rows it read by columns), meta, diagnostics, line counts;
    ``result()`` gives them back as a ``ReadResult``."""

    path: Path
    format: str
    rows: dict[str, list[dict]] = field(default_factory=lambda: {k: [] for k in FRAMES})
    tables: dict = field(default_factory=dict)
    diagnostics: list[dict] = field(default_factory=list)
    meta: SessionMeta = field(default_factory=SessionMeta)
    time_base: str = "epoch"
    lines: int = 0
    used: int = 0
    # reason -> [notes past KEEP_NOTES, first such line, last such line]
    dropped: dict[str, list] = field(default_factory=dict)
    kept: dict[str, int] = field(default_factory=dict)

    def result(self) -> ReadResult:
        for reason, (count, first, last) in self.dropped.items():
            where = f"lines {first}-{last}" if first is not None else "no line"
            self.diagnostics.append(diagnostic(
                display(self.path), first, f"{count} more of: {reason} ({where}; the first {KEEP_NOTES} are listed)"))
        self.dropped = {}
        tables = {name: rows_table(rows) for name, rows in self.rows.items() if rows}
        for name, table in self.tables.items():
            tables[name] = pa.concat_tables([tables[name], table], promote_options="permissive") \
                if name in tables else table
        return ReadResult(self.path, self.format, tables, self.meta, self.diagnostics, self.time_base, self.lines,
                          self.used)

    @property
    def label(self) -> str:
        """How the file's lines are cited: its name, and its rank folder where it lies in one
        (``rank_0/train.log`` and ``rank_1/train.log`` are told apart)."""
        parent = self.path.parent.name
        return display(f"{parent}/{self.path.name}" if _RANK_DIR.match(parent) else self.path.name)

    def note(self, line: int | None, reason: str, text: str = "") -> None:
        """A diagnostic with the file and line; past ``KEEP_NOTES`` of one reason, only counted."""
        kept = self.kept.get(reason, 0)
        if kept < KEEP_NOTES:
            self.kept[reason] = kept + 1
            self.diagnostics.append(diagnostic(display(self.path), line, reason, text))
            return
        count = self.dropped.setdefault(reason, [0, line, line])
        count[0] += 1
        if line is not None:
            count[1] = line if count[1] is None else min(count[1], line)
            count[2] = line if count[2] is None else max(count[2], line)

    def unmatched(self, line: int, text: str) -> None:
        self.note(line, UNMATCHED, text)

    def table_row(self, number: int, line: str, columns: list | None) -> list[str] | None:
        """The cells of a row of a whitespace-separated table under header ``columns``; None (and
        a diagnostic) before any header, or for a row of another width."""
        cells = line.split()
        if columns is None or len(cells) != len(columns):
            self.unmatched(number, line)
            return None
        self.used += 1
        return cells

    def event(self, kind: str, line: int | None, **columns) -> dict:
        source = self.label if line is None else f"{self.label}:{line}"
        row = {"time_s": None, "rank": None, "level": None, "kind": kind, "message": None, "source": source,
               **columns}
        self.rows["events"].append(row)
        return row

    def step(self, line: int | None, row: dict) -> dict:
        """A steps row (and the ``nan_detected`` event of a loss or grad norm logged as NaN/Inf)."""
        self.rows["steps"].append(row)
        if (event := nonfinite_event(row)) is not None:
            self.event(event.pop("kind"), line, **event)
        return row


def read_bytes(path: Path, read: Read) -> bytes:
    """The file's bytes (gunzipped for ``.gz``), read whole and bounded (``safe_io.read_whole``); a read
    failure keeps what came of a damaged gzip file and notes it; a file too large or no regular file is
    noted and gives nothing."""
    try:
        return read_whole(path)
    except (EOFError, zlib.error, gzip.BadGzipFile):
        pass  # a damaged gzip file: what inflates before the damage, below
    except OSError as exc:
        read.note(None, f"unreadable: {exc}")
        return b""
    chunks: list[bytes] = []
    try:
        with open_file(path) as fh:
            while len(chunks) * (1 << 20) <= LIMITS.whole_bytes and (chunk := fh.read(1 << 20)):
                chunks.append(chunk)
    except READ_ERRORS as exc:
        read.note(None, f"unreadable from here on (after {sum(map(len, chunks))} bytes): {exc}")
    return b"".join(chunks)


def strip_ansi(text: str) -> str:
    return _ANSI.sub("", text) if "\x1b" in text else text


def _raw_lines(path: Path, read: Read) -> Iterator[tuple[int, bytes]]:
    """(number, bytes without the newline) of the file's lines that are not empty, read a chunk at a
    time (gunzipped for ``.gz``, bounded: ``safe_io.open_file``); a read failure keeps what came and
    notes it. A line without a newline for megabytes is given by its head (the rest is skipped up to
    its newline: line numbers stay the file's)."""
    try:
        fh = open_file(path)
    except OSError as exc:
        read.note(None, f"unreadable: {exc}")
        return
    seen = 0
    with fh:
        try:
            for number, raw, _, _ in numbered_lines(fh, 4 * MAX_LINE_CHARS, _CHUNK):
                seen = number
                yield number, raw
        except READ_ERRORS as exc:
            read.note(None, f"unreadable from here on (after line {seen}): {exc}")


def _clean(raw: bytes, number: int, read: Read) -> str:
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError:
        line = raw.decode("utf-8", errors="replace")
        read.note(number, "invalid UTF-8 bytes replaced with U+FFFD", line)
    if len(line) > MAX_LINE_CHARS:
        read.note(number, f"line of {len(line)} characters cut to its first {MAX_LINE_CHARS}", line[:200])
        line = line[:MAX_LINE_CHARS]
    if line.endswith("\r"):
        line = line[:-1]
    return strip_ansi(line)


def iter_lines(path: Path, read: Read) -> Iterator[tuple[int, str]]:
    """(line number, text) of every line of ``path`` that is not empty, streamed: the cleaning of
    ``text_lines`` (CRLF, ANSI, a byte-order mark, bad UTF-8 replaced and noted) without holding the
    file."""
    for number, raw in _raw_lines(path, read):
        if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
            raw = raw[3:]  # a byte-order mark some Windows tools write
        yield number, _clean(raw, number, read)


# a file up to this size is read once by a reader that goes over its lines more than once (``Lines``)
SMALL_FILE_BYTES = 1 << 20


class Lines:
    """``iter_lines`` for a reader that goes over a file's lines more than once (a sample, then the
    whole): a small file (``SMALL_FILE_BYTES``, not gzipped) is opened and read once, its lines kept as
    bytes, each pass cleaning them as ``iter_lines`` does (its notes to the pass's ``read``); a larger
    one, or one that fails to read, is streamed by ``iter_lines`` at each pass. Thousands of tiny
    captures cost one open each."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.raw: list[tuple[int, bytes]] | None = None
        size = size_of(path)
        if is_gzip_name(path) or size > SMALL_FILE_BYTES:
            return
        try:
            with open_file(path, buffering=1 << 12) as fh:
                data = fh.read(size + 1)  # a byte more: a file that grew is streamed
        except READ_ERRORS:
            return  # the streamed passes say what is wrong with it
        if len(data) <= size:
            self.raw = [(n, raw) for n, raw, _, _ in numbered_lines(io.BytesIO(data), 4 * MAX_LINE_CHARS, _CHUNK)]

    def __call__(self, read: Read) -> Iterator[tuple[int, str]]:
        if self.raw is None:
            yield from iter_lines(self.path, read)
            return
        for number, raw in self.raw:
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]  # a byte-order mark some Windows tools write
            yield number, _clean(raw, number, read)


def text_lines(data: bytes, read: Read) -> list[str]:
    """Lines of ``data`` as text: CRLF and ANSI removed, bad UTF-8 replaced (one note per line)."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raw_lines = data.split(b"\n")
        out = []
        for number, raw in enumerate(raw_lines, start=1):
            try:
                out.append(raw.decode("utf-8"))
            except UnicodeDecodeError:
                line = raw.decode("utf-8", errors="replace")
                read.note(number, "invalid UTF-8 bytes replaced with U+FFFD", line)
                out.append(line)
        text = "\n".join(out)
    text = strip_ansi(text)
    if text.startswith("\ufeff"):
        text = text[1:]  # a byte-order mark some Windows tools write
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return [ln[:-1] if ln.endswith("\r") else ln for ln in lines]


def epoch(stamp: datetime) -> float:
    """POSIX seconds; a naive stamp is local time of the machine that wrote it."""
    return stamp.timestamp()
