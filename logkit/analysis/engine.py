"""One engine for one machine or a cluster: a function mapped over ranks, its partial results merged
centrally, with the same figures as the sessions read whole.

- **map** (``rank_partial``, where the files are): one rank's stream is read in chunks
  (``ingest.load.read_rank``, the fast engine's whole-line chunks) and its comm records, the bulk of
  a stream (one per gradient bucket per step), are reduced chunk by chunk as the reader hands them
  over (``comm_partial.CommReducer``: per record four floats and a byte, 33 bytes, instead of a frame
  row), then to that rank's figures (counts, sums, medians and 95th percentiles per op, exact, as each
  is a figure of one rank: ``CommPart``). What stays is bounded by the rank's steps: its step, phase,
  performance, GPU, eval and event tables, the whole records its meta is read from, its diagnostics,
  and those 33 bytes per comm record. A worker holds one rank at a time. (A stream the fast engine
  refuses, an invalid line say, is read again line by line, whole.)
- **merge** (here): ``build_session(source, ranks=...)`` assembles each session from its ranks'
  partial results as it does from files; the comm reductions go to ``Session.comm_partial``, from
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
from dataclasses import dataclass
from pathlib import Path

from logkit.analysis.comm_partial import CommReducer
from logkit.analysis.communication import CommPart
from logkit.ingest.assemble import frame_of
from logkit.ingest.discover import SessionSource, discover
from logkit.ingest.load import (
    RankRead,
    as_of_now,
    build_session,
    load_session,
    progress_bar,
    read_ranks,
    source_bytes,
)
from logkit.ingest.load import load_sessions as ingest_sessions
from logkit.ingest.meta import records_meta
from logkit.ingest.session import Session

ENV_SCHEDULER = "LOGKIT_DASK_SCHEDULER"
POOL_MIN_BYTES = 256 << 20


@dataclass
class RankPartial:
    """What the map gives for one rank: its ``RankRead`` without comm tables, and their ``CommPart``."""

    read: RankRead
    comm: CommPart | None


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
    say). ``cache``: through the cache of partial results (``rank_cache``) of the machine it runs on.
    ``chunk_bytes``: how much of the stream is parsed at a time (``jsonl_arrow.CHUNK_BYTES``)."""
    return rank_partials([(path, rank)], world_size, cache, chunk_bytes)[0]


def rank_partials(streams: list[tuple[str, int]], world_size: float | None = None, cache: bool = False,
                  chunk_bytes: int | None = None) -> list[RankPartial]:
    """``rank_partial`` of each (path, rank), the streams not in the cache read as one flow (``read_ranks``:
    the next stream parsed while the one before is mapped): the map of a session's ranks in this process."""
    parts: dict[int, RankPartial] = {}
    if cache:
        from logkit.analysis import rank_cache

        for i, (path, rank) in enumerate(streams):
            hit = rank_cache.load(path, rank, world_size)
            if hit is not None:
                parts[i] = RankPartial(*hit)
    todo = [i for i in range(len(streams)) if i not in parts]
    reads = read_ranks([streams[i] for i in todo], [_Reducing(streams[i][1]) for i in todo], chunk_bytes)
    for i, reducing in zip(todo, reads, strict=True):  # each reduced as soon as it is read
        parts[i] = _partial(reducing, world_size)
        if cache:
            rank_cache.store(*streams[i], world_size, parts[i])
    return [parts[i] for i in range(len(streams))]


def _partial(reducing: _Reducing, world_size: float | None) -> RankPartial:
    read = RankRead(reducing.rank, reducing.tables, reducing.stream)
    steps = frame_of("steps", [t for name, t in read.tables if name == "steps"], extra_columns=True)
    assumed = records_meta({read.rank: read.stream}).get("world_size") if world_size is None else world_size
    return RankPartial(read, reducing.comm.result(Session(steps=steps), assumed))


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


def merge(source: SessionSource, parts: list[RankPartial], remap=None) -> Session:
    """The session of ``source`` from its ranks' partial results (in rank order). ``remap(path, rank,
    world_size)``: the map again for a rank whose comm records needed the session's world size and
    assumed another (a world size from summary.json, say): its ``RankPartial``."""
    comm = [p.comm for p in parts]
    session = build_session(source, ranks=[p.read for p in parts])
    ws = _usable(session.meta.get("world_size"))
    for i, (rank, path) in enumerate(sorted(source.rank_files.items())):
        c = comm[i]
        if c is not None and c.needs_world_size and c.world_size != ws and remap is not None:
            comm[i] = remap(str(Path(path).resolve()), rank, ws).comm
    session.comm_partial = comm
    return session


def _cached(source: SessionSource, cache: bool) -> Session | None:
    if not cache:
        return None
    from logkit.ingest.cache import load_cached

    return load_cached(source)


def _central(source: SessionSource, cache: bool) -> Session:
    """A session without rank streams (text logs, other formats): read here, through the cache."""
    session = _cached(source, cache)
    if session is None:
        session = build_session(source)
        if cache:
            from logkit.ingest.cache import store

            store(source, session)
    return session


def build_sessions(sources: list[SessionSource], *, cache: bool = False, progress: bool | None = None,
                   scheduler: str | None = None, runner=None) -> list[Session]:
    """The sessions of ``sources`` through the engine, sorted by start time. ``cache``: a session whose
    whole frames the session cache holds is taken from it, else each rank's partial result from the
    cache of partial results (``rank_cache``, written where the map ran); ``runner``: an
    ``executor()`` to use (not closed here)."""
    jobs = []
    for src in sources:
        whole = _cached(src, cache) if src.rank_files else None
        jobs.append((src, whole))
    mapped = [src for src, whole in jobs if whole is None and src.rank_files]
    total = sum(source_bytes(src) for src in mapped)
    own = runner is None
    runner = runner or executor(scheduler, total, sum(len(s.rank_files) for s in mapped))
    try:
        # every rank submitted first (the workers run ahead), then merged session by session
        futures = {id(src): runner.map_ranks([(str(Path(p).resolve()), r) for r, p in sorted(src.rank_files.items())],
                                             cache) for src in mapped}
        bar = progress_bar(sources, progress)
        sessions = []
        for src, whole in jobs:
            if whole is not None:
                session = whole
            elif src.rank_files:
                parts = futures.pop(id(src)).result()
                session = merge(src, parts, remap=lambda p, r, ws: runner.submit(rank_partial, p, r, ws, cache).result())
            else:
                session = _central(src, cache)
            sessions.append(as_of_now(session, src))
            if bar is not None:
                bar.update(source_bytes(src))
        if bar is not None:
            bar.close()
    finally:
        if own:
            runner.close()
    return sorted(sessions, key=Session.start_key)


def load_sessions(root: str | Path, *, cache: bool = False, progress: bool | None = None,
                  scheduler: str | None = None, comm_records: bool = False) -> list[Session]:
    """Every session under ``root`` (recursively), sorted by start time, ties by session id: the public
    ``logkit.load_sessions``, through the engine (see module doc), as ``analyze_logs`` reads them.

    Each rank's communication records are reduced where they are read: ``session.comm`` holds no
    rows of rank streams and ``session.comm_partial`` their per-rank reductions, from which
    ``analyze`` gives the same figures (memory: ranks x steps). ``comm_records=True`` keeps every
    record in ``session.comm`` instead (memory grows with the records; read in this process, so not
    with ``scheduler``). ``cache``: reuse parsed sessions, and per-rank partial results, while their
    files are unchanged (``~/.cache/logkit``). ``progress``: a progress bar on stderr (None: on a
    terminal, for ingests over 64 MB). ``scheduler``: a Dask scheduler's address (default:
    ``$LOGKIT_DASK_SCHEDULER``, else this machine). A single file gives its whole session, every
    record kept. Raises ``FileNotFoundError`` only when ``root`` does not exist (``PermissionError``
    when a file given cannot be read); a folder without sessions gives an empty list."""
    root = Path(root)
    if comm_records:
        if scheduler:
            raise ValueError("comm_records=True reads every record in this process: give no scheduler")
        return ingest_sessions(root, cache=cache, progress=progress)
    if not root.exists():
        raise FileNotFoundError(f"no such file or folder: {root}")
    if root.is_file():
        return [load_session(root)]
    return build_sessions(discover(root), cache=cache, progress=progress, scheduler=scheduler)
