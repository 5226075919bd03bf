"""Loading a folder, one pass downward: discover the sessions (``ingest.discover``), read each (from the
cache, or its files through ``ingest.load``, its ranks mapped by the engine), keep it in the cache, and
judge it as of now (``ingest.meta.liveness``: a cached session is judged anew).

- ``load_sessions`` / ``load_session``: the public API. Every record is kept: ``session.comm`` holds
  every communication record of every file.
- ``load_for_analysis``: what ``analyze_logs`` reads, through the engine: each rank's communication
  records reduced where they are read (memory: ranks x steps, never the records), in this process,
  in a local pool or on Dask. ``analyze(loaded.sessions, comm_parts=loaded.comm_parts)`` gives the
  figures ``analyze(load_sessions(root))`` gives.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from logkit.ingest import meta
from logkit.ingest.assemble import diagnostic, make_frame
from logkit.ingest.discover import SessionSource, discover, source_for_file, sources_in_folder
from logkit.ingest.load import build_session
from logkit.ingest.safe_io import display, open_file, size_of
from logkit.ingest.session import Session
from logkit.run.engine import Loaded, build_sessions, whole

# On a terminal the bars show once reading has taken this long (a quick read prints nothing); --progress
# shows them at once, wherever stderr goes.
PROGRESS_DELAY_S = 2.0


def source_bytes(src: SessionSource) -> int:
    return sum(size_of(p) for p in src.files)


def _delay(progress: bool | None) -> float | None:
    """How long before a bar shows: None for no bar (``progress`` False, or None off a terminal)."""
    if progress is None:
        return PROGRESS_DELAY_S if sys.stderr.isatty() else None
    return 0.0 if progress else None


class _Bar:
    """tqdm over the bytes of the files read, on stderr: advanced as each file is read here, and as each
    session is done (what was read elsewhere, or taken from the cache)."""

    def __init__(self, total: int, files: int, sessions: int, delay: float) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=total, unit="B", unit_scale=True, file=sys.stderr, leave=False, delay=delay,
                        desc=f"reading logs ({files:,} files, {sessions:,} sessions)", mininterval=0.5)
        self.counted = 0  # bytes of the session being read already counted, file by file

    def file(self, path) -> None:
        size = size_of(path)
        self.counted += size
        self.bar.update(size)

    def update(self, src: SessionSource) -> None:
        self.bar.update(max(0, source_bytes(src) - self.counted))
        self.counted = 0

    def close(self) -> None:
        self.bar.close()


def progress_bar(total: int, progress: bool | None, files: int = 0, sessions: int = 0) -> _Bar | None:
    """A progress bar when asked (``progress``), or on a terminal once reading takes ``PROGRESS_DELAY_S``."""
    delay = _delay(progress)
    return None if delay is None else _Bar(total, files, sessions, delay)


class _Finding:
    """tqdm counting the files looked at while the sessions are found (thousands of files are sniffed)."""

    def __init__(self, delay: float) -> None:
        from tqdm import tqdm

        self.bar = tqdm(unit=" files", desc="finding logs", file=sys.stderr, leave=False, delay=delay,
                        mininterval=0.5)

    def __call__(self, files: int) -> None:
        self.bar.update(files)

    def close(self) -> None:
        self.bar.close()


def as_of_now(session: Session, source: SessionSource) -> Session:
    """``session`` with what its files' modification times say now (still running or not)."""
    meta.liveness(session, source)
    return session


def _check_readable(path: Path) -> None:
    """A path that exists but cannot be read is the user's to fix: say so plainly (a FIFO, a device:
    what it is, never a wait for a writer)."""
    try:
        with open_file(path, unzip=False) as fh:
            os.pread(fh.fileno(), 1, 0)  # the first byte, whatever size the file says it has (/proc)
    except OSError as exc:
        raise PermissionError(f"cannot read {display(path)}: {exc.strerror or exc}") from None


def _empty(path: Path, reason: str) -> Session:
    session = Session.empty({"session_id": display(path.name), "folder": display(path), "files": [],
                             "ranks_found": []})
    session.diagnostics = make_frame("diagnostics", [diagnostic(str(path), None, reason)])
    return session


def _sources(root: Path, follow_links: bool = False, notes: list | None = None,
             progress: bool | None = False) -> list[SessionSource] | Session:
    """The sessions under ``root`` (recursively), or, for a file, its session (an empty one with a
    diagnostic when the file cannot be listed with its folder). ``notes``: files not read in folders
    without a session; ``progress``: a count of the files looked at on stderr (as ``progress_bar``)."""
    if not root.exists() and not root.is_symlink():
        raise FileNotFoundError(f"no such file or folder: {display(root)}")
    if not root.is_dir():
        _check_readable(root)
        src = source_for_file(root)
        return [src] if src is not None else _empty(root, "file could not be listed with its folder")
    delay = _delay(progress)
    if delay is None:
        return discover(root, follow_links=follow_links, notes=notes)
    finding = _Finding(delay)
    try:
        return discover(root, follow_links=follow_links, notes=notes, listed=finding)
    finally:
        finding.close()


def _read(sources: list[SessionSource], *, cache: bool, progress: bool | None, engine: bool,
          scheduler: str | None = None) -> Loaded:
    total = sum(source_bytes(src) for src in sources)
    bar = progress_bar(total, progress, sum(len(src.files) for src in sources), len(sources))
    try:
        if engine:
            loaded = build_sessions(sources, cache=cache, bar=bar, scheduler=scheduler, total_bytes=total)
        else:
            loaded = Loaded([], [])
            for src in sources:
                loaded.sessions.append(whole(src, cache, None if bar is None else bar.file))
                loaded.comm_parts.append(None)
                if bar is not None:
                    bar.update(src)
    finally:
        if bar is not None:
            bar.close()
    for session, src in zip(loaded.sessions, sources, strict=True):
        as_of_now(session, src)
    order = sorted(range(len(sources)), key=lambda i: loaded.sessions[i].start_key())
    return Loaded([loaded.sessions[i] for i in order], [loaded.comm_parts[i] for i in order])


def load_sessions(root: str | Path, *, cache: bool = False, progress: bool | None = None,
                  follow_links: bool = False) -> list[Session]:
    """Every session under ``root`` (recursively), sorted by start time, ties by session id; every record
    kept (``session.comm`` holds every communication record).

    ``cache``: reuse parsed sessions while their files are unchanged (``logkit.run.cache``).
    ``progress``: progress bars on stderr (None: on a terminal, once reading takes 2 s). A single file
    gives its whole session. Raises ``FileNotFoundError`` only when ``root`` does not exist
    (``PermissionError`` when a file given cannot be read); a folder without sessions gives an empty list.
    ``follow_links``: links that lead out of ``root`` are followed too (``ingest.discover``).
    """
    found = _sources(Path(root), follow_links, progress=progress)
    if isinstance(found, Session):
        return [found]
    return _read(found, cache=cache, progress=progress, engine=False).sessions


def load_for_analysis(root: str | Path, *, cache: bool = False, progress: bool | None = None,
                      scheduler: str | None = None, sources: list[SessionSource] | None = None,
                      follow_links: bool = False, notes: list | None = None) -> Loaded:
    """The sessions under ``root`` as ``analyze_logs`` reads them: through the engine, each rank's comm
    records reduced where they are read (see the module doc). ``scheduler``: a Dask scheduler's address
    (default: ``$LOGKIT_DASK_SCHEDULER``, else this machine); ``sources``: the sessions ``discover(root)``
    found already (a folder's), and ``notes`` the files it did not read; ``follow_links``: links that
    lead out of ``root`` are followed too."""
    notes = [] if notes is None else notes
    found = _sources(Path(root), follow_links, notes, progress) if sources is None else sources
    if isinstance(found, Session):
        return Loaded([found], [None], notes)
    loaded = _read(found, cache=cache, progress=progress, engine=True, scheduler=scheduler)
    return Loaded(loaded.sessions, loaded.comm_parts, notes)


def load_session(path: str | Path) -> Session:
    """One session from a session folder, or from one of its files (its whole session is read).

    A folder that holds no session directly is searched below; when that finds several, the
    earliest is returned and a diagnostic names the others. Raises ``FileNotFoundError``
    only when ``path`` does not exist.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or folder: {path}")
    if not path.is_dir():
        return load_sessions(path)[0]
    sources = sources_in_folder(path) or discover(path)
    if not sources:
        return _empty(path, "no training logs found (no format logkit reads)")
    named = [s for s in sources if s.session_id == path.name]
    if named or len(sources) == 1:
        src = (named or sources)[0]
        return as_of_now(build_session(src), src)
    sessions = _read(sources, cache=False, progress=False, engine=False).sessions
    chosen = sessions[0]
    others = ", ".join(s.session_id for s in sessions[1:])
    note = diagnostic(str(path), None, f"folder holds {len(sessions)} sessions; loaded the earliest, "
                                       f"not: {others} (use load_sessions)")
    chosen.diagnostics = make_frame("diagnostics", [*chosen.diagnostics.to_dict("records"), note])
    return chosen
