"""Communication records as the figures read them, and the figures of a set of records: the kernels
``comm_reduce`` (a rank's records, chunk by chunk) and ``communication`` (the table) are made of.

- ``records``: per record an integer key per (rank, op), its size, duration, algbw and busbw (algbw
  derived from size / duration where missing, ``collectives.algbw_mb_s``; busbw from algbw x the op's
  bus factor at n ranks where missing, ``derive_busbw``), group size;
- ``aggregate``: per key the figures of its records alone (count, bytes, p50/p95, bandwidth medians,
  total ms, group size); ``labelled`` adds the sync share, rank, op, busbw_from and sources;
- ``sync_share``: per key, the op's summed durations over the steps that logged both it and a step
  time / the sum of those step times (``communication``'s module doc defines it).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from logkit.schema.collectives import algbw_mb_s, bus_factor_rule, bus_factor_text


def derive_busbw(bus: np.ndarray, alg: np.ndarray, factor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """busbw where it is missing: algbw x the bus factor; (busbw, which records were derived)."""
    derived = np.isnan(bus) & ~np.isnan(alg) & ~np.isnan(factor)
    return np.where(derived, alg * factor, bus), derived


def factor_array(op: str, n: np.ndarray) -> np.ndarray:
    """The bus factor of ``op`` over an array of rank counts (NaN where n is unknown or the op has none)."""
    n = np.where(n > 0, n, np.nan)
    rule = bus_factor_rule(op)
    return rule(n) if rule is not None else np.full(len(n), np.nan)


def group_n(comm: pd.DataFrame, world_size) -> np.ndarray:
    n = comm["group_size"].astype("float64").to_numpy()
    if usable_world_size(world_size):
        n = np.where(np.isnan(n), float(world_size), n)
    return n


def usable_world_size(ws) -> bool:
    return isinstance(ws, (int, float)) and not isinstance(ws, bool) and ws > 0


def step_times(steps: pd.DataFrame) -> pd.DataFrame:
    """(rank, step, t) of the timed steps (a positive step_time_s) of a ``steps`` frame, one row per rank
    and step."""
    rows = steps[steps["step_time_s"].notna() & (steps["step_time_s"] > 0) & steps["step"].notna()]
    if rows.empty:
        return pd.DataFrame(columns=["rank", "step", "t"])
    out = pd.DataFrame({"rank": rows["rank"].astype("float64").fillna(0).to_numpy(),
                        "step": rows["step"].astype("float64").to_numpy(),
                        "t": rows["step_time_s"].to_numpy(dtype="float64")})
    return out.drop_duplicates(["rank", "step"], keep="last")


def per_key_step(frame: pd.DataFrame, span: int | None = None) -> tuple:
    """(key, step, rank, summed duration) per (key, step) of the records with a step and a duration,
    ordered by key then step; None when there are none."""
    has = (frame["step"].notna() & frame["dur"].notna()).to_numpy()
    if not has.any():
        return None
    key = frame["key"].to_numpy()[has].astype("int64")
    step = frame["step"].to_numpy()[has].astype("int64")
    rank = frame["rank_f"].to_numpy()[has].astype("int64")
    dur = frame["dur"].to_numpy()[has]
    span = int(step.max()) + 1 if span is None else span
    # one row per (key, step): the op's summed duration at that step on that rank
    _, first, inverse = np.unique(key * span + step, return_index=True, return_inverse=True)
    return key[first], step[first], rank[first], np.bincount(inverse, weights=dur)


def sync_share(frame: pd.DataFrame, st: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per key (rank, op): (share of step time over matched steps, number of matched steps), from the
    records (``frame``: key, rank_f, step, dur) and the step times ``st`` (``step_times``).
    Integer keys throughout: (rank, op, step) and (rank, step) packed into one int64 each."""
    has = (frame["step"].notna() & frame["dur"].notna()).to_numpy()
    if st.empty or not has.any():
        return pd.Series(dtype="float64"), pd.Series(dtype="int64")
    span = int(max(frame["step"].to_numpy()[has].max(), st["step"].max())) + 1
    u_key, u_step, u_rank, dsum = per_key_step(frame, span)
    # the step time of that rank and step; the lowest rank's where the rank logged no steps
    st_rank = st["rank"].to_numpy().astype("int64")
    st_step = st["step"].to_numpy().astype("int64")
    own = pd.Series(st["t"].to_numpy(), index=st_rank * span + st_step)
    t = own.reindex(u_rank * span + u_step).to_numpy().copy()
    lowest = int(st_rank.min())
    no_own = ~np.isin(u_rank, np.unique(st_rank))
    if no_own.any():
        base = own.reindex(lowest * span + u_step[no_own]).to_numpy()
        t[no_own] = base
    ok = ~np.isnan(t)
    if not ok.any():
        return pd.Series(dtype="float64"), pd.Series(dtype="int64")
    # a step's summed durations count at most the step's own time (buckets in flight together overlap)
    d = np.minimum(dsum[ok] / 1000.0, t[ok])
    g = pd.DataFrame({"key": u_key[ok], "d": d, "t": t[ok]}).groupby("key", sort=True)
    return g["d"].sum() / g["t"].sum(), g.size()


def records(comm: pd.DataFrame, world_size) -> tuple[pd.DataFrame, np.ndarray]:
    """The records as the figures read them (key per (rank, op), bandwidths derived where missing), and
    the op names of the keys."""
    rank = comm["rank"].astype("float64").fillna(-1).to_numpy().astype("int64")  # -1: no rank
    codes, ops = pd.factorize(comm["op"], sort=True)  # arrow strings factorize without a copy to objects
    ops = [str(o) for o in ops]
    if (codes < 0).any():
        ops.append("unknown")
        codes = np.where(codes < 0, len(ops) - 1, codes)
    key = (rank + 1) * (len(ops) + 1) + codes  # one integer key per (rank, op): fast groupby
    size = comm["size_bytes"].astype("float64").to_numpy()
    dur = comm["duration_ms"].to_numpy(dtype="float64")
    alg = comm["algbw_mb_s"].to_numpy(dtype="float64")
    alg_derived = np.isnan(alg) & ~np.isnan(size) & (dur > 0)
    with np.errstate(divide="ignore", invalid="ignore"):  # the zero durations are left out by alg_derived
        alg = np.where(alg_derived, algbw_mb_s(size, dur / 1000.0), alg)
    bus = comm["busbw_mb_s"].to_numpy(dtype="float64")
    n = group_n(comm, world_size)
    op_names = np.asarray(ops, dtype=object)
    factor = np.full(len(comm), np.nan)
    for i, name in enumerate(op_names):
        sel = codes == i
        if sel.any():
            factor[sel] = factor_array(name, n[sel])
    bus, bus_derived = derive_busbw(bus, alg, factor)
    frame = pd.DataFrame({"key": key, "rank_f": np.where(rank < 0, 0, rank).astype("float64"),
                          "step": comm["step"].astype("float64").to_numpy(), "size": size, "dur": dur, "alg": alg,
                          "bus": bus, "bus_derived": bus_derived, "bus_logged": ~np.isnan(
                              comm["busbw_mb_s"].to_numpy(dtype="float64")), "group": n,
                          })
    return frame, op_names


def aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """Per key of ``records``' frame, in key order (the index): the figures that are the records' alone
    (count, bytes, p50/p95, bandwidth medians, total ms, group size) and the busbw counts."""
    g = frame.groupby("key", sort=True)
    return pd.DataFrame({
        "count": g.size(), "total_bytes": g["size"].sum(min_count=1), "mean_bytes": g["size"].mean(),
        "p50_ms": g["dur"].median(), "p95_ms": g["dur"].quantile(0.95),
        "algbw_mb_s": g["alg"].median(), "busbw_mb_s": g["bus"].median(), "total_ms": g["dur"].sum(min_count=1),
        "group_size": g["group"].max(), "n_derived": g["bus_derived"].sum(), "n_logged": g["bus_logged"].sum(),
    })


def labelled(out: pd.DataFrame, op_names: np.ndarray, share: pd.Series, matched: pd.Series,
              sources: dict) -> pd.DataFrame:
    """``aggregate``'s figures with the sync share, the key's rank and op, busbw_from and sources
    ({key: "file:line .. file:line"})."""
    keys = out.index.to_numpy()
    out["sync_share_of_step_time"] = share.reindex(out.index).to_numpy()
    out["matched_steps"] = matched.reindex(out.index).fillna(0).astype("int64").to_numpy()
    out = out.reset_index(drop=True)
    width = len(op_names) + 1
    out.insert(0, "op", op_names[keys % width])
    r = (keys // width - 1).astype("float64")
    out.insert(0, "rank", np.where(r < 0, np.nan, r))
    out.insert(0, "key", keys)
    out["busbw_from"] = [busbw_from(op, nd, nl, gs) for op, nd, nl, gs in
                         zip(out["op"], out["n_derived"], out["n_logged"], out["group_size"], strict=True)]
    out["sources"] = [sources.get(k) for k in keys.tolist()]
    return out.drop(columns=["n_derived", "n_logged"])


def source_span(first: str | None, last: str | None) -> str | None:
    """The ``sources`` of a key from its first and last file:line."""
    if first is None:
        return None
    return first if first == last or last is None else f"{first} .. {last}"


def timing_sources(comm: pd.DataFrame) -> set[str]:
    ts = comm["timing_source"].dropna()
    return set(map(str, ts.unique())) if len(ts) else set()


def busbw_from(op, n_derived, n_logged, group) -> str | None:
    if n_derived and not n_logged:
        n = int(group) if group == group else None
        return f"derived: algbw x {bus_factor_text(op, n)} (n = {n})" if n else "derived"
    if n_derived:
        return "logged, derived where missing"
    return "logged" if n_logged else None


def file_line(comm: pd.DataFrame) -> pd.Series:
    """The comm frame's file:line column (``source``; ``origin`` in older nccl-tests frames), None elsewhere."""
    for col in ("source", "origin"):
        if col not in comm.columns or not comm[col].notna().any():
            continue
        values = comm[col].astype("string")
        ok = values.str.contains(r".:\d+$", regex=True).fillna(False).astype(bool)
        if ok.any():
            return values.astype(object).where(ok.to_numpy(), None)
    return pd.Series([None] * len(comm), index=comm.index, dtype="object")
