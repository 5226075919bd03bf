"""Read the files of one session into a ``Session``: its rank streams (the fast engine, or line by line),
its summary, its other formats, assembled into frames and meta. Loading folders is ``logkit.run.load``'s."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from logkit.ingest import jsonl_arrow, jsonl_batch, jsonl_lines, meta
from logkit.ingest.assemble import Frames, rows_table, shift_times
from logkit.ingest.discover import SessionSource
from logkit.ingest.readers.formats import READERS, declared
from logkit.ingest.session import Session, iso_seconds

# The pyarrow engine for our JSONL streams (jsonl_arrow); False reads every stream line by line.
FAST_JSONL = True


def _read_files(source: SessionSource, skip_text: bool, read_file=None) -> list:
    """The files of other formats (and our text logs, unless the streams say it all: ``echoes_streams``)."""
    reads = []
    for f in source.extra:
        if not (skip_text and declared(f.format).echoes_streams):
            reads.append(READERS[f.format](f.path, rank=f.rank))
        if read_file is not None:
            read_file(f.path)
    return reads


def _companions(source: SessionSource) -> list[dict]:
    """The meta of a run folder's results.json (``companion_meta``; trainer_state.json, the console
    capture: the streams hold the same, exactly)."""
    return [READERS[f.format](f.path).meta for f in source.companions
            if declared(f.format).companion_meta]


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


def _per_line(path: Path, rank: int, frames) -> jsonl_lines.Stream:
    return jsonl_lines.read_stream(path, rank, frames.add)


def read_ranks(streams: list[tuple[str | Path, int]], into: list[RankRead] | None = None,
               chunk_bytes: int | None = None, together: bool = False) -> Iterator[RankRead]:
    """Each (path, rank)'s tables and stream, as each is read, the streams read as one flow by the fast
    engine (the next one's chunks parsed while the last of the one before is mapped); a stream it
    refuses, line by line, in its turn. ``together``: the reads add to one session's frames (``_Into``):
    runs of small streams are parsed together (``jsonl_batch``)."""
    reads = into if into is not None else [RankRead(rank) for _, rank in streams]
    paths = [Path(path) for path, _ in streams]
    if not FAST_JSONL:
        for path, read in zip(paths, reads, strict=True):
            read.stream = _per_line(path, read.rank, read)
            yield read
        return
    runs = _runs(paths) if together else [(False, 0, len(paths))]
    for small, first, end in runs:
        group = list(zip(paths[first:end], reads[first:end], strict=True))
        if small:  # one frames for all: the rows of several streams go to reads[first]'s as one table
            found = jsonl_batch.read_small([(path, read.rank) for path, read in group], reads[first],
                                           fallback=_per_line)
        else:
            found = jsonl_arrow.read_streams(((path, read.rank, read) for path, read in group), chunk_bytes,
                                             fallback=_per_line)
        try:
            for _, read in group:
                read.stream = next(found)
                yield read
        finally:
            found.close()  # the fast engine's buffers given back, its chunks in flight done


def _runs(paths: list[Path]) -> list[tuple[bool, int, int]]:
    """(small, first, end): the runs of consecutive streams that are small (``jsonl_batch.small``) or not."""
    runs: list[tuple[bool, int, int]] = []
    for i, path in enumerate(paths):
        small = jsonl_batch.small(path)
        if runs and runs[-1][0] == small:
            runs[-1] = (small, runs[-1][1], i + 1)
        else:
            runs.append((small, i, i + 1))
    return runs


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


def _add_ranks(source: SessionSource, ranks: list[RankRead] | None, frames: Frames, streams: dict,
               read_file=None) -> None:
    """The streams' tables added to ``frames`` rank by rank: read here, or given (``ranks``, in rank order)."""
    if ranks is None:
        files = sorted(source.rank_files.items())
        for read in read_ranks([(path, rank) for rank, path in files], [_Into(rank, frames) for rank, _ in files],
                               together=True):
            streams[read.rank] = read.stream
            if read_file is not None:
                read_file(source.rank_files[read.rank])
        return
    for read in ranks:
        for name, table in read.tables:
            frames.add(name, table)
        read.tables = []  # each table once in memory: the frames hold its values now
        streams[read.rank] = read.stream


def build_session(source: SessionSource, ranks: list[RankRead] | None = None, read_file=None) -> Session:
    """Read the files of ``source`` into a ``Session`` (never raises on content). ``ranks``: the
    streams already read (``read_ranks``), one per rank file, in rank order. ``read_file(path)``: called
    as each rank stream and file of another format is read (a progress bar)."""
    frames, streams, diagnostics = Frames(), {}, list(source.notes)
    _add_ranks(source, ranks, frames, streams, read_file)
    for rank in sorted(streams):
        diagnostics += streams[rank].diagnostics
    summary = None
    if source.summary is not None:
        summary, notes = meta.read_summary(source.summary)
        diagnostics += notes
    found = meta.our_meta(streams, summary, source, _companions(source), diagnostics)
    reads = _read_files(source, skip_text=bool(source.rank_files), read_file=read_file)
    shift_times(reads, iso_seconds(found.get("start_time")) if streams else None)
    meta.add_reads(found, reads, streams=bool(streams), notes=diagnostics)
    for read in reads:
        diagnostics += read.diagnostics
        for name, table in read.tables.items():
            frames.add(name, table)
    frames.add("diagnostics", rows_table(diagnostics))
    return Session(meta=meta.finish(found, source), **frames.result(by_time=bool(reads)))


def session_of_records(source: SessionSource, records: dict[int, list[tuple[int, dict]]]) -> Session:
    """The session of ``source`` from records already read: each rank's (line, record) pairs, in line
    order, mapped as its stream's would be (``jsonl_lines.read_stream``), then assembled as
    ``build_session`` assembles a session (the live view's window of each rank's last steps)."""
    reads = []
    for rank in sorted(records):
        read = RankRead(rank)
        read.stream = jsonl_lines.read_stream(source.rank_files[rank], rank, read.add, records=records[rank])
        reads.append(read)
    return build_session(source, ranks=reads)
