"""Findings about the network between hosts and the hosts' clocks, in plain words (issue 26).

- ``fabric``: what the collectives that cross hosts travel over (the communication rows' ``transport``
  and what says so), their bus bandwidth (median over ranks) against what that link gives
  (``peak_busbw_gb_s`` and ``peak_source``, or that no peak is known), and the share of each step they
  take (``sync_share_of_step_time``, an upper bound). Warning when they go over TCP sockets or below
  ``NEAR_PEAK`` of their peak, else info.
- ``p2p_disabled``: NCCL_P2P_DISABLE=1 where a host runs several ranks.
- ``host_slower_sync``: a host whose ranks' best bus bandwidth in the gradient sync
  (``fabric.host_sync_busbw``) is below ``HOST_SYNC_SPREAD`` of the fastest host's. A rank's collective time includes its wait for the
  last rank to arrive, so where a straggler is found (``stragglers``), its waiting, not the link,
  explains the spread, and none is reported.
- ``clock_skew``: a host whose clock offset to rank 0's host exceeds its uncertainty.
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis.kernels.communication import SYNC_OPS
from logkit.analysis.kernels.fabric import INTER, host_sync_busbw, nccl_env, transport_of
from logkit.analysis.results import Finding
from logkit.analysis.thresholds import HOST_SYNC_SPREAD, NEAR_PEAK
from logkit.schema.findings import FindingKind, Severity

_SLOW_TRANSPORTS = ("Socket", "gloo/TCP")
_WORDS = {"Socket": "TCP sockets", "gloo/TCP": "TCP sockets", "IB": "InfiniBand", "RoCE": "RoCE"}


def _files_of(s, ranks) -> list[str]:
    files = s.meta.files or []
    return [str(f).rsplit("/", 1)[-1] for f in files if any(str(f).endswith(f"_rank{r}.jsonl") for r in ranks)]


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
        against = f", where {rows['link'].iloc[0]} gives about {float(peak.iloc[0]):.3g} GB/s ({pct:.0f}% of it)"
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


def _host_spread(s, sid) -> list[Finding]:
    per_host = pd.Series(host_sync_busbw(s), dtype="float64")
    if len(per_host) < 2:
        return []
    fast, slow = per_host.idxmax(), per_host.idxmin()
    if per_host[slow] >= HOST_SYNC_SPREAD * per_host[fast]:
        return []
    ranks = (s.meta.ranks_by_host or {}).get(slow, [])
    return [Finding.make(FindingKind.HOST_SLOWER_SYNC.severity, FindingKind.HOST_SLOWER_SYNC, sid,
                         FindingKind.HOST_SLOWER_SYNC.title,
                         f"The ranks of {slow} sync at {_gb(per_host[slow])} bus bandwidth at best (median over its "
                         f"ranks of each one's fastest gradient sync), those of {fast} at {_gb(per_host[fast])}: "
                         f"{per_host[slow] / per_host[fast]:.0%}, below {HOST_SYNC_SPREAD:.0%}. "
                         + ", ".join(f"{h} {_gb(v)}" for h, v in per_host.items()) + ".",
                         _files_of(s, ranks), ranks, host=slow)]


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


def fabric_findings(s, comm: pd.DataFrame, strag: pd.DataFrame | None = None) -> list[Finding]:
    """The findings of the module doc for session ``s`` from its communication rows (and its stragglers)."""
    sid = s.meta.session_id
    out = _clock_skew(s, sid) + _p2p(s, sid)
    rows = comm[(comm["session_id"] == sid) & (comm["scope"] == INTER)] if "scope" in comm.columns else comm[:0]
    if len(rows):
        out += _network(s, sid, rows)
    mine = strag[strag["session_id"] == sid] if strag is not None and len(strag) else None
    waiting = mine is not None and bool(mine["is_straggler"].fillna(False).astype(bool).any())
    if not waiting:
        out += _host_spread(s, sid)
    return out
