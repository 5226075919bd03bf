"""One engine for one machine or a cluster: a function mapped over ranks, its partial results merged
centrally, with the same figures as the sessions read whole.

- **map** (``rank_partial``, where the files are): one rank's stream is read in chunks
  (``ingest.load.read_ranks``, the fast engine's whole-line chunks) and its comm records, the bulk of
  a stream (one per gradient bucket per step), are reduced chunk by chunk as the reader hands them
  over (``comm_reduce.CommReducer``: per record four floats and a byte, 33 bytes, instead of a frame
  row), then to that rank's figures (counts, sums, medians and 95th percentiles per op, exact, as each
  is a figure of one rank: ``CommPart``). What stays is bounded by the rank's steps: its step, phase,
  performance, GPU, eval and event tables, the whole records its meta is read from, its diagnostics,
  and those 33 bytes per comm record. A worker holds one rank at a time. (A stream the fast engine
  refuses, an invalid line say, is read again line by line, whole.)
- **merge** (here): ``build_session(source, ranks=...)`` assembles each session from its ranks'
  partial results as it does from files; the comm reductions go beside it (``Loaded.comm_parts``), from
  which ``communication_table`` gives the same rows. Everything else (step statistics, breakdowns
  and stragglers across ranks, findings) is computed by ``analyze`` from the merged frames. Memory:
  ranks x steps, never the comm records.
- **where it runs**: in this process for small folders (a session's streams read as one flow: the
  next one parsed while the one before is mapped); in a local process pool for large ones
  (``POOL_MIN_BYTES`` of streams, several ranks, several cores); on an existing dask.distributed
  cluster when a scheduler address is given (``--dask ADDRESS`` or ``$LOGKIT_DASK_SCHEDULER``;
  the workers must see the log files at the same paths and have logkit installed).

One approximation, in the plots only: the bandwidth curve's point per (op, size) is the
record-weighted median of the ranks' medians (exact with one rank); every figure of the JSON is exact.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from logkit.analysis.kernels.comm_reduce import CommReducer, reduce_session
from logkit.ingest.assemble import frame_of
from logkit.ingest.discover import SessionSource
from logkit.ingest.load import RankRead, build_session, read_ranks
from logkit.ingest.meta import records_meta
from logkit.ingest.safe_io import size_of
from logkit.ingest.session import Session
from logkit.run import partials
from logkit.run.cache import load_cached, store
from logkit.run.partials import RankPartial

ENV_SCHEDULER = "LOGKIT_DASK_SCHEDULER"
POOL_MIN_BYTES = 256 << 20
PARTIAL_CACHE_MIN_BYTES = 1 << 20  # a rank's partial result is cached from this size of stream up
# a session of many small ranks is read whole (many_small_ranks): a rank's map costs ~50 ms of frames whatever
# its size (50 sessions of 40 tiny ranks: 131 s mapped, 23 s whole)
MANY_RANKS, SMALL_RANK_BYTES = 8, 256 << 10


class _Reducing(RankRead):
    """A ``RankRead`` whose comm tables are reduced as the reader adds them, chunk by chunk (``CommReducer``)."""

    def __init__(self, rank: int) -> None:
        super().__init__(rank)
        self.comm = CommReducer()

    def add(self, name: str, table) -> None:
        if name == "comm":
            self.comm.add(table)
        else:
            super().add(name, table)

    def mark(self) -> tuple:
        return super().mark(), self.comm.mark()

    def truncate(self, mark: tuple) -> None:
        super().truncate(mark[0])
        self.comm.truncate(mark[1])


def rank_partial(path: str, rank: int, world_size: float | None = None, cache: bool = False,
                 chunk_bytes: int | None = None) -> RankPartial:
    """The map: one rank's stream read in chunks and its comm records reduced chunk by chunk (see module
    doc). ``world_size``: the n of records without a group size (default: what the stream's own records
    say). ``cache``: through the cache of partial results (``run.cache``) of the machine it runs on.
    ``chunk_bytes``: how much of the stream is parsed at a time (``jsonl_arrow.CHUNK_BYTES``)."""
    return rank_partials([(path, rank)], world_size, cache, chunk_bytes)[0]


def rank_partials(streams: list[tuple[str, int]], world_size: float | None = None, cache: bool = False,
                  chunk_bytes: int | None = None) -> list[RankPartial]:
    """``rank_partial`` of each (path, rank), the streams not in the cache read as one flow (``read_ranks``:
    the next stream parsed while the one before is mapped): the map of a session's ranks in this process."""
    parts: dict[int, RankPartial] = {}
    # a small stream is read again faster than its cache entry is written and read (thousands of tiny ranks)
    kept = {i for i, (path, _) in enumerate(streams) if cache and size_of(path) >= PARTIAL_CACHE_MIN_BYTES}
    for i in sorted(kept):
        hit = partials.load(*streams[i], world_size)
        if hit is not None:
            parts[i] = hit
    todo = [i for i in range(len(streams)) if i not in parts]
    reads = read_ranks([streams[i] for i in todo], [_Reducing(streams[i][1]) for i in todo], chunk_bytes)
    for i, reducing in zip(todo, reads, strict=True):  # each reduced as soon as it is read
        parts[i] = _partial(reducing, world_size)
        if i in kept:
            partials.store(*streams[i], world_size, parts[i])
    return [parts[i] for i in range(len(streams))]


def _partial(reducing: _Reducing, world_size: float | None) -> RankPartial:
    read = RankRead(reducing.rank, reducing.tables, reducing.stream)
    if not reducing.comm.chunks:  # no comm record: nothing to reduce (a tiny rank's whole cost, else)
        return RankPartial(read, None)
    steps = frame_of("steps", [t for name, t in read.tables if name == "steps"], extra_columns=True)
    assumed = records_meta({read.rank: read.stream}).world_size if world_size is None else world_size
    return RankPartial(read, reducing.comm.result(steps, assumed))


# --- where the map runs ---------------------------------------------------------------------------

class _Now:
    """A call made when its result is asked for (in-process: one rank in memory at a time)."""

    def __init__(self, fn, args) -> None:
        self.fn, self.args = fn, args

    def result(self):
        return self.fn(*self.args)


class _Each:
    """The futures of a session's ranks, one per rank, as one: their results in rank order."""

    def __init__(self, futures: list) -> None:
        self.futures = futures

    def result(self) -> list[RankPartial]:
        return [f.result() for f in self.futures]


def per_rank(runner, streams: list[tuple[str, int]], cache: bool) -> _Each:
    """The map of a session's ranks ((path, rank) each) as a task per rank on ``runner``."""
    return _Each([runner.submit(rank_partial, path, rank, None, cache) for path, rank in streams])


class _Runner:
    """Where the map runs: ``submit(fn, *args)`` gives what has a ``result()``; ``map_ranks`` maps a
    session's ranks, a task per rank unless the runner does better."""

    def map_ranks(self, streams: list[tuple[str, int]], cache: bool):
        """The map of a session's ranks ((path, rank) each); its ``result()``: each rank's ``RankPartial``."""
        return per_rank(self, streams, cache)

    def close(self) -> None:
        pass


class InProcess(_Runner):
    name = "in-process"

    def submit(self, fn, *args):
        return _Now(fn, args)

    def map_ranks(self, streams: list[tuple[str, int]], cache: bool):
        """One task for all the ranks: their streams read as one flow (the next parsed while the one
        before is mapped)."""
        return self.submit(rank_partials, streams, None, cache)


class LocalPool(_Runner):
    """A pool of worker processes on this machine."""

    name = "local process pool"

    def __init__(self, workers: int) -> None:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        self.workers = workers
        self.pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn"))

    def submit(self, fn, *args):
        return self.pool.submit(fn, *args)

    def close(self) -> None:
        self.pool.shutdown(cancel_futures=True)


class DaskCluster(_Runner):
    """An existing dask.distributed cluster, by its scheduler's address."""

    name = "dask"

    def __init__(self, address: str) -> None:
        try:
            from distributed import Client
        except ImportError:
            raise RuntimeError("--dask needs Dask: pip install 'logkit[dask]'") from None
        try:
            # the connect timeout is Dask's (distributed.comm.timeouts.connect, 30 s by default)
            self.client = Client(address, set_as_default=False)
        except (OSError, TimeoutError) as exc:
            raise RuntimeError(f"cannot reach the Dask scheduler at {address}: {exc}") from None
        self.name = f"dask ({address})"

    def submit(self, fn, *args):
        return self.client.submit(fn, *args, pure=False)  # files change: never a result by arguments

    def close(self) -> None:
        self.client.close()


def executor(scheduler: str | None = None, total_bytes: int = 0, tasks: int = 1):
    """Where the map runs: Dask at ``scheduler`` (or ``$LOGKIT_DASK_SCHEDULER``); else a local pool for
    ``POOL_MIN_BYTES`` or more over several tasks on several cores; else this process."""
    address = scheduler or os.environ.get(ENV_SCHEDULER)
    if address:
        return DaskCluster(address)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if tasks > 1 and cores > 1 and total_bytes >= POOL_MIN_BYTES:
        return LocalPool(min(cores, tasks))
    return InProcess()


# --- the merge ------------------------------------------------------------------------------------

def _usable(ws) -> float | None:
    return float(ws) if isinstance(ws, (int, float)) and not isinstance(ws, bool) and ws > 0 else None


@dataclass(frozen=True)
class Loaded:
    """Sessions as the engine gives them, and beside each its ranks' comm reductions (``CommPart``s, in
    rank order), or None where ``session.comm`` holds every record (a session without rank streams, or
    one the cache held whole). ``analyze(loaded.sessions, comm_parts=loaded.comm_parts)``. ``notes``: files
    found and not read (a FIFO, a device, a link out of the folder...) in folders without a session
    (diagnostic rows; those of a session's folder are in its diagnostics)."""

    sessions: list
    comm_parts: list
    notes: list = field(default_factory=list)


def merge(source: SessionSource, parts: list[RankPartial], remap=None) -> tuple[Session, tuple]:
    """The session of ``source`` from its ranks' partial results (in rank order), and their comm
    reductions. ``remap(path, rank, world_size)``: the map again for a rank whose comm records needed
    the session's world size and assumed another (a world size from summary.json, say): its
    ``RankPartial``."""
    comm = [p.comm for p in parts]
    session = build_session(source, ranks=[p.read for p in parts])
    ws = _usable(session.meta.world_size)
    for i, (rank, path) in enumerate(sorted(source.rank_files.items())):
        c = comm[i]
        if c is not None and c.needs_world_size and c.world_size != ws and remap is not None:
            comm[i] = remap(str(Path(path).resolve()), rank, ws).comm
    # the comm rows of the session's other files (NCCL Inspector's beside the streams): reduced here, whole
    extra = reduce_session(session) if not session.comm.empty else ()
    return session, tuple(c for c in comm if c is not None) + extra


def many_small_ranks(source: SessionSource) -> bool:
    """A session of more than ``MANY_RANKS`` ranks whose streams are small (``SMALL_RANK_BYTES`` each on
    average) is read whole here: its comm records, few, reduced by the analysis in one pass over the
    session, not rank by rank (a fixed cost per rank of tens of ms: thousands of tiny ranks)."""
    ranks = len(source.rank_files)
    return ranks > MANY_RANKS and sum(size_of(p) for p in source.rank_files.values()) < SMALL_RANK_BYTES * ranks


def whole(source: SessionSource, cache: bool, read_file=None) -> Session:
    """The session of ``source`` read here with every record (through the cache); ``read_file(path)`` as
    ``build_session`` takes it."""
    session = load_cached(source) if cache else None
    if session is None:
        session = build_session(source, read_file=read_file)
        if cache:
            store(source, session)
    return session


def build_sessions(sources: list[SessionSource], *, cache: bool = False, bar=None, scheduler: str | None = None,
                   runner=None, total_bytes: int = 0) -> Loaded:
    """The sessions of ``sources`` through the engine, in the order given. ``cache``: a session whose
    whole frames the cache holds is taken from it, else each rank's partial result from the cache
    (written where the map ran); ``bar``: a progress bar (``file(path)`` as a file is read here,
    ``update(source)`` as a session is done) or None; ``runner``: an ``executor()`` to use (not closed here)."""
    held = {id(src): load_cached(src) if cache and src.rank_files else None for src in sources}
    mapped = [src for src in sources if held[id(src)] is None and src.rank_files and not many_small_ranks(src)]
    own = runner is None
    runner = runner or executor(scheduler, total_bytes, sum(len(s.rank_files) for s in mapped))
    try:
        # every rank submitted first (the workers run ahead), then merged session by session
        futures = {id(src): runner.map_ranks([(str(Path(p).resolve()), r) for r, p in sorted(src.rank_files.items())],
                                             cache) for src in mapped}
        sessions, comm = [], []
        for src in sources:
            parts = None
            if held[id(src)] is not None:
                session = held[id(src)]
            elif src.rank_files and id(src) in futures:
                session, parts = merge(src, futures.pop(id(src)).result(),
                                       remap=lambda p, r, ws: runner.submit(rank_partial, p, r, ws, cache).result())
            else:
                session = whole(src, cache, None if bar is None else bar.file)
            sessions.append(session)
            comm.append(parts)
            if bar is not None:
                bar.update(src)
    finally:
        if own:
            runner.close()
    return Loaded(sessions, comm)
