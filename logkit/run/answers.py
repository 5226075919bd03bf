"""What ``analyze_logs`` printed, kept to be printed again: a run's standard output and notes, in order, and
its exit status, in the cache (``run.cache``), keyed on what the output follows from:

- the question: the options that shape the output (the command line's output flags, its gates, the
  sessions asked for), the folder as given and the working folder it is read from;
- the code: the sources of every logkit module the CLI imports (``cache.code_key``), and the versions of
  Python and of the libraries that compute the figures;
- the data: every session discovered under the folder, by id and files, valid while every file keeps its
  size and mtime_ns (a file added to a session, or a new session, is another key).

A second run of the same command on unchanged files prints the kept answer: it imports no pandas,
parses nothing, analyses nothing (its whole cost is the discovery of the folder). An answer is kept
only where nothing in it depends on the time of the run: every session ended (a session without an end
is judged against the clock, ``ingest.meta.liveness``: "in progress" while its files are being written).
Runs that write files (``--report``, ``--plot``, ``--export``) or map ranks on Dask are not kept.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from pathlib import Path

import orjson

from logkit.run import cache

KIND = "answers"
# The libraries the figures and their text come from (a new version may round or order otherwise).
LIBRARIES = ("pandas", "numpy", "pyarrow", "polars", "click", "orjson")


def _versions() -> list:
    """Python's version, and each library's installed distributions (``name-version.dist-info``), found beside
    the package without importing it (``importlib.metadata`` alone costs 20 ms to import)."""
    out: list = [sys.version]
    listed: dict[str, list[str]] = {}
    for name in LIBRARIES:
        spec = importlib.util.find_spec(name)
        if spec is None or not spec.origin:
            out.append(None)
            continue
        site = os.path.dirname(os.path.dirname(spec.origin))
        if site not in listed:
            listed[site] = os.listdir(site)
        out.append(sorted(n for n in listed[site] if n.lower().startswith(f"{name}-") and n.endswith((".dist-info", ".egg-info"))))
    return out


class Question:
    """One run's question: ``lookup()`` the kept answer, else ``keep(...)`` the one it gave."""

    def __init__(self, root: Path, options: dict, code: str = "logkit.cli") -> None:
        from logkit.ingest.discover import discover

        self.sources = None
        self.entry = self.stamp = None
        self.notes: list[dict] = []  # files not read, where no session is (``discover``)
        if not root.is_dir():
            return  # a single file: its session is read whole, nothing to key on cheaply
        self.sources = discover(root, follow_links=bool(options.get("follow_links")), notes=self.notes)
        files = [str(p) for src in self.sources for p in src.files]
        described = [[s.session_id, s.kind, s.run, str(s.folder), [str(p) for p in s.files]] for s in self.sources]
        self.entry = cache._entry(KIND, [cache.code_key(code), _versions(), options, str(root), os.getcwd(),
                                         described])
        self.stamp = cache.stamps(files)

    def lookup(self) -> dict | None:
        """The kept answer (``{"said": [[err, text], ...], "status": int}``), or None."""
        if self.entry is None:
            return None
        return cache._read(self.entry, self.stamp, lambda folder: orjson.loads((folder / "answer.json").read_bytes()))

    def keep(self, sessions: list, said: list, status: int) -> bool:
        """Keep this run's answer, when no session's figures follow the clock."""
        from logkit.ingest.meta import NOT_ENDED
        from logkit.schema.vocab import Status

        if self.entry is None or any(s.meta.status in (*NOT_ENDED, Status.IN_PROGRESS, Status.NO_RECORD)
                                     for s in sessions):
            return False
        doc = orjson.dumps({"said": said, "status": status})
        return cache._write(self.entry, self.stamp, lambda folder: (folder / "answer.json").write_bytes(doc))
