"""Where each rank of one of our sessions ran: its host, local rank and GPUs, and each host's clock.

Every rank's ``session_start`` names its ``hostname`` and ``local_rank``, the GPUs it saw (``gpus``)
and its host's clock offset to rank 0's host (``clock_offset_s`` and its uncertainty, measured at
start). Rank 0's record alone says nothing of the other hosts, so every rank's is read here: the hosts
(stated), their count (the nodes: stated, every rank's record was read), ``ranks_by_host``,
``local_ranks_by_host``, ``gpus_by_host`` and ``clock_offsets``. A rank whose stream has no
session_start (killed before it) adds nothing: the nodes are then a lower bound, and say so.
"""

from __future__ import annotations

from pathlib import Path

from logkit.ingest.jsonl_lines import Stream
from logkit.ingest.mapping import TYPE
from logkit.schema.meta import SessionMeta
from logkit.schema.records import SESSION_START
from logkit.schema.values import as_float, as_int

__all__ = ["placement_meta"]


def _start(stream: Stream) -> tuple[int | None, dict | None]:
    for line, record in stream.records:
        if TYPE.get(record) == SESSION_START.type:
            return line, record
    return None, None


def placement_meta(streams: dict[int, Stream], rank_files: dict) -> SessionMeta:
    """The placement facts of our streams (see the module doc): a ``SessionMeta`` to merge, empty where
    no session_start names a host."""
    meta = SessionMeta()
    ranks: dict[str, list[int]] = {}
    local: dict[str, list[int | None]] = {}
    gpus: dict[str, set[int]] = {}
    clocks: dict[str, dict] = {}
    first_where = None
    for rank in sorted(streams):
        line, start = _start(streams[rank])
        host = start.get("hostname") if start else None
        if not isinstance(host, str) or not host:
            continue
        first_where = first_where or f"{Path(rank_files.get(rank) or '').name}:{line}"
        ranks.setdefault(host, []).append(rank)
        local.setdefault(host, []).append(as_int(start.get("local_rank")))
        for g in start.get("gpus") or []:
            index = as_int(g.get("index")) if isinstance(g, dict) else None
            if index is not None:
                gpus.setdefault(host, set()).add(index)
        offset, spread = as_float(start.get("clock_offset_s")), as_float(start.get("clock_offset_uncertainty_s"))
        if offset is not None:
            held = clocks.setdefault(host, {"offset_s": offset, "uncertainty_s": spread, "ranks": []})
            held["ranks"].append(rank)
            # the rank that measured it most tightly speaks for its host (one clock per host)
            if spread is not None and (held["uncertainty_s"] is None or spread < held["uncertainty_s"]):
                held["offset_s"], held["uncertainty_s"] = offset, spread
    if not ranks:
        return meta
    hosts = sorted(ranks)
    said = f"the hostname of {sum(map(len, ranks.values()))} rank(s)' session_start records"
    missing = len(streams) - sum(map(len, ranks.values()))
    meta.state("hosts", hosts, "stated", said, first_where)
    if missing:
        meta.state("nodes", len(hosts), "inferred (lower bound)",
                   f"{said}; {missing} stream(s) without one may run on other hosts", first_where)
    else:
        meta.state("nodes", len(hosts), "stated", f"{said}, every rank's", first_where)
    meta.ranks_by_host = {h: ranks[h] for h in hosts}
    meta.local_ranks_by_host = {h: local[h] for h in hosts}
    if gpus:
        meta.gpus_by_host = {h: sorted(gpus[h]) for h in hosts if h in gpus}
    if clocks:
        meta.clock_offsets = {h: clocks[h] for h in hosts if h in clocks}
    return meta
