"""One reader per log format; ``READERS`` maps a format name to its reader, ``sniff`` names a
file's format from its name and first bytes. Both are derived from the formats' declarations
(``readers.formats``: each format declared once).

Every reader is ``reader(path, rank=None) -> ReadResult`` (``rank``: the rank a file belongs
to when its folder says so, e.g. ``logs/rank_N/``) and never raises on content.

A reader's module is imported when a file of its format is read, not with this package: discovering
a folder imports ``sniff`` and ``formats`` (and so this package), and a folder of our JSONL streams
reads no other format.
"""

from __future__ import annotations

from pathlib import Path

from logkit.ingest.readers.formats import READERS, last_resort
from logkit.ingest.readers.sniff import sniff

__all__ = ["READERS", "ReadResult", "sniff", "read_file"]


def __getattr__(name: str):
    if name == "ReadResult":  # lazy: it brings pyarrow and the frames' assembly
        from logkit.ingest.readers.base import ReadResult

        return ReadResult
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def read_file(path: str | Path, format: str | None = None, rank: int | None = None):
    """Read one file with the reader of ``format`` (sniffed when not given; a console capture as a last resort)."""
    path = Path(path)
    fmt = format or sniff(path, loose=True) or last_resort().name
    return READERS[fmt](path, rank=rank)
