"""nccl-tests output: per op and placement (out-of-place / in-place), the bandwidth at the largest
message size of the sweep against the link's peak.

Definitions (``definitions.COMMUNICATION``): the busbw at the largest message size of the sweep,
the smallest size where busbw first reaches ``REACH`` of the sweep's maximum, nccl-tests' own
"# Avg bus bandwidth" (the mean over every size of the table), and busbw at the largest size /
the link's peak. A median over a size sweep means nothing, so none is taken.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from logkit.analysis.kernels.comm_records import file_line
from logkit.analysis.kernels.communication import session_link
from logkit.analysis.kernels.fabric import fabric, scope_of
from logkit.analysis.kernels.groups import session_kind
from logkit.analysis.thresholds import NEAR_PEAK, REACH
from logkit.schema.vocab import SessionKind

NCCL_TESTS_COLUMNS = ["session_id", "op", "placement", "group_size", "sizes", "min_bytes", "max_bytes",
                      "busbw_at_max_size_gb_s", "algbw_at_max_size_gb_s", "time_at_max_size_us",
                      "max_busbw_gb_s", "size_at_80pct_bytes", "avg_busbw_gb_s", "link", "peak_busbw_gb_s",
                      "pct_of_peak", "verdict", "note", "source", "scope", "transport", "peak_source"]

_PLACEMENTS = ("out-of-place", "in-place")
# what bounds a run over several hosts: the NICs, not the GPUs' link (peaks.network_link rows say nic_peak_gb_s)
_NETWORK_CHECK = ("check the network: every NIC in use (NCCL_IB_HCA, 'NET/IB : Using' lines), its rate (ibstat), "
                  "GPUDirect RDMA (NCCL_NET_GDR_LEVEL) and NCCL settings")


def _placement(comm: pd.DataFrame) -> pd.Series:
    for col in ("placement", "source", "origin"):
        if col in comm.columns:
            values = comm[col].astype("object")
            if values.isin(_PLACEMENTS).any():
                return values.where(values.isin(_PLACEMENTS), None)
    return pd.Series([None] * len(comm), index=comm.index, dtype="object")


def _avg_busbw(meta: dict, op: str, table) -> float | None:
    tables = meta.nccl_tests
    if not isinstance(tables, list):
        return None
    hits = [t for t in tables if isinstance(t, dict) and t.get("op") == op]
    if table is not None and table == table:
        exact = [t for t in hits if t.get("table") == table]
        hits = exact or hits
    for t in hits:
        v = t.get("avg_busbw_gb_s")
        if isinstance(v, (int, float)):
            return float(v)
    return None


def nccl_tests_table(session, others=()) -> pd.DataFrame:
    """Per op and placement of an nccl-tests session: ``NCCL_TESTS_COLUMNS`` (see module doc); ``others``:
    the sessions analysed with it, whose NCCL lines may name the network of a run over several hosts."""
    comm = session.comm
    if comm.empty or session_kind(session) != SessionKind.NCCL_TESTS:
        return pd.DataFrame(columns=NCCL_TESTS_COLUMNS)
    frame = pd.DataFrame({
        "op": comm["op"].astype("object").fillna("unknown"), "placement": _placement(comm),
        "table": comm["table"] if "table" in comm.columns else np.nan,
        "size": comm["size_bytes"].astype("float64"), "bus": comm["busbw_mb_s"].astype("float64") / 1000.0,
        "alg": comm["algbw_mb_s"].astype("float64") / 1000.0, "us": comm["duration_ms"].astype("float64") * 1000.0,
        "group": comm["group_size"].astype("float64"), "src": file_line(comm),
    })
    # the whole table's ranks: inter-node where its device table names hosts; a group of one crosses no link
    groups = frame["group"].dropna()
    group = int(groups.max()) if len(groups) else None
    scope = scope_of(session, group)
    link = fabric(session, scope, others, group) if scope is not None else session_link(session, others, group)
    peak = link.get("peak_busbw_gb_s") if link else None
    rows = []
    for (op, table, placement), g in frame.groupby(["op", "table", "placement"], sort=False, dropna=False):
        g = g.dropna(subset=["size"]).sort_values("size", kind="stable")
        if g.empty:
            continue
        last = g.iloc[-1]
        top = g["bus"].max()
        reach = g[g["bus"] >= REACH * top]["size"] if top == top and top > 0 else pd.Series(dtype="float64")
        bus_last = float(last["bus"])
        pct = bus_last / peak * 100.0 if peak else None
        if link is None:
            v, note = "unknown", "GPU model unknown: no reference peak"
        elif not peak:
            v, note = "no reference", link["source"]
        elif pct >= NEAR_PEAK * 100:
            v, note = "bandwidth-bound", (f"{pct:.0f}% of the {link['link']} peak of {peak:g} GB/s at "
                                          f"{last['size'] / 1e6:.4g} MB: the link is the limit")
        else:
            check = (_NETWORK_CHECK if "nic_peak_gb_s" in link else "check the topology (nvidia-smi topo -m), "
                     "NVLink/PCIe health and NCCL settings")
            v, note = "below peak", (f"below peak at large messages: {pct:.1f}% of the {link['link']} peak of "
                                     f"{peak:g} GB/s at {last['size'] / 1e6:.4g} MB: {check}")
        at_top = len(reach) and reach.iloc[0] == last["size"]
        if at_top and len(g) > 1:
            note += "; busbw still rising at the largest size: the sweep may end before the link saturates"
        rows.append({
            "session_id": session.meta.session_id, "op": op, "placement": placement,
            "group_size": None if last["group"] != last["group"] else int(last["group"]), "sizes": int(len(g)),
            "min_bytes": float(g["size"].iloc[0]), "max_bytes": float(last["size"]),
            "busbw_at_max_size_gb_s": bus_last, "algbw_at_max_size_gb_s": float(last["alg"]),
            "time_at_max_size_us": float(last["us"]), "max_busbw_gb_s": float(top),
            "size_at_80pct_bytes": float(reach.iloc[0]) if len(reach) else None,
            "avg_busbw_gb_s": _avg_busbw(session.meta, op, table), "link": link["link"] if link else None,
            "peak_busbw_gb_s": peak, "pct_of_peak": pct, "verdict": v, "note": note, "source": last["src"],
            "scope": scope, "transport": link.get("transport") if link else None,
            "peak_source": (link.get("peak_source") or link.get("source")) if link else "GPU model unknown: no peak",
        })
    return pd.DataFrame(rows, columns=NCCL_TESTS_COLUMNS)
