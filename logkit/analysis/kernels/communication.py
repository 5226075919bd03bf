"""Communication: per session, rank and operation, how much moved, how fast, and against what peak;
and, for nccl-tests output, per op the bandwidth at the largest message size.

Definitions (``definitions.COMMUNICATION``):

- ``count``: records of the op on the rank; ``total_bytes`` / ``mean_bytes``: sum / mean of
  size_bytes (MB in renderers = 10^6 bytes).
- ``p50_ms / p95_ms``: median / 95th percentile of duration_ms.
- ``algbw_mb_s / busbw_mb_s``: medians over the records of algbw / busbw (MB/s, SI). A record
  without algbw gets size / duration; a record without busbw gets algbw x the bus factor of its
  op and the number of ranks n in the collective (group_size, else the session's world size):
  2(n-1)/n for all-reduce (gradient_sync is one), (n-1)/n for all-gather, reduce-scatter and
  all-to-all, 1 for broadcast, reduce and send/recv; ``busbw_from`` says which.
- ``sync_share_of_step_time``: over the steps that logged both this op and a step time on the
  rank (the lowest rank's step time for a rank without step rows): sum of the op's durations /
  sum of those steps' step_time_s (the time-weighted mean of the per-step shares);
  ``matched_steps`` says how many. Gradient buckets overlap the backward pass, so this is an
  upper bound of the communication time the step actually waits for.
- ``link`` / ``peak_busbw_gb_s``: from ``peaks.COMMUNICATION_PEAKS`` by GPU model (gloo: no peak,
  it does not use the GPUs' link; CPU runs: no peak; several hosts: the network, no peak);
  ``pct_of_peak`` = busbw / peak x 100.
- ``verdict``: from the message size AND the bandwidth against the peak: ``bandwidth-bound``
  when busbw >= ``NEAR_PEAK`` of the peak (the link is the limit); ``latency-bound`` when the
  mean message is smaller than ``half_peak_bytes`` (alpha x peak, where the link's alpha-beta
  model reaches half its peak) and busbw is below ``NEAR_PEAK``; ``below peak`` when messages are
  large but busbw is well below the peak (topology, PCIe, NCCL settings); ``no reference`` or
  ``unknown`` without a peak or a bandwidth. ``latency_bound`` is verdict == latency-bound.
- ``summary_count`` / ``summary_total_bytes``: the run's own totals per op (summary.json) where
  the log lines are a sample of the operations (``sampled``).
Output of nccl-tests is summarised by ``nccl_tests.py`` instead: a median over a size sweep means nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from logkit.analysis.kernels.groups import session_kind
from logkit.analysis.kernels.peaks import (
    COMMUNICATION_PEAKS,
    CPU_LINK,
    GLOO_LINK,
    gpu_model,
    half_peak_bytes,
    link_for,
)
from logkit.analysis.thresholds import NEAR_PEAK
from logkit.schema.collectives import bus_factor_rule, bus_factor_text
from logkit.schema.vocab import EventKind, SessionKind, on_cpu

SYNC_OPS = ("gradient_sync", "allreduce", "all_reduce", "reduce_scatter", "reducescatter")
COMM_COLUMNS = ["session_id", "rank", "op", "count", "total_bytes", "mean_bytes", "p50_ms", "p95_ms",
                "algbw_mb_s", "busbw_mb_s", "busbw_from", "total_ms", "sync_share_of_step_time", "matched_steps",
                "group_size", "timing_source", "link", "peak_busbw_gb_s", "pct_of_peak", "half_peak_bytes",
                "latency_bound", "verdict", "note", "sampled", "summary_count", "summary_total_bytes",
                "summary_mean_bytes", "sources"]


def _factor_array(op: str, n: np.ndarray) -> np.ndarray:
    """The bus factor of ``op`` over an array of rank counts (NaN where n is unknown or the op has none)."""
    n = np.where(n > 0, n, np.nan)
    rule = bus_factor_rule(op)
    return rule(n) if rule is not None else np.full(len(n), np.nan)


def session_link(session) -> dict | None:
    """The reference link of ``session``: a ``COMMUNICATION_PEAKS`` row, ``CPU_LINK``, ``GLOO_LINK``,
    an inter-node row without a peak (several hosts in nccl_init events), or None (GPU model unknown)."""
    ev = session.events
    if not ev.empty and "host" in ev.columns:
        hosts = ev.loc[ev["kind"] == EventKind.NCCL_INIT, "host"].dropna().unique()
        if len(hosts) > 1:
            nets = ev.loc[ev["kind"] == EventKind.NCCL_INIT, "network"].dropna().unique()
            net = f" ({', '.join(map(str, nets))})" if len(nets) else ""
            return {"link": f"inter-node network{net}", "peak_busbw_gb_s": None, "alpha_us": None,
                    "source": "several hosts: the network, not the GPUs' link, bounds the collectives"}
    meta = session.meta
    cpu = bool(on_cpu(meta.mode, meta.gpu_count))
    # gloo without a GPU model is a CPU run too: link_for says so
    return link_for(gpu_model(session), str(meta.backend or "") or None, cpu=cpu)


def verdict(mean_bytes, busbw_mb_s, link: dict | None) -> tuple[str, str]:
    """(verdict, note) for one op: see the module doc."""
    if busbw_mb_s is None or busbw_mb_s != busbw_mb_s:
        return "unknown", "no bus bandwidth logged or derivable (size, duration or ranks missing)"
    if link is None:
        return "unknown", "GPU model unknown: no reference peak"
    peak = link.get("peak_busbw_gb_s")
    if peak is None:
        return "no reference", link["source"]
    pct = busbw_mb_s / (peak * 1000.0) * 100.0
    half = half_peak_bytes(link)
    size = "" if mean_bytes is None or mean_bytes != mean_bytes else f" at {mean_bytes / 1e6:.3g} MB messages"
    if pct >= NEAR_PEAK * 100:
        return "bandwidth-bound", (f"bandwidth-bound: {pct:.0f}% of the {link['link']} peak of {peak:g} GB/s"
                                   f"{size}: the link is the limit")
    if half and mean_bytes is not None and mean_bytes == mean_bytes and mean_bytes < half:
        return "latency-bound", (f"latency-bound: mean message {mean_bytes / 1e6:.3g} MB < {half / 1e6:.3g} MB needed "
                                 f"for half of the {link['link']} peak, and {pct:.1f}% of its {peak:g} GB/s: "
                                 "per-call latency dominates")
    return "below peak", (f"below peak at large messages: {pct:.1f}% of the {link['link']} peak of {peak:g} GB/s"
                          f"{size}: check the topology (nvidia-smi topo -m), PCIe generation and width, "
                          "peer-to-peer access and NCCL settings (NCCL_P2P_DISABLE, NCCL_SHM_DISABLE, NCCL_ALGO)")


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=COMM_COLUMNS)


def _group_n(comm: pd.DataFrame, world_size) -> np.ndarray:
    n = comm["group_size"].astype("float64").to_numpy()
    if _usable_world_size(world_size):
        n = np.where(np.isnan(n), float(world_size), n)
    return n


def _usable_world_size(ws) -> bool:
    return isinstance(ws, (int, float)) and not isinstance(ws, bool) and ws > 0


def _step_times(session) -> pd.DataFrame:
    """(rank, step, t) of timed steps, one row per rank and step."""
    rows = session.timed_steps()
    rows = rows[rows["step"].notna()]
    if rows.empty:
        return pd.DataFrame(columns=["rank", "step", "t"])
    out = pd.DataFrame({"rank": rows["rank"].astype("float64").fillna(0).to_numpy(),
                        "step": rows["step"].astype("float64").to_numpy(),
                        "t": rows["step_time_s"].to_numpy(dtype="float64")})
    return out.drop_duplicates(["rank", "step"], keep="last")


def _per_key_step(frame: pd.DataFrame, span: int | None = None) -> tuple:
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


def _sync_share(frame: pd.DataFrame, st: pd.DataFrame) -> tuple[pd.Series, pd.Series]:
    """Per key (rank, op): (share of step time over matched steps, number of matched steps), from the
    records (``frame``: key, rank_f, step, dur) and the step times ``st`` (``_step_times``).
    Integer keys throughout: (rank, op, step) and (rank, step) packed into one int64 each."""
    has = (frame["step"].notna() & frame["dur"].notna()).to_numpy()
    if st.empty or not has.any():
        return pd.Series(dtype="float64"), pd.Series(dtype="int64")
    span = int(max(frame["step"].to_numpy()[has].max(), st["step"].max())) + 1
    u_key, u_step, u_rank, dsum = _per_key_step(frame, span)
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
    g = pd.DataFrame({"key": u_key[ok], "d": dsum[ok], "t": t[ok]}).groupby("key", sort=True)
    return g["d"].sum() / 1000.0 / g["t"].sum(), g.size()


def _first_last(keys: np.ndarray, comm: pd.DataFrame) -> tuple[dict, dict]:
    """{key: file:line of its first record}, {key: ... of its last}: the rows are found by key first, so
    that only those few values are read (millions of records stay arrow strings)."""
    _, first = np.unique(keys, return_index=True)
    _, last_rev = np.unique(keys[::-1], return_index=True)
    last = len(keys) - 1 - last_rev
    src = file_line(comm.iloc[np.concatenate([first, last])])
    values = src.to_numpy(dtype=object)
    n = len(first)
    firsts = {int(keys[i]): v for i, v in zip(first, values[:n], strict=True) if isinstance(v, str)}
    lasts = {int(keys[i]): v for i, v in zip(last, values[n:], strict=True) if isinstance(v, str)}
    if len(firsts) < n:  # some first record lacks a source: look at every record of those keys
        for k in set(keys[first].tolist()) - set(firsts):
            rows = file_line(comm[keys == k]).dropna()
            if len(rows):
                firsts[k], lasts[k] = rows.iloc[0], rows.iloc[-1]
    return firsts, lasts  # a last without a source is left out: source_span gives the first's alone


def _summary_ops(meta: dict) -> dict:
    doc = meta.summary if isinstance(meta.summary, dict) else {}
    comm = doc.get("communication")
    return comm if isinstance(comm, dict) else {}


def _records(comm: pd.DataFrame, world_size) -> tuple[pd.DataFrame, np.ndarray]:
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
    alg = np.where(alg_derived, size / 1e6 / (dur / 1000.0), alg)
    bus = comm["busbw_mb_s"].to_numpy(dtype="float64")
    n = _group_n(comm, world_size)
    op_names = np.asarray(ops, dtype=object)
    factor = np.full(len(comm), np.nan)
    for i, name in enumerate(op_names):
        sel = codes == i
        if sel.any():
            factor[sel] = _factor_array(name, n[sel])
    bus_derived = np.isnan(bus) & ~np.isnan(alg) & ~np.isnan(factor)
    bus = np.where(bus_derived, alg * factor, bus)
    frame = pd.DataFrame({"key": key, "rank_f": np.where(rank < 0, 0, rank).astype("float64"),
                          "step": comm["step"].astype("float64").to_numpy(), "size": size, "dur": dur, "alg": alg,
                          "bus": bus, "bus_derived": bus_derived, "bus_logged": ~np.isnan(
                              comm["busbw_mb_s"].to_numpy(dtype="float64")), "group": n,
                          })
    return frame, op_names


def _aggregate(frame: pd.DataFrame) -> pd.DataFrame:
    """Per key of ``_records``' frame, in key order (the index): the figures that are the records' alone
    (count, bytes, p50/p95, bandwidth medians, total ms, group size) and the busbw counts."""
    g = frame.groupby("key", sort=True)
    return pd.DataFrame({
        "count": g.size(), "total_bytes": g["size"].sum(min_count=1), "mean_bytes": g["size"].mean(),
        "p50_ms": g["dur"].median(), "p95_ms": g["dur"].quantile(0.95),
        "algbw_mb_s": g["alg"].median(), "busbw_mb_s": g["bus"].median(), "total_ms": g["dur"].sum(min_count=1),
        "group_size": g["group"].max(), "n_derived": g["bus_derived"].sum(), "n_logged": g["bus_logged"].sum(),
    })


def _labelled(out: pd.DataFrame, op_names: np.ndarray, share: pd.Series, matched: pd.Series,
              sources: dict) -> pd.DataFrame:
    """``_aggregate``'s figures with the sync share, the key's rank and op, busbw_from and sources
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
    out["busbw_from"] = [_busbw_from(op, nd, nl, gs) for op, nd, nl, gs in
                         zip(out["op"], out["n_derived"], out["n_logged"], out["group_size"], strict=True)]
    out["sources"] = [sources.get(k) for k in keys.tolist()]
    return out.drop(columns=["n_derived", "n_logged"])


def source_span(first: str | None, last: str | None) -> str | None:
    """The ``sources`` of a key from its first and last file:line."""
    if first is None:
        return None
    return first if first == last or last is None else f"{first} .. {last}"


def _key_stats(comm: pd.DataFrame, world_size, st: pd.DataFrame) -> pd.DataFrame:
    """Per (rank, op) key, in key order: the figures of the records alone (everything but the link,
    the verdicts and the run's totals), with ``key``. ``st``: the step times (``_step_times``)."""
    frame, op_names = _records(comm, world_size)
    out = _aggregate(frame)
    share, matched = _sync_share(frame, st)
    firsts, lasts = _first_last(frame["key"].to_numpy(), comm)
    sources = {k: source_span(v, lasts.get(k)) for k, v in firsts.items()}
    return _labelled(out, op_names, share, matched, sources)


def _timing_sources(comm: pd.DataFrame) -> set[str]:
    ts = comm["timing_source"].dropna()
    return set(map(str, ts.unique())) if len(ts) else set()


def _finish(out: pd.DataFrame, session, timing_sources: set[str]) -> pd.DataFrame:
    """The per-key figures with the session's link, verdicts and totals: ``COMM_COLUMNS``."""
    out = out.drop(columns=["key"]).reset_index(drop=True)
    out["timing_source"] = ",".join(sorted(timing_sources)) if timing_sources else None
    link = session_link(session)
    half = half_peak_bytes(link)
    peak = link.get("peak_busbw_gb_s") if link else None
    out["link"] = link["link"] if link else None
    out["peak_busbw_gb_s"] = float(peak) if peak else np.nan
    out["pct_of_peak"] = out["busbw_mb_s"] / (peak * 1000.0) * 100.0 if peak else np.nan
    out["half_peak_bytes"] = float(half) if half else np.nan
    verdicts = [verdict(m, b, link) for m, b in zip(out["mean_bytes"], out["busbw_mb_s"], strict=True)]
    out["verdict"] = [v for v, _ in verdicts]
    out["note"] = [t for _, t in verdicts]
    out["latency_bound"] = pd.array([v == "latency-bound" if link and peak else pd.NA for v, _ in verdicts],
                                    dtype="boolean")
    _add_summary_totals(out, session.meta)
    out["rank"] = out["rank"].astype("Int64")
    out.insert(0, "session_id", session.meta.session_id)
    return out[COMM_COLUMNS]


def communication_table(session, parts: tuple | None = None) -> pd.DataFrame:
    """One row per (rank, op) of ``session``'s comm frame: ``COMM_COLUMNS`` (see module doc).
    nccl-tests sessions have none (``nccl_tests_table`` reads them). ``parts``: the ranks' comm records
    reduced where they were read (the engine's ``CommPart``s), which give the same rows."""
    if parts is not None:
        return _from_parts(session, parts)
    comm = session.comm
    if comm.empty or session_kind(session) == SessionKind.NCCL_TESTS:
        return _empty()
    out = _key_stats(comm, session.meta.world_size, _step_times(session))
    return _finish(out, session, _timing_sources(comm))


@dataclass
class CommPart:
    """One rank's comm records reduced where they were read (``comm_reduce.CommReducer``): the per-(rank, op) figures,
    exact, as ``communication_table`` computes them; per (op, step) the summed durations where the rank
    has no step times of its own (its sync share needs the lowest rank's, merged centrally); the timing
    sources; the bandwidth curve's (op, size) medians; the world size assumed for records without a
    group size and whether any had none."""

    stats: pd.DataFrame
    leftover: pd.DataFrame | None
    timing_sources: set
    bandwidth: pd.DataFrame
    world_size: float | None
    needs_world_size: bool


def _from_parts(session, parts: tuple) -> pd.DataFrame:
    """``communication_table`` from the ranks' ``CommPart``s."""
    parts = [p for p in parts if p is not None and len(p.stats)]
    if not parts or session_kind(session) == SessionKind.NCCL_TESTS:
        return _empty()
    outs, st = [], None
    for p in parts:
        out = p.stats
        if p.leftover is not None:
            st = _step_times(session) if st is None else st
            share, matched = _sync_share(p.leftover, st)
            out = out.assign(sync_share_of_step_time=share.reindex(out["key"]).to_numpy(),
                             matched_steps=matched.reindex(out["key"]).fillna(0).astype("int64").to_numpy())
        outs.append(out)
    out = pd.concat(outs, ignore_index=True)
    return _finish(out, session, set().union(*(p.timing_sources for p in parts)))


def _busbw_from(op, n_derived, n_logged, group) -> str | None:
    if n_derived and not n_logged:
        n = int(group) if group == group else None
        return f"derived: algbw x {bus_factor_text(op, n)} (n = {n})" if n else "derived"
    if n_derived:
        return "logged, derived where missing"
    return "logged" if n_logged else None


def _add_summary_totals(out: pd.DataFrame, meta: dict) -> None:
    """The run's totals per op (summary.json, rank 0's) beside the lowest rank's logged figures."""
    out["sampled"] = False
    out["summary_count"] = np.nan
    out["summary_total_bytes"] = np.nan
    out["summary_mean_bytes"] = np.nan
    ops = _summary_ops(meta)
    if not ops or out.empty:
        return
    lowest = out["rank"].min() if out["rank"].notna().any() else None
    for i, row in out.iterrows():
        if lowest is not None and row["rank"] != lowest:
            continue
        doc = ops.get(row["op"])
        if not isinstance(doc, dict):
            continue
        count = doc.get("count")
        total = doc.get("total_mb")
        avg = doc.get("avg_mb")
        if isinstance(count, (int, float)):
            out.at[i, "summary_count"] = float(count)
            out.at[i, "sampled"] = bool(count > row["count"])
        if isinstance(total, (int, float)):
            out.at[i, "summary_total_bytes"] = float(total) * 1e6
        if isinstance(avg, (int, float)):
            out.at[i, "summary_mean_bytes"] = float(avg) * 1e6
        elif isinstance(total, (int, float)) and isinstance(count, (int, float)) and count:
            out.at[i, "summary_mean_bytes"] = float(total) * 1e6 / count


def communication_peaks() -> pd.DataFrame:
    """The reference table (``peaks.COMMUNICATION_PEAKS`` and the CPU and gloo rows) as a frame, with
    ``half_peak_bytes`` per link and each row's source."""
    rows = [dict(r) for r in COMMUNICATION_PEAKS] + [dict(CPU_LINK), dict(GLOO_LINK)]
    for r in rows:
        r["half_peak_bytes"] = half_peak_bytes(r)
    return pd.DataFrame(rows)[["gpu_model", "link", "peak_busbw_gb_s", "alpha_us", "half_peak_bytes", "source",
                               "match"]]


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
