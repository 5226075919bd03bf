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
  rank (the lowest rank's step time for a rank without step rows): sum of the op's durations in
  each step, at most that step's time (buckets in flight together overlap: a share of wall time is
  never above 1) / sum of those steps' step_time_s (the time-weighted mean of the per-step shares);
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
- ``timing_source``: how the row's records were timed (wall, cuda_event, nccl_inspector: NCCL Inspector's rows
  sit beside the emitter's), the session's sources where a row has none.
- ``phase``: the phases the op's records name (forward, backward), in their order; ``role``: what the op
  does in the session's strategy (``kernels.strategy.op_role``), None where it says nothing of it.
Output of nccl-tests is summarised by ``nccl_tests.py`` instead: a median over a size sweep means nothing.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from logkit.analysis.kernels.comm_records import step_times, sync_share
from logkit.analysis.kernels.comm_reduce import reduce_session
from logkit.analysis.kernels.fabric import ALONE, alone, fabric, scope_of, session_link
from logkit.analysis.kernels.groups import session_kind
from logkit.analysis.kernels.peaks import (
    COMMUNICATION_PEAKS,
    CPU_LINK,
    GLOO_LINK,
    half_peak_bytes,
)
from logkit.analysis.kernels.strategy import op_role
from logkit.analysis.thresholds import NEAR_PEAK
from logkit.schema.values import to_int
from logkit.schema.vocab import SessionKind

SYNC_OPS = ("gradient_sync", "allreduce", "all_reduce", "reduce_scatter", "reducescatter")
COMM_COLUMNS = ["session_id", "rank", "op", "count", "total_bytes", "mean_bytes", "p50_ms", "p95_ms",
                "algbw_mb_s", "busbw_mb_s", "busbw_from", "total_ms", "sync_share_of_step_time", "matched_steps",
                "group_size", "timing_source", "link", "peak_busbw_gb_s", "pct_of_peak", "half_peak_bytes",
                "latency_bound", "verdict", "note", "sampled", "summary_count", "summary_total_bytes",
                "summary_mean_bytes", "sources", "phase", "role", "scope", "transport", "peak_source"]
# the reference table (``communication_peaks``): one row per link
PEAK_COLUMNS = ["gpu_model", "link", "peak_busbw_gb_s", "alpha_us", "half_peak_bytes", "source", "match"]
# the links the run's sessions were judged against (``run_links``): one row per link
RUN_LINK_COLUMNS = ["link", "gpu_model", "peak_busbw_gb_s", "half_peak_bytes", "source", "session_ids"]


def verdict(mean_bytes, busbw_mb_s, link: dict | None) -> tuple[str, str]:
    """(verdict, note) for one op: see the module doc."""
    if busbw_mb_s is None or busbw_mb_s != busbw_mb_s:
        return "unknown", "no bus bandwidth logged or derivable (size, duration or ranks missing)"
    if link is None:
        return "unknown", "GPU model unknown: no reference peak"
    peak = link.get("peak_busbw_gb_s")
    if peak is None:
        return "no reference", link.get("source") or link.get("peak_source") or "no reference peak for this link"
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


def _summary_ops(meta: dict) -> dict:
    doc = meta.summary if isinstance(meta.summary, dict) else {}
    comm = doc.get("communication")
    return comm if isinstance(comm, dict) else {}


def _finish(out: pd.DataFrame, session, timing_sources: set[str]) -> pd.DataFrame:
    """The per-key figures with the session's link, verdicts and totals: ``COMM_COLUMNS``."""
    out = out.drop(columns=["key"]).reset_index(drop=True)
    # each row's own timing sources (the emitter's and NCCL Inspector's rows of one session differ), the
    # session's where a partial cached before rows kept theirs
    whole = ",".join(sorted(timing_sources)) if timing_sources else None
    own = out["timing_source"] if "timing_source" in out.columns else pd.Series([None] * len(out), index=out.index)
    out["timing_source"] = own.where(own.notna(), whole) if len(out) else own
    # each row's link is its scope's: a collective that crosses hosts is bound by the network (fabric)
    by_size = {g: scope_of(session, g) for g in out["group_size"].dropna().unique()}  # once per group size
    none = scope_of(session, None) if out["group_size"].isna().any() else None
    solo = [alone(session, None if pd.isna(g) else g) for g in out["group_size"]]
    scopes = [None if one else none if pd.isna(g) else by_size[g] for g, one in zip(out["group_size"], solo,
                                                                                     strict=True)]
    fabrics = {sc: fabric(session, sc) for sc, one in zip(scopes, solo, strict=True) if not one}
    links = [ALONE if one else fabrics[sc] if sc is not None else session_link(session)
             for sc, one in zip(scopes, solo, strict=True)]
    peaks = [link.get("peak_busbw_gb_s") if link else None for link in links]
    halves = [half_peak_bytes(link) for link in links]
    out["link"] = [link.get("link") if link else None for link in links]
    out["peak_busbw_gb_s"] = [float(p) if p else np.nan for p in peaks]
    out["pct_of_peak"] = [b / (p * 1000.0) * 100.0 if p else np.nan for b, p in zip(out["busbw_mb_s"], peaks,
                                                                                    strict=True)]
    out["half_peak_bytes"] = [float(h) if h else np.nan for h in halves]
    verdicts = [verdict(m, b, link) for m, b, link in zip(out["mean_bytes"], out["busbw_mb_s"], links, strict=True)]
    out["verdict"] = [v for v, _ in verdicts]
    out["note"] = [t for _, t in verdicts]
    out["latency_bound"] = pd.array([v == "latency-bound" if link and p else pd.NA
                                     for (v, _), link, p in zip(verdicts, links, peaks, strict=True)], dtype="boolean")
    out["scope"] = scopes
    out["transport"] = [link.get("transport") if link else None for link in links]
    out["peak_source"] = [(link.get("peak_source") or link.get("source")) if link else "GPU model unknown: no peak"
                          for link in links]
    _add_summary_totals(out, session.meta)
    if "phase" not in out.columns:  # a partial cached before phases were kept
        out["phase"] = None
    meta = session.meta
    out["role"] = [op_role(meta.strategy, op, to_int(meta.zero_stage)) for op in out["op"]]
    out["rank"] = out["rank"].astype("Int64")
    out.insert(0, "session_id", session.meta.session_id)
    return out[COMM_COLUMNS]


def communication_table(session, parts: tuple | None = None) -> pd.DataFrame:
    """One row per (rank, op) of ``session``'s comm records: ``COMM_COLUMNS`` (see module doc), from the
    ranks' reductions (``comm_reduce.CommPart``s: the engine's where it reduced them, else
    ``reduce_session(session)``). nccl-tests sessions have none (``nccl_tests_table`` reads them)."""
    parts = reduce_session(session) if parts is None else parts
    parts = [p for p in parts if p is not None and len(p.stats)]
    if not parts or session_kind(session) == SessionKind.NCCL_TESTS:
        return _empty()
    outs, st = [], None
    for p in parts:
        out = p.stats
        if p.leftover is not None:
            st = step_times(session.steps) if st is None else st
            share, matched = sync_share(p.leftover, st)
            out = out.assign(sync_share_of_step_time=share.reindex(out["key"]).to_numpy(),
                             matched_steps=matched.reindex(out["key"]).fillna(0).astype("int64").to_numpy())
        outs.append(out)
    out = pd.concat(outs, ignore_index=True)
    return _finish(out, session, set().union(*(p.timing_sources for p in parts)))


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
    """The reference table (``peaks.COMMUNICATION_PEAKS`` and the CPU and gloo rows) as a frame of
    ``PEAK_COLUMNS``, with ``half_peak_bytes`` per link and each row's source."""
    rows = [dict(r) for r in COMMUNICATION_PEAKS] + [dict(CPU_LINK), dict(GLOO_LINK)]
    for r in rows:
        r["half_peak_bytes"] = half_peak_bytes(r)
    return pd.DataFrame(rows)[PEAK_COLUMNS]




def run_links(sessions, judged) -> pd.DataFrame:
    """The links the sessions whose ids are in ``judged`` (those with communication or nccl-tests rows)
    were judged against, one row per link in their order: ``RUN_LINK_COLUMNS``, ``session_ids`` the
    list of those sessions. A session whose link is unknown (GPU model not in the table) has none."""
    judged = set(judged)
    rows: dict[str, dict] = {}
    for session in sessions:
        sid = session.meta.session_id
        link = session_link(session, sessions) if sid in judged else None
        if link is None:
            continue
        row = rows.setdefault(link["link"], {
            "link": link["link"], "gpu_model": link.get("gpu_model"), "peak_busbw_gb_s": link.get("peak_busbw_gb_s"),
            "half_peak_bytes": half_peak_bytes(link), "source": link.get("source"), "session_ids": []})
        row["session_ids"].append(sid)
    return pd.DataFrame(list(rows.values()), columns=RUN_LINK_COLUMNS)
