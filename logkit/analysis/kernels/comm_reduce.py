"""One rank's comm records reduced as they are read, a chunk at a time (``CommReducer``): what the
engine's map keeps of them instead of their frame, and the ``CommPart`` it makes of that at the end.

Per chunk of the stream (a comm table of ``mapping``), each record leaves four float64 values and a
byte of flags under its (rank, op): size, duration, algbw and busbw (derived where missing, as
``communication._records`` does; busbw waits for the world size where the record names no group
size), 33 bytes a record instead of a frame row and the stream's text; per (rank, op, step) the
summed durations (bounded by the steps); per (rank, op) the largest group size, the first and last
file:line. At the end (``result``), those are the columns ``communication._aggregate`` groups, in
the records' order, so that every figure (medians, 95th percentiles, sums) is the one the whole frame
gives, bit for bit, whatever the chunks: ``tests/unit/analysis/test_comm_chunks.py`` checks it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from logkit.analysis.kernels.communication import (
    CommPart,
    _aggregate,
    _factor_array,
    _labelled,
    _per_key_step,
    _records,
    _step_times,
    _sync_share,
    _timing_sources,
    _usable_world_size,
    file_line,
    source_span,
)
from logkit.analysis.kernels.curves import bandwidth_points
from logkit.ingest.assemble import frame_of

BUS_LOGGED, ALG_LOGGED, NO_GROUP, BUS_DERIVED = 1, 2, 4, 8
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


@dataclass
class _Chunk:
    labels: dict = field(default_factory=dict)  # (rank or -1, op or None) -> _Label
    steps: list = field(default_factory=list)  # (label, step array, summed duration array)
    timing_sources: set = field(default_factory=set)
    no_group: bool = False


def _sources(comm: pd.DataFrame, rows: np.ndarray) -> tuple:
    """(first, last, first known, last known) file:line of the records ``rows`` (in file order)."""
    ends = file_line(comm.iloc[[rows[0], rows[-1]]]).to_numpy(dtype=object)
    first, last = (v if isinstance(v, str) else None for v in ends)
    if first is not None and last is not None:
        return first, last, first, last
    known = file_line(comm.iloc[rows]).dropna()
    return first, last, (known.iloc[0] if len(known) else None), (known.iloc[-1] if len(known) else None)


def _chunk(comm: pd.DataFrame) -> _Chunk:
    """One comm frame's records reduced (see module doc)."""
    frame, op_names = _records(comm, None)
    width = len(op_names) + 1
    has_nan_op = bool(comm["op"].isna().any())
    key = frame["key"].to_numpy()
    no_group = comm["group_size"].isna().to_numpy()
    flags = (frame["bus_logged"].to_numpy().astype(np.uint8) * BUS_LOGGED
             | (~np.isnan(comm["algbw_mb_s"].to_numpy(dtype="float64"))).astype(np.uint8) * ALG_LOGGED
             | no_group.astype(np.uint8) * NO_GROUP
             | frame["bus_derived"].to_numpy().astype(np.uint8) * BUS_DERIVED)
    group = frame["group"].to_numpy()
    out = _Chunk(timing_sources=_timing_sources(comm), no_group=bool(no_group.any()))
    order = np.argsort(key, kind="stable")
    keys, starts = np.unique(key[order], return_index=True)
    names = {}
    for k, rows in zip(keys.tolist(), np.split(order, starts[1:]), strict=True):
        code = k % width
        op = None if has_nan_op and code == len(op_names) - 1 else str(op_names[code])
        label = names[k] = (k // width - 1, op)
        g = group[rows]
        g = g[~np.isnan(g)]
        out.labels[label] = _Label({name: frame[name].to_numpy()[rows] for name in _VALUES}, flags[rows],
                                   float(g.max()) if len(g) else np.nan, *_sources(comm, rows))
    per = _per_key_step(frame)
    if per is not None:
        u_key, u_step, _, dsum = per
        for k in np.unique(u_key).tolist():
            sel = u_key == k
            out.steps.append((names[k], u_step[sel], dsum[sel]))
    return out


class CommReducer:
    """A rank's comm tables, reduced as they come (``add``), taken back to a ``mark`` when a reader
    gives up part way; ``result`` makes the rank's ``CommPart``."""

    def __init__(self) -> None:
        self.chunks: list[_Chunk] = []

    def add(self, table) -> None:
        if table.num_rows:
            self.chunks.append(_chunk(frame_of("comm", [table], extra_columns=True)))

    def mark(self) -> int:
        return len(self.chunks)

    def truncate(self, mark: int) -> None:
        del self.chunks[mark:]

    def result(self, steps_session, world_size) -> CommPart | None:
        """The ``CommPart`` of the records added (once: the records are let go as they are used, the
        reducer is empty after); ``steps_session``: a session holding the rank's steps; ``world_size``: the n of records
        without a group size."""
        if not self.chunks:
            return None
        ws = float(world_size) if _usable_world_size(world_size) else None
        labels = list(dict.fromkeys(label for c in self.chunks for label in c.labels))
        ops = sorted({op for _, op in labels if op is not None})
        op_names = np.asarray(ops + (["unknown"] if any(op is None for _, op in labels) else []), dtype=object)
        width = len(op_names) + 1
        keys = {label: (label[0] + 1) * width + (ops.index(label[1]) if label[1] is not None else len(ops))
                for label in labels}
        labels.sort(key=keys.get)
        stats, bw, sources = [], {}, {}
        for label in labels:  # one (rank, op) at a time in memory as columns, its chunks let go
            sources[keys[label]] = self._source(label)
            columns, raw = self._label(label, keys[label], op_names[keys[label] % width], ws)
            stats.append(_aggregate(pd.DataFrame(columns, copy=False)))
            bw.setdefault(label[1], []).append(raw)
            del columns, raw
        st = _step_times(steps_session)
        sums = self._step_sums(keys, width)
        share, matched = (_sync_share(sums, st) if sums is not None else
                          (pd.Series(dtype="float64"), pd.Series(dtype="int64")))
        stats = _labelled(pd.concat(stats), op_names, share, matched, sources)
        chunks, self.chunks = self.chunks, []  # the rest of the chunks let go with them
        return CommPart(stats, sums if st.empty else None, set().union(*(c.timing_sources for c in chunks)),
                        _bandwidth(bw), ws, any(c.no_group for c in chunks))

    def _label(self, label, key: int, op_name: str, ws: float | None) -> tuple[dict, tuple]:
        """One (rank, op)'s records over the chunks, which let go of them: the columns ``_aggregate``
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
            factor = _factor_array(op_name, np.full(len(waiting), ws))
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


def _bandwidth(by_op: dict) -> pd.DataFrame:
    """``bandwidth_points`` of the records, an op at a time (ops in order, a missing op last, as the
    whole frame's groupby orders them); ``by_op``: op -> [(op, sizes, bandwidths as logged)]."""
    points = []
    for op in sorted(by_op, key=lambda op: (op is None, op or "")):
        size = np.concatenate([s for _, s, _ in by_op[op]])
        bw = np.concatenate([b for _, _, b in by_op[op]])
        p = bandwidth_points(pd.DataFrame({"op": np.full(len(size), op, dtype=object), "size_bytes": size,
                                           "busbw_mb_s": bw, "algbw_mb_s": bw}, copy=False))
        if len(p):
            points.append(p)
    return pd.concat(points, ignore_index=True) if points else bandwidth_points(pd.DataFrame(
        {"op": [], "size_bytes": [], "busbw_mb_s": [], "algbw_mb_s": []}))
