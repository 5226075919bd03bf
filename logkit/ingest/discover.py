"""Find logkit session folders: any folder holding ``<sid>_rank<N>.jsonl`` or ``<sid>_summary.json``."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from logkit.schema import RANK_JSONL_RE, SUMMARY_JSON_RE

__all__ = ["SessionSource", "discover", "sources_in_folder"]


@dataclass
class SessionSource:
    """The files of one session: its id (the file-name prefix), folder, rank streams and summary."""

    session_id: str
    folder: Path
    rank_files: dict[int, Path] = field(default_factory=dict)
    summary: Path | None = None

    @property
    def files(self) -> list[Path]:
        out = [self.rank_files[r] for r in sorted(self.rank_files)]
        return out + ([self.summary] if self.summary is not None else [])


def sources_in_folder(folder: Path, names: list[str] | None = None) -> list[SessionSource]:
    """Sessions whose files lie directly in ``folder`` (one folder may hold several ids)."""
    if names is None:
        try:
            names = [p.name for p in folder.iterdir() if p.is_file()]
        except OSError:
            return []
    found: dict[str, SessionSource] = {}
    for name in sorted(names):
        m = RANK_JSONL_RE.match(name)
        if m:
            src = found.setdefault(m["session_id"], SessionSource(m["session_id"], folder))
            rank = int(m["rank"])
            # A plain stream wins over a gzipped copy of the same rank (sorted: ".jsonl" < ".jsonl.gz").
            src.rank_files.setdefault(rank, folder / name)
            continue
        m = SUMMARY_JSON_RE.match(name)
        if m:
            src = found.setdefault(m["session_id"], SessionSource(m["session_id"], folder))
            src.summary = folder / name
    return [found[k] for k in sorted(found)]


def discover(root: str | Path) -> list[SessionSource]:
    """Every session under ``root``, recursively (hidden folders skipped), in path order.

    Symlinked folders are followed (people gather runs under one folder with links); a
    folder already visited through another path is not read twice.
    """
    root = Path(root)
    out: list[SessionSource] = []
    seen: set[str] = set()
    for dirpath, dirnames, filenames in os.walk(root, followlinks=True):
        real = os.path.realpath(dirpath)
        if real in seen:  # a link cycle, or a second link to the same folder
            dirnames[:] = []
            continue
        seen.add(real)
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        out.extend(sources_in_folder(Path(dirpath), filenames))
    return out
