"""Findings about the network between hosts and the hosts' clocks, in plain words (issue 26).

- ``fabric``: what the collectives that cross hosts travel over (the communication rows' ``transport``
  and what says so), their bus bandwidth (median over ranks) against what that link gives
  (``peak_busbw_gb_s`` and ``peak_source``, or that no peak is known), and the share of each step they
  take (``sync_share_of_step_time``, an upper bound). Warning when they go over TCP sockets or below
  ``NEAR_PEAK`` of their peak, else info.
- ``p2p_disabled``: NCCL_P2P_DISABLE=1 where a host runs several ranks.
- ``host_slower_sync``: a host whose ranks' median bus bandwidth in the inter-node collectives is
  below ``HOST_SYNC_SPREAD`` of the fastest host's.
- ``clock_skew``: a host whose clock offset to rank 0's host exceeds its uncertainty.
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis.kernels.communication import SYNC_OPS
from logkit.analysis.kernels.fabric import INTER, nccl_env, transport_of
from logkit.analysis.results import Finding
from logkit.analysis.thresholds import HOST_SYNC_SPREAD, NEAR_PEAK
from logkit.schema.findings import FindingKind, Severity

_SLOW_TRANSPORTS = ("Socket", "gloo/TCP")
_WORDS = {"Socket": "TCP sockets", "gloo/TCP": "TCP sockets", "IB": "InfiniBand", "RoCE": "RoCE"}


def _gb(mb_s: float) -> str:
    return f"{mb_s / 1000:.3g} GB/s"


def _network(s, sid, rows: pd.DataFrame) -> list[Finding]:
    sync = rows[rows["op"].isin(SYNC_OPS)]
    rows = sync if len(sync) else rows
    busbw = rows["busbw_mb_s"].dropna()
    if busbw.empty:
        return []
    transport = rows["transport"].dropna().iloc[0] if rows["transport"].notna().any() else None
    _, said = transport_of(s, INTER)
    op = "gradient sync" if len(sync) else "collectives"
    over = f"goes over {_WORDS.get(transport, transport)} ({said})" if transport else f"goes over a network no log names ({said})"
    peak = rows["peak_busbw_gb_s"].dropna()
    median = float(busbw.median())
    if len(peak):
        pct = median / (float(peak.iloc[0]) * 1000) * 100
        against = (f", where {rows['link'].iloc[0]} gives about {float(peak.iloc[0]):.3g} GB/s ({pct:.0f}%; "
                   f"{rows['peak_source'].iloc[0]})")
    else:
        pct, against = None, f"; no peak to compare: {rows['peak_source'].iloc[0]}"
    share = rows["sync_share_of_step_time"].dropna()
    step = (f"; inter-node {op} takes {share.median():.0%} of each step (median over ranks, an upper bound: "
            "buckets overlap backward)") if len(share) else ""
    severity = (Severity.WARNING if transport in _SLOW_TRANSPORTS or (pct is not None and pct < NEAR_PEAK * 100)
                else Severity.INFO)
    detail = f"Inter-node {op} {over}: {_gb(median)} bus bandwidth (median over ranks){against}{step}."
    return [Finding.make(severity, FindingKind.FABRIC, sid, FindingKind.FABRIC.title, detail,
                         [x for x in rows["sources"] if x], rows["rank"], transport=transport,
                         busbw_gb_s=median / 1000, pct_of_peak=pct)]


def _host_spread(s, sid, rows: pd.DataFrame) -> list[Finding]:
    by_host = s.meta.ranks_by_host if isinstance(s.meta.ranks_by_host, dict) else {}
    host_of = {int(r): h for h, ranks in by_host.items() for r in ranks}
    sync = rows[rows["op"].isin(SYNC_OPS)].dropna(subset=["busbw_mb_s"])
    per_host = sync.assign(host=sync["rank"].map(lambda r: host_of.get(int(r)) if pd.notna(r) else None)) \
        .dropna(subset=["host"]).groupby("host")["busbw_mb_s"].median()
    if len(per_host) < 2:
        return []
    fast, slow = per_host.idxmax(), per_host.idxmin()
    if per_host[slow] >= HOST_SYNC_SPREAD * per_host[fast]:
        return []
    ranks = by_host.get(slow, [])
    return [Finding.make(FindingKind.HOST_SLOWER_SYNC.severity, FindingKind.HOST_SLOWER_SYNC, sid,
                         FindingKind.HOST_SLOWER_SYNC.title,
                         f"The ranks of {slow} sync at {_gb(per_host[slow])} bus bandwidth (median), those of {fast} "
                         f"at {_gb(per_host[fast])}: {per_host[slow] / per_host[fast]:.0%}, below "
                         f"{HOST_SYNC_SPREAD:.0%}. " + ", ".join(f"{h} {_gb(v)}" for h, v in per_host.items()) + ".",
                         [x for x in sync[sync['rank'].isin(ranks)]["sources"] if x], ranks, host=slow)]


def _clock_skew(s, sid) -> list[Finding]:
    clocks = s.meta.clock_offsets if isinstance(s.meta.clock_offsets, dict) else {}
    out = []
    for host, c in sorted(clocks.items()):
        offset, spread = c.get("offset_s"), c.get("uncertainty_s") or 0.0
        if offset is None or abs(offset) <= spread:
            continue
        out.append(Finding.make(FindingKind.CLOCK_SKEW.severity, FindingKind.CLOCK_SKEW, sid,
                                FindingKind.CLOCK_SKEW.title,
                                f"{host}'s clock is {offset:+.6f} s from rank 0's host's (± {spread:.6f} s, measured "
                                f"at start): more than the uncertainty, so its ranks' times are put on rank 0's clock "
                                f"by that offset, good to ± {spread * 1e3:.3g} ms.", [], c.get("ranks") or [],
                                host=host, offset_s=offset, uncertainty_s=spread))
    return out


def _p2p(s, sid) -> list[Finding]:
    by_host = s.meta.ranks_by_host if isinstance(s.meta.ranks_by_host, dict) else {}
    env = nccl_env(s.meta)
    if str(env.get("NCCL_P2P_DISABLE", "")).strip() not in ("1", "true", "yes"):
        return []
    if (s.meta.backend or "").lower() == "gloo" or not (s.meta.gpu_count or 0) > 1:
        return []
    several = [h for h, r in by_host.items() if len(r) > 1] or ([s.meta.hostname] if s.meta.hostname else [])
    return [Finding.make(FindingKind.P2P_DISABLED.severity, FindingKind.P2P_DISABLED, sid,
                         FindingKind.P2P_DISABLED.title,
                         "NCCL_P2P_DISABLE=1 is set: the GPUs of " + (", ".join(several) or "each host")
                         + " exchange data through host shared memory (SHM), not NVLink or PCIe peer-to-peer.")]


def fabric_findings(s, comm: pd.DataFrame) -> list[Finding]:
    """The findings of the module doc for session ``s`` from its communication rows."""
    sid = s.meta.session_id
    out = _clock_skew(s, sid) + _p2p(s, sid)
    rows = comm[(comm["session_id"] == sid) & (comm["scope"] == INTER)] if len(comm) else comm
    if len(rows):
        out += _network(s, sid, rows) + _host_spread(s, sid, rows)
    return out
