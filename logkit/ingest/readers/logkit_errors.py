"""Our ``<sid>_errors.log``: the logger's own failures (a full disk, a file removed underneath, a
record that could not be built), which it never raised into training. Each line becomes a
``logger_error`` event, so that ``--diagnose`` says the logs themselves may be incomplete."""

from __future__ import annotations

from datetime import datetime
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult, epoch
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.normalise import Grammar, records
from logkit.schema.lines import ERRORS_LINE
from logkit.schema.vocab import EventKind

GRAMMAR = Grammar(ERRORS_LINE.pattern)


def _time(stamp: str) -> float | None:
    try:
        return epoch(datetime.fromisoformat(stamp.replace("Z", "+00:00")))
    except ValueError:
        return None


def read_logkit_errors(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.LOGKIT_ERRORS)
    for rec in records(read, GRAMMAR):
        number, line = rec.number, rec.text
        v = ERRORS_LINE.parse(line)
        if v is None:
            read.unmatched(number, line)
            continue
        read.used += 1
        read.event(EventKind.LOGGER_ERROR, number, time_s=_time(v["timestamp"]), rank=rank, level=v["level"],
                   message=v["message"])
    return read.result()
