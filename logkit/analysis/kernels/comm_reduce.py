"""Communication records reduced, a rank at a time and a chunk at a time (``CommReducer``: ``add`` a comm
table or frame, ``merge`` another reducer of the same rank, ``result``): the one route every way of
running the analysis takes to the communication figures. The batch analysis reduces each rank's
records of a session read whole (``reduce_session``); the engine's map reduces each rank's stream as
its reader hands over the chunks, where the files are; both give ``CommPart``s, from which
``communication.communication_table`` and the bandwidth curve (``merged_points``) are made.

Per chunk, each record leaves four float64 values and a byte of flags under its (rank, op): size,
duration, algbw and busbw (derived where missing, ``comm_records.records``; busbw waits for the world
size where the record names no group size), 33 bytes a record instead of a frame row and the stream's
text; per (rank, op, step) the summed durations (bounded by the steps); per (rank, op) the largest group
size, the first and last file:line. At the end (``result``), those are the columns
``comm_records.aggregate`` groups, in the records' order, so that every figure (medians, 95th
percentiles, sums) is the same whatever the chunks (``tests/unit/analysis/test_comm_chunks.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from logkit.analysis.kernels.comm_records import (
    aggregate,
    factor_array,
    file_line,
    labelled,
    per_key_step,
    records,
    source_span,
    step_times,
    sync_share,
    timing_sources,
    usable_world_size,
)
from logkit.ingest.assemble import frame_of

BUS_LOGGED, ALG_LOGGED, NO_GROUP, BUS_DERIVED = 1, 2, 4, 8
BATCH_RECORDS = 1 << 20  # records of several (rank, op)s aggregated in one groupby (bounds the columns in memory)


@dataclass
class CommPart:
    """One rank's comm records reduced (``CommReducer.result``): the per-(rank, op) figures, exact; per
    (op, step) the summed durations where the rank has no step times of its own (its sync share needs
    the lowest rank's, merged with the session); the timing sources; the bandwidth curve's (op, size)
    medians; the world size assumed for records without a group size and whether any had none."""

    stats: pd.DataFrame
    leftover: pd.DataFrame | None
    timing_sources: set
    bandwidth: pd.DataFrame
    world_size: float | None
    needs_world_size: bool
_VALUES = ("size", "dur", "alg", "bus")


@dataclass
class _Label:
    """One (rank, op)'s records of one chunk."""

    values: dict  # name in _VALUES -> float64 array, in file order
    flags: np.ndarray  # uint8, the bits above
    group_max: float  # the largest group size a record names (NaN: none)
    first: str | None  # file:line of the first record, of the last, of the first and last that have one
    last: str | None
    first_known: str | None
    last_known: str | None
    phases: tuple = ()  # the phases its records name (FSDP collectives: forward, backward), in file order
    timed_by: tuple = ()  # the timing sources its records name (wall, cuda_event, nccl_inspector)


@dataclass
class _Chunk:
    labels: dict = field(default_factory=dict)  # (rank or -1, op or None) -> _Label
    steps: list = field(default_factory=list)  # (label, step array, summed duration array)
    timing_sources: set = field(default_factory=set)
    no_group: bool = False


def _candidates(comm: pd.DataFrame) -> list[np.ndarray]:
    """Each column ``file_line`` may read (``source``, then ``origin``), as its file:line values (None
    where a value is none): read once per chunk, then taken at each key's rows."""
    return [file_line(comm[[col]]).to_numpy(dtype=object) for col in ("source", "origin") if col in comm.columns]


def _file_lines(candidates: list[np.ndarray], rows) -> np.ndarray:
    """``file_line`` of the records ``rows``: the first column with a file:line among them."""
    for values in candidates:
        picked = values[rows]
        if pd.notna(picked).any():
            return picked
    return np.full(len(rows), None, dtype=object)


def _sources(candidates: list[np.ndarray], rows: np.ndarray) -> tuple:
    """(first, last, first known, last known) file:line of the records ``rows`` (in file order)."""
    ends = _file_lines(candidates, [rows[0], rows[-1]])
    first, last = (v if isinstance(v, str) else None for v in ends)
    if first is not None and last is not None:
        return first, last, first, last
    known = [v for v in _file_lines(candidates, rows) if isinstance(v, str)]
    return first, last, (known[0] if known else None), (known[-1] if known else None)


def _chunk(comm: pd.DataFrame) -> _Chunk:
    """One comm frame's records reduced (see module doc)."""
    frame, op_names = records(comm, None)
    width = len(op_names) + 1
    has_nan_op = bool(comm["op"].isna().any())
    key = frame["key"].to_numpy()
    no_group = comm["group_size"].isna().to_numpy()
    flags = (frame["bus_logged"].to_numpy().astype(np.uint8) * BUS_LOGGED
             | (~np.isnan(comm["algbw_mb_s"].to_numpy(dtype="float64"))).astype(np.uint8) * ALG_LOGGED
             | no_group.astype(np.uint8) * NO_GROUP
             | frame["bus_derived"].to_numpy().astype(np.uint8) * BUS_DERIVED)
    group = frame["group"].to_numpy()
    out = _Chunk(timing_sources=timing_sources(comm), no_group=bool(no_group.any()))
    order = np.argsort(key, kind="stable")
    keys, starts = np.unique(key[order], return_index=True)
    names = {}
    values, candidates = {name: frame[name].to_numpy() for name in _VALUES}, _candidates(comm)
    phase = comm["phase"].to_numpy(dtype=object) if "phase" in comm.columns and comm["phase"].notna().any() else None
    timed = comm["timing_source"].to_numpy(dtype=object) if comm["timing_source"].notna().any() else None
    for k, rows in zip(keys.tolist(), np.split(order, starts[1:]), strict=True):
        code = k % width
        op = None if has_nan_op and code == len(op_names) - 1 else str(op_names[code])
        label = names[k] = (k // width - 1, op)
        g = group[rows]
        g = g[~np.isnan(g)]
        out.labels[label] = _Label({name: values[name][rows] for name in _VALUES}, flags[rows],
                                   float(g.max()) if len(g) else np.nan, *_sources(candidates, rows),
                                   _phases(phase, rows), _phases(timed, rows))
    per = per_key_step(frame)
    if per is not None:
        u_key, u_step, _, dsum = per
        for k in np.unique(u_key).tolist():
            sel = u_key == k
            out.steps.append((names[k], u_step[sel], dsum[sel]))
    return out


def _phases(phase: np.ndarray | None, rows: np.ndarray) -> tuple:
    """The distinct phases of the records ``rows`` (in their order of first appearance), () without any."""
    if phase is None:
        return ()
    return tuple(dict.fromkeys(str(v) for v in phase[np.sort(rows)] if isinstance(v, str) and v))


class CommReducer:
    """A rank's comm tables, reduced as they come (``add``), taken back to a ``mark`` when a reader
    gives up part way; ``result`` makes the rank's ``CommPart``."""

    def __init__(self) -> None:
        self.chunks: list[_Chunk] = []

    def add(self, table) -> None:
        """A comm table (an Arrow table of the ``comm`` frame's columns, as the readers make them)."""
        if table.num_rows:
            self.chunks.append(_chunk(frame_of("comm", [table], extra_columns=True)))

    def add_frame(self, comm: pd.DataFrame) -> None:
        """A comm frame (a session's ``comm`` rows)."""
        if len(comm):
            self.chunks.append(_chunk(comm.reset_index(drop=True)))

    def merge(self, other: CommReducer) -> None:
        """The chunks of ``other`` (the same rank's records that came after these), which is left empty."""
        self.chunks += other.chunks
        other.chunks = []

    def mark(self) -> int:
        return len(self.chunks)

    def truncate(self, mark: int) -> None:
        del self.chunks[mark:]

    def result(self, steps: pd.DataFrame, world_size) -> CommPart | None:
        """The ``CommPart`` of the records added (once: the records are let go as they are used, the
        reducer is empty after); ``steps``: the rank's step rows; ``world_size``: the n of records
        without a group size."""
        if not self.chunks:
            return None
        ws = float(world_size) if usable_world_size(world_size) else None
        labels = list(dict.fromkeys(label for c in self.chunks for label in c.labels))
        ops = sorted({op for _, op in labels if op is not None})
        op_names = np.asarray(ops + (["unknown"] if any(op is None for _, op in labels) else []), dtype=object)
        width = len(op_names) + 1
        keys = {label: (label[0] + 1) * width + (ops.index(label[1]) if label[1] is not None else len(ops))
                for label in labels}
        labels.sort(key=keys.get)
        stats, batch, bw, sources, phases, timed_by = [], [], [], {}, {}, {}
        for label in labels:  # one (rank, op) at a time as columns, its chunks let go; aggregated in batches
            sources[keys[label]] = self._source(label)
            seen = dict.fromkeys(ph for c in self.chunks if label in c.labels for ph in c.labels[label].phases)
            phases[keys[label]] = ", ".join(seen) or None
            timed = dict.fromkeys(t for c in self.chunks if label in c.labels for t in c.labels[label].timed_by)
            timed_by[keys[label]] = ",".join(sorted(timed)) or None
            columns, raw = self._label(label, keys[label], op_names[keys[label] % width], ws)
            batch.append(columns)
            bw.append(raw)
            if sum(len(c["key"]) for c in batch) >= BATCH_RECORDS:
                stats.append(_aggregate(batch))
                batch = []
        if batch:
            stats.append(_aggregate(batch))
        st = step_times(steps)
        sums = self._step_sums(keys, width)
        share, matched = (sync_share(sums, st) if sums is not None else
                          (pd.Series(dtype="float64"), pd.Series(dtype="int64")))
        stats = labelled(pd.concat(stats), op_names, share, matched, sources)
        stats["phase"] = [phases.get(k) for k in stats["key"].tolist()]
        stats["timing_source"] = [timed_by.get(k) for k in stats["key"].tolist()]
        chunks, self.chunks = self.chunks, []  # the rest of the chunks let go with them
        return CommPart(stats, sums if st.empty else None, set().union(*(c.timing_sources for c in chunks)),
                        _bandwidth(bw), ws, any(c.no_group for c in chunks))

    def _label(self, label, key: int, op_name: str, ws: float | None) -> tuple[dict, tuple]:
        """One (rank, op)'s records over the chunks, which let go of them: the columns ``aggregate``
        groups, and (op as logged, size, bandwidth as logged) for ``bandwidth_points``."""
        parts = [c.labels[label] for c in self.chunks if label in c.labels]
        v = {}
        for name in _VALUES:  # one value at a time in two copies, at most
            v[name] = np.concatenate([p.values.pop(name) for p in parts])
        flags = np.concatenate([p.flags for p in parts])
        for p in parts:
            p.flags = None
        group = np.fmax.reduce([p.group_max for p in parts])
        bus, alg, n = v["bus"], v["alg"], len(flags)
        derived = (flags & BUS_DERIVED).astype(bool)
        waiting = np.flatnonzero(flags & NO_GROUP)
        if ws is not None and len(waiting):  # busbw from algbw x the bus factor with the world size
            group = np.fmax(group, ws)
            factor = factor_array(op_name, np.full(len(waiting), ws))
            late = np.isnan(bus[waiting]) & ~np.isnan(alg[waiting]) & ~np.isnan(factor)
            idx = waiting[late]
            bus[idx] = alg[idx] * factor[late]
            derived[idx] = True
        bus_logged = (flags & BUS_LOGGED).astype(bool)
        bw = np.where(bus_logged, bus, np.where((flags & ALG_LOGGED).astype(bool), alg, np.nan))
        columns = {"key": np.full(n, key, dtype=np.int64), **v, "group": np.full(n, group),
                   "bus_derived": derived, "bus_logged": bus_logged}
        return columns, (label[1], v["size"], bw)

    def _source(self, label) -> str | None:
        """``sources`` as ``communication._first_last`` gives it: the first record's file:line and the
        last's (the first's where the last has none); the first and last known where the first has none."""
        parts = [c.labels[label] for c in self.chunks if label in c.labels]
        first, last = parts[0].first, parts[-1].last
        if first is not None:
            return source_span(first, last)
        known = [p.first_known for p in parts if p.first_known is not None]
        return source_span(known[0], [p.last_known for p in parts if p.last_known is not None][-1]) if known else None

    def _step_sums(self, keys: dict, width: int) -> pd.DataFrame | None:
        """Per (key, step): the summed durations, added chunk after chunk in file order (the sums of
        the whole frame, bit for bit), ordered by key then step; None without any."""
        rows = [(keys[label], step, dsum) for c in self.chunks for label, step, dsum in c.steps]
        if not rows:
            return None
        key = np.concatenate([np.full(len(s), k, dtype=np.int64) for k, s, _ in rows])
        step = np.concatenate([s for _, s, _ in rows])
        dur = np.concatenate([d for _, _, d in rows])
        span = int(step.max()) + 1
        _, first, inverse = np.unique(key * span + step, return_index=True, return_inverse=True)
        return pd.DataFrame({"key": key[first], "step": step[first].astype("float64"),
                             "rank_f": np.maximum(key[first] // width - 1, 0).astype("float64"),
                             "dur": np.bincount(inverse, weights=dur)})


def _aggregate(batch: list[dict]) -> pd.DataFrame:
    """``aggregate`` of several (rank, op)s' columns at once (one groupby: the same figures per key)."""
    return aggregate(pd.DataFrame({name: np.concatenate([c[name] for c in batch]) for name in batch[0]}, copy=False))


def _bandwidth(rows: list[tuple]) -> pd.DataFrame:
    """``bandwidth_points`` of each (rank, op)'s records, in the labels' order; ``rows``: per label (op as
    logged, sizes, bandwidths as logged)."""
    empty = pd.DataFrame(columns=["op", "size_mb", "median", "size"])
    if not rows:
        return empty
    part = np.concatenate([np.full(len(size), i) for i, (_, size, _) in enumerate(rows)])
    ops = np.concatenate([np.full(len(size), op, dtype=object) for op, size, _ in rows])
    size = np.concatenate([s for _, s, _ in rows])
    bw = np.concatenate([b for _, _, b in rows])
    frame = pd.DataFrame({"part": part, "op": ops, "size_bytes": size, "busbw_mb_s": bw, "algbw_mb_s": bw},
                         copy=False)
    points = bandwidth_points(frame, by=("part",))
    return points.drop(columns="part") if len(points) else empty


def bandwidth_points(c: pd.DataFrame, by: tuple = ()) -> pd.DataFrame:
    """Per (op, size_mb) of a comm frame: the median bandwidth (busbw, else algbw) and the records
    (per ``by`` columns of the frame first, where given)."""
    bw = c["busbw_mb_s"].astype("float64").fillna(c["algbw_mb_s"].astype("float64"))
    part = pd.DataFrame({**{k: c[k] for k in by}, "op": c["op"], "size_mb": c["size_bytes"].astype("float64") / 1e6,
                         "bw": bw})
    part = part[(part["size_mb"] > 0) & (part["bw"] > 0)]  # also drops NaN sizes and bandwidths
    if part.empty:
        return pd.DataFrame(columns=[*by, "op", "size_mb", "median", "size"])
    # grouped on the op column as it is (arrow strings: no per-row conversion of millions of records)
    agg = part.groupby([*by, "op", "size_mb"], sort=True, dropna=False)["bw"].agg(["median", "size"]).reset_index()
    op = agg["op"].astype("object")
    return agg.assign(op=op.where(op.notna(), "?").astype(str))


def merged_points(parts: list) -> pd.DataFrame:
    """The ranks' ``bandwidth_points`` as one: per (op, size_mb), the record-weighted median of the
    ranks' medians (the plot's approximation of the median over all records: exact with one rank)."""
    frames = [p.bandwidth for p in parts if p is not None and len(p.bandwidth)]
    if not frames:
        return pd.DataFrame(columns=["op", "size_mb", "median", "size"])
    rows = []
    for (op, size), g in pd.concat(frames, ignore_index=True).groupby(["op", "size_mb"], sort=True):
        g = g.sort_values("median", kind="stable")
        w = g["size"].to_numpy(dtype="float64")
        i = int(np.searchsorted(np.cumsum(w), w.sum() / 2.0))
        rows.append({"op": op, "size_mb": size, "median": float(g["median"].iloc[min(i, len(g) - 1)]),
                     "size": int(w.sum())})
    return pd.DataFrame(rows)


def reduce_session(session) -> tuple[CommPart, ...]:
    """The comm records of a session read whole, reduced as the engine reduces each rank's where they
    lie: one ``CommPart`` holding every rank (the same rows per (rank, op) as a part per rank, the
    bandwidth medians per rank as well); ``()`` without records."""
    if session.comm.empty:
        return ()
    reducer = CommReducer()
    reducer.add_frame(session.comm)
    part = reducer.result(session.steps, session.meta.world_size)
    return (part,) if part is not None else ()
