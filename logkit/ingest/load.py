"""Build a ``Session`` from the files of one session, and load every session under a folder."""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from logkit.ingest import jsonl_arrow, jsonl_lines, meta
from logkit.ingest.assemble import Frames, diagnostic, make_frame, rows_table, shift_times
from logkit.ingest.discover import SessionSource, discover, source_for_file, sources_in_folder
from logkit.ingest.session import Session, iso_seconds

PROGRESS_MIN_BYTES = 64_000_000
# The pyarrow engine for our JSONL streams (jsonl_arrow); False reads every stream line by line.
FAST_JSONL = True


def _read_files(source: SessionSource, skip_text: bool) -> list:
    """The files of other formats (and our text logs, unless the streams say it all)."""
    from logkit.ingest.readers import READERS

    return [READERS[f.format](f.path, rank=f.rank) for f in source.extra
            if not (skip_text and f.format == "logkit_text")]


def _companions(source: SessionSource) -> list[dict]:
    """The meta of a run folder's results.json (trainer_state.json, the console capture: the
    streams hold the same, exactly)."""
    from logkit.ingest.readers import READERS

    return [READERS[f.format](f.path).meta for f in source.companions if f.format == "results_json"]


@dataclass
class RankRead:
    """What one rank's stream gives a session: its frame tables in file order, as (frame name, arrow
    table) pairs, and its ``Stream`` (whole records, latest time, diagnostics). Picklable: the
    analysis engine makes these where the files are and merges them centrally (``build_session``)."""

    rank: int
    tables: list = field(default_factory=list)
    stream: jsonl_lines.Stream | None = None

    # the frames' interface that the engines fill
    def add(self, name: str, table) -> None:
        if table.num_rows:
            self.tables.append((name, table))

    def mark(self) -> int:
        return len(self.tables)

    def truncate(self, mark: int) -> None:
        del self.tables[mark:]


def read_rank(path: str | Path, rank: int, into: RankRead | None = None, chunk_bytes: int | None = None) -> RankRead:
    """The tables and stream of one rank's JSONL stream (``build_session(source, ranks=...)`` merges them).
    ``into``: the ``RankRead`` to fill (one whose ``add`` reduces some tables as they come, say);
    ``chunk_bytes``: how much of the stream is parsed at a time."""
    (read,) = read_ranks([(path, rank)], [into] if into is not None else None, chunk_bytes)
    return read


def _per_line(path: Path, rank: int, frames) -> jsonl_lines.Stream:
    return jsonl_lines.read_stream(path, rank, frames.add)


def read_ranks(streams: list[tuple[str | Path, int]], into: list[RankRead] | None = None,
               chunk_bytes: int | None = None) -> Iterator[RankRead]:
    """``read_rank`` of each (path, rank), as each is read, the streams read as one flow by the fast
    engine (the next one's chunks parsed while the last of the one before is mapped); a stream it
    refuses, line by line, in its turn."""
    reads = into if into is not None else [RankRead(rank) for _, rank in streams]
    paths = [Path(path) for path, _ in streams]
    if not FAST_JSONL:
        for path, read in zip(paths, reads, strict=True):
            read.stream = _per_line(path, read.rank, read)
            yield read
        return
    found = jsonl_arrow.read_streams(zip(paths, [r.rank for r in reads], reads, strict=True), chunk_bytes,
                                     fallback=_per_line)
    try:
        for read in reads:
            read.stream = next(found)
            yield read
    finally:
        found.close()  # the fast engine's buffers given back, its chunks in flight done


class _Into(RankRead):
    """A rank's read straight into the session's frames (the fast engine maps the streams in order):
    each table goes to the frames' builders as it comes, never a whole rank's tables at once."""

    def __init__(self, rank: int, frames: Frames) -> None:
        super().__init__(rank)
        self.frames = frames

    def add(self, name: str, table) -> None:
        self.frames.add(name, table)

    def mark(self):
        return self.frames.mark()

    def truncate(self, mark) -> None:
        self.frames.truncate(mark)


def _add_ranks(source: SessionSource, ranks: list[RankRead] | None, frames: Frames, streams: dict) -> None:
    """The streams' tables added to ``frames`` rank by rank: read here, or given (``ranks``, in rank order)."""
    if ranks is None:
        files = sorted(source.rank_files.items())
        for read in read_ranks([(path, rank) for rank, path in files], [_Into(rank, frames) for rank, _ in files]):
            streams[read.rank] = read.stream
        return
    for read in ranks:
        for name, table in read.tables:
            frames.add(name, table)
        read.tables = []  # each table once in memory: the frames hold its values now
        streams[read.rank] = read.stream


def build_session(source: SessionSource, ranks: list[RankRead] | None = None) -> Session:
    """Read the files of ``source`` into a ``Session`` (never raises on content). ``ranks``: the
    streams already read (``read_rank``), one per rank file, in rank order."""
    frames, streams, diagnostics = Frames(), {}, []
    _add_ranks(source, ranks, frames, streams)
    for rank in sorted(streams):
        diagnostics += streams[rank].diagnostics
    summary = None
    if source.summary is not None:
        summary, notes = meta.read_summary(source.summary)
        diagnostics += notes
    found = meta.our_meta(streams, summary, source, _companions(source))
    reads = _read_files(source, skip_text=bool(source.rank_files))
    shift_times(reads, iso_seconds(found.get("start_time")) if streams else None)
    meta.add_reads(found, reads, streams=bool(streams))
    for read in reads:
        diagnostics += read.diagnostics
        for name, table in read.tables.items():
            frames.add(name, table)
    frames.add("diagnostics", rows_table(diagnostics))
    return Session(meta=meta.finish(found, source), **frames.result(by_time=bool(reads)))


def as_of_now(session: Session, source: SessionSource) -> Session:
    """``session`` with what its files' modification times say now (still running or not:
    ``meta.liveness``). Kept out of ``build_session`` so that a cached session is judged anew."""
    meta.liveness(session, source)
    return session


def _check_readable(path: Path) -> None:
    """A path that exists but cannot be read is the user's to fix: say so plainly."""
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError as exc:
        raise PermissionError(f"cannot read {path}: {exc.strerror or exc}") from None


def _empty(path: Path, reason: str) -> Session:
    session = Session.empty({"session_id": path.name, "folder": str(path), "files": [], "ranks_found": []})
    session.diagnostics = make_frame("diagnostics", [diagnostic(str(path), None, reason)])
    return session


def load_session(path: str | Path) -> Session:
    """One session from a session folder, or from one of its files (its whole session is read).

    A folder that holds no session directly is searched below; when that finds several, the
    earliest is returned and a diagnostic names the others. Raises ``FileNotFoundError``
    only when ``path`` does not exist.
    """
    path = Path(path)
    if not path.exists():
        raise FileNotFoundError(f"no such file or folder: {path}")
    if path.is_file():
        _check_readable(path)
        src = source_for_file(path)
        if src is None:
            return _empty(path, "file could not be listed with its folder")
        return as_of_now(build_session(src), src)
    sources = sources_in_folder(path) or discover(path)
    if not sources:
        return _empty(path, "no training logs found (no format logkit reads)")
    named = [s for s in sources if s.session_id == path.name]
    if named or len(sources) == 1:
        src = (named or sources)[0]
        return as_of_now(build_session(src), src)
    sessions = sorted((as_of_now(build_session(s), s) for s in sources), key=Session.start_key)
    chosen = sessions[0]
    others = ", ".join(s.session_id for s in sessions[1:])
    note = diagnostic(str(path), None, f"folder holds {len(sessions)} sessions; loaded the earliest, "
                                       f"not: {others} (use load_sessions)")
    chosen.diagnostics = make_frame("diagnostics", [*chosen.diagnostics.to_dict("records"), note])
    return chosen


def source_bytes(src: SessionSource) -> int:
    total = 0
    for p in src.files:
        try:
            total += os.stat(p).st_size
        except OSError:
            pass
    return total


def progress_bar(sources: list[SessionSource], progress: bool | None):
    """tqdm over the bytes to read, on stderr: when asked, or on a terminal for a long ingest."""
    total = sum(source_bytes(src) for src in sources)
    show = progress if progress is not None else (sys.stderr.isatty() and total > PROGRESS_MIN_BYTES)
    if not show:
        return None
    from tqdm import tqdm

    return tqdm(total=total, unit="B", unit_scale=True, desc="reading logs", file=sys.stderr, leave=False)


def build_sessions(sources: list[SessionSource], cache: bool = False, progress: bool | None = None) -> list[Session]:
    """Sessions of ``sources`` (from the cache where it is valid), sorted by start time."""
    bar = progress_bar(sources, progress)
    sessions = []
    for src in sources:
        session = None
        if cache:
            from logkit.ingest.cache import load_cached, store

            session = load_cached(src)
            if session is None:
                session = build_session(src)
                store(src, session)
        else:
            session = build_session(src)
        sessions.append(as_of_now(session, src))
        if bar is not None:
            bar.update(source_bytes(src))
    if bar is not None:
        bar.close()
    return sorted(sessions, key=Session.start_key)


def load_sessions(root: str | Path, cache: bool = False, progress: bool | None = None) -> list[Session]:
    """Every session under ``root`` (recursively), sorted by start time, ties by session id.

    ``cache``: reuse parsed sessions from the Parquet cache (``logkit.ingest.cache``) while
    their files are unchanged. ``progress``: a progress bar on stderr (None: on a terminal,
    for ingests over 64 MB). Raises ``FileNotFoundError`` only when ``root`` does not exist
    (``PermissionError`` when a file given cannot be read); a folder without sessions gives
    an empty list.
    """
    root = Path(root)
    if not root.exists():
        raise FileNotFoundError(f"no such file or folder: {root}")
    if root.is_file():
        return [load_session(root)]
    return build_sessions(discover(root), cache=cache, progress=progress)
