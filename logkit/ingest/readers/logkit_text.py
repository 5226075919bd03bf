"""Our text logs (``*_main.log``, ``*_multigpu.log``, ``*_performance.log``): read by columns
(``text_columns``) when long and as we wrote them, else line by line (``logkit_lines``) through
``normalise`` (a log pasted indented, quoted or behind a log service's columns loses what was put
around it first). Used when a session has no JSONL streams (folders of the text logs alone).
"""

from __future__ import annotations

import re
from datetime import date, datetime
from pathlib import Path

from logkit.ingest.readers import text_columns
from logkit.ingest.readers.base import Read, ReadResult, read_bytes, text_lines
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.logkit_lines import LineReader
from logkit.ingest.readers.normalise import Grammar, layout_of_bytes
from logkit.schema import lines as kinds

# Files with fewer lines (and under a MB) are read line by line: the columnar reader's set-up costs more.
BULK_MIN_LINES = 2000
_DATE_IN_NAME = re.compile(r"(\d{8})_\d{6}")
# How a line of ours begins: a main.log or process line, a step line, a metrics line (groups unnamed: one
# alternation of the templates' patterns).
GRAMMAR = Grammar(re.compile("|".join(
    "(?:" + re.sub(r"\(\?P<\w+>", "(?:", k.pattern.pattern) + ")"
    for k in (kinds.MAIN_LINE, kinds.PROCESS_LINE, kinds.STEP_LINE, kinds.METRICS_LINE))))


def _date_hint(path: Path) -> date:
    """The day main.log's clock (which has no date) starts on: the session id's, else 1970-01-01."""
    m = _DATE_IN_NAME.search(path.name)
    if m:
        try:
            return datetime.strptime(m[1], "%Y%m%d").date()
        except ValueError:
            pass
    return date(1970, 1, 1)


def read_logkit_text(path: Path, rank: int | None = None) -> ReadResult:
    """Steps, comm, perf, evals, warnings and header meta from one of our text logs."""
    read = Read(Path(path), FileFormat.LOGKIT_TEXT)
    data = read_bytes(read.path, read)
    layout = layout_of_bytes(data, GRAMMAR)
    if layout.plain and (len(data) > 1 << 20 or data.count(b"\n") >= BULK_MIN_LINES) and not read.diagnostics:
        bulk = text_columns.read_bulk(read.path, data, _date_hint(read.path))  # lines as we wrote them
        if bulk is not None:
            return bulk.result()
    reader = LineReader(read, _date_hint(read.path))
    for rec in layout.records(enumerate(text_lines(data, read), start=1)):
        reader.line(rec.number, rec.text)
    return read.result()
