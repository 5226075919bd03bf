"""Communication: per session, rank and operation, how much moved, how fast, and against what peak.

Definitions (``COMMUNICATION_DEFINITIONS``):

- ``count``: records of the op on the rank; ``total_bytes`` / ``mean_bytes``: sum / mean of
  size_bytes (MB in renderers = 10^6 bytes).
- ``p50_ms / p95_ms``: median / 95th percentile of duration_ms.
- ``algbw_mb_s / busbw_mb_s``: medians over the records of the logged algbw / busbw (MB/s, SI;
  busbw = algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather / reduce-scatter).
- ``sync_share_of_step_time``: sum of the op's duration / sum of step_time_s of the rank (of the
  lowest rank when the rank logged no steps). Gradient buckets overlap the backward pass, so
  this is an upper bound of the communication time the step actually waits for.
- ``link`` / ``peak_busbw_gb_s``: from ``peaks.COMMUNICATION_PEAKS`` by GPU model (gloo on CPU:
  no peak; several hosts: the network, no peak); ``pct_of_peak`` = busbw / peak x 100.
- ``latency_bound``: mean message < alpha x peak, the size at which the link's alpha-beta
  model reaches half its peak; <NA> without a reference link.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from logkit.analysis.peaks import COMMUNICATION_PEAKS, CPU_LINK, half_peak_bytes, link_for
from logkit.analysis.performance import gpu_model

__all__ = ["COMMUNICATION_DEFINITIONS", "COMM_COLUMNS", "SYNC_OPS", "session_link", "communication_table",
           "communication_peaks"]

SYNC_OPS = ("gradient_sync", "allreduce", "all_reduce", "reduce_scatter", "reducescatter")
COMM_COLUMNS = ["session_id", "rank", "op", "count", "total_bytes", "mean_bytes", "p50_ms", "p95_ms",
                "algbw_mb_s", "busbw_mb_s", "total_ms", "sync_share_of_step_time", "group_size", "timing_source",
                "link", "peak_busbw_gb_s", "pct_of_peak", "half_peak_bytes", "latency_bound", "note"]

COMMUNICATION_DEFINITIONS: dict[str, str] = {
    "count": "communication records of that op on that rank",
    "total_bytes / mean_bytes": "sum / mean of size_bytes per op on the rank; MB = 10^6 bytes",
    "p50_ms / p95_ms": "median / 95th percentile of duration_ms",
    "algbw_mb_s": "median over records of bytes moved by one rank / duration (MB/s, SI)",
    "busbw_mb_s": "median over records of algbw x 2(n-1)/n (all-reduce), (n-1)/n (all-gather, "
                  "reduce-scatter), 1 (broadcast, reduce)",
    "sync_share_of_step_time": "sum of the op's duration / sum of step_time_s on that rank; gradient "
                               "buckets overlap backward compute, so this is an upper bound of exposed "
                               "communication",
    "pct_of_peak": "busbw / the link's reference peak bus bandwidth x 100 (peaks.COMMUNICATION_PEAKS)",
    "latency_bound": "mean message smaller than alpha x peak, where the link's alpha-beta model "
                     "t(m) = alpha + m / peak reaches half of peak bandwidth",
}


def session_link(session) -> dict | None:
    """The reference link of ``session``: a ``COMMUNICATION_PEAKS`` row, ``CPU_LINK``, an inter-node
    row without a peak (several hosts in nccl_init events), or None (GPU model unknown)."""
    ev = session.events
    if not ev.empty and "host" in ev.columns:
        hosts = ev.loc[ev["kind"] == "nccl_init", "host"].dropna().unique()
        if len(hosts) > 1:
            nets = ev.loc[ev["kind"] == "nccl_init", "network"].dropna().unique()
            net = f" ({', '.join(map(str, nets))})" if len(nets) else ""
            return {"link": f"inter-node network{net}", "peak_busbw_gb_s": None, "alpha_us": None,
                    "source": "several hosts: the network, not the GPUs' link, bounds the collectives"}
    meta = session.meta
    mode = str(meta.get("mode") or "").upper()
    name = gpu_model(session)
    cpu = mode in ("CPU", "MULTI-CPU") or (not name and str(meta.get("backend") or "").lower() == "gloo")
    return link_for(name, meta.get("backend"), cpu=cpu)


def _empty() -> pd.DataFrame:
    return pd.DataFrame(columns=COMM_COLUMNS)


def communication_table(session) -> pd.DataFrame:
    """One row per (rank, op) of ``session``'s comm frame: ``COMM_COLUMNS`` (see module doc)."""
    comm = session.comm
    if comm.empty:
        return _empty()
    rank = comm["rank"].astype("float64").fillna(-1).to_numpy().astype("int64")  # -1: no rank (nccl-tests)
    codes, ops = pd.factorize(comm["op"].fillna("unknown"), sort=True)
    key = (rank + 1) * (len(ops) + 1) + codes  # one integer key per (rank, op): fast groupby
    frame = pd.DataFrame({
        "key": key, "size": comm["size_bytes"].astype("float64").to_numpy(),
        "dur": comm["duration_ms"].to_numpy(dtype="float64"),
        "alg": comm["algbw_mb_s"].to_numpy(dtype="float64"), "bus": comm["busbw_mb_s"].to_numpy(dtype="float64"),
        "group": comm["group_size"].astype("float64").to_numpy(),
    })
    g = frame.groupby("key", sort=True)
    out = pd.DataFrame({
        "count": g.size(), "total_bytes": g["size"].sum(min_count=1), "mean_bytes": g["size"].mean(),
        "p50_ms": g["dur"].median(), "p95_ms": g["dur"].quantile(0.95),
        "algbw_mb_s": g["alg"].median(), "busbw_mb_s": g["bus"].median(), "total_ms": g["dur"].sum(min_count=1),
        "group_size": g["group"].max(),
    })
    keys = out.index.to_numpy()
    out = out.reset_index(drop=True)
    out.insert(0, "op", np.asarray(ops, dtype=object)[keys % (len(ops) + 1)])
    r = (keys // (len(ops) + 1) - 1).astype("float64")
    out.insert(0, "rank", np.where(r < 0, np.nan, r))
    # step time per rank (the lowest rank's for a rank without step rows)
    steps = session.steps
    timed = steps[steps["step_time_s"].notna() & (steps["step_time_s"] > 0)] if not steps.empty else steps
    if not timed.empty:
        per_rank = timed["step_time_s"].groupby(timed["rank"].astype("float64").fillna(0)).sum()
        fallback = float(per_rank.iloc[0])
        step_sum = out["rank"].map(per_rank).fillna(fallback).to_numpy()
    else:
        step_sum = np.full(len(out), np.nan)
    out["sync_share_of_step_time"] = out["total_ms"] / 1000.0 / step_sum
    ts = comm["timing_source"].dropna()
    out["timing_source"] = ",".join(sorted(set(map(str, ts.unique())))) if len(ts) else None
    link = session_link(session)
    half = half_peak_bytes(link)
    peak = link.get("peak_busbw_gb_s") if link else None
    out["link"] = link["link"] if link else None
    out["peak_busbw_gb_s"] = float(peak) if peak else np.nan
    out["pct_of_peak"] = out["busbw_mb_s"] / (peak * 1000.0) * 100.0 if peak else np.nan
    out["half_peak_bytes"] = float(half) if half else np.nan
    if half:
        out["latency_bound"] = pd.array(out["mean_bytes"] < half, dtype="boolean")
    else:
        out["latency_bound"] = pd.array([pd.NA] * len(out), dtype="boolean")
    out["note"] = _notes(out, link, half)
    out["rank"] = out["rank"].astype("Int64")
    out.insert(0, "session_id", session.meta.get("session_id"))
    return out[COMM_COLUMNS]


def _notes(out: pd.DataFrame, link: dict | None, half: float | None) -> list[str]:
    if link is None:
        base = "GPU model unknown: no reference peak"
    elif link.get("peak_busbw_gb_s") is None:
        base = link["source"]
    else:
        base = None
    notes = []
    for mean, lb in zip(out["mean_bytes"].to_numpy(), out["latency_bound"] if half else [None] * len(out),
                        strict=True):
        if base:
            notes.append(base)
        elif lb is True or lb is np.True_:
            notes.append(f"latency-bound: mean message {mean / 1e6:.3g} MB < {half / 1e6:.3g} MB needed for "
                         f"half of the {link['link']} peak")
        else:
            notes.append(f"bandwidth-bound: compared with {link['link']} peak "
                         f"{link['peak_busbw_gb_s']:g} GB/s")
    return notes


def communication_peaks() -> pd.DataFrame:
    """The reference table (``peaks.COMMUNICATION_PEAKS`` and the CPU row) as a frame, with
    ``half_peak_bytes`` per link and each row's source."""
    rows = [dict(r) for r in COMMUNICATION_PEAKS] + [dict(CPU_LINK)]
    for r in rows:
        r["half_peak_bytes"] = half_peak_bytes(r)
    return pd.DataFrame(rows)[["gpu_model", "link", "peak_busbw_gb_s", "alpha_us", "half_peak_bytes", "source",
                               "match"]]
