"""Read one rank's JSONL event stream (``<sid>_rank<N>.jsonl``, optionally gzipped).

Never raises on content: a line that is not a JSON object with a ``type`` (a torn last
line of a killed run, a stray print, bad bytes) becomes a diagnostic and is skipped.
"""

from __future__ import annotations

import gzip
import json
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import orjson

__all__ = ["StreamRead", "read_jsonl", "diagnostic"]

_TEXT_CHARS = 200


def diagnostic(file: str, line: int | None, reason: str, text: str = "") -> dict:
    """One row of a session's ``diagnostics`` frame."""
    return {"file": file, "line": line, "reason": reason, "text": text[:_TEXT_CHARS]}


@dataclass
class StreamRead:
    """What one stream gave: ``records`` as (1-based line number, record) pairs, and diagnostics."""

    path: Path
    records: list[tuple[int, dict]] = field(default_factory=list)
    diagnostics: list[dict] = field(default_factory=list)


def _lines(path: Path, out: StreamRead):
    """Raw lines of the file; a read failure (truncated gzip, I/O error) ends the stream with a note."""
    opener = gzip.open if path.name.endswith(".gz") else open
    number = 0
    try:
        with opener(path, "rb") as fh:
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
        try:
            text = raw.decode("utf-8")
            bad_utf8 = False
        except UnicodeDecodeError:
            # Keep what can be read: replacement characters in place of the bad bytes.
            text = raw.decode("utf-8", errors="replace")
            bad_utf8 = True
        error = None
        try:
            record = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            record = _lenient(text)  # NaN / Infinity literals, as Python's json writes them
            error = None if record is not None else str(exc)
        if error is not None:
            torn = not terminated
            reason = "torn last line (no newline; the writer was cut off)" if torn else f"invalid JSON: {error}"
            if bad_utf8:
                reason += "; invalid UTF-8"
            out.diagnostics.append(diagnostic(name, number, reason, text))
            continue
        if not isinstance(record, dict):
            out.diagnostics.append(diagnostic(name, number, f"not a JSON object ({type(record).__name__})", text))
            continue
        if not isinstance(record.get("type"), str):
            out.diagnostics.append(diagnostic(name, number, "record without a 'type'", text))
            continue
        if bad_utf8:
            out.diagnostics.append(diagnostic(name, number, "invalid UTF-8 bytes replaced with U+FFFD", text))
        out.records.append((number, record))
    return out
