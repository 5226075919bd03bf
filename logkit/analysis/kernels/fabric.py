"""What a session's collectives cross: its hosts, each collective's scope and transport, and the peak
that bounds it (the figures in ``peaks``, the one table of hardware).

- ``host_rows``: each host with its ranks, local ranks and GPUs, from our records (every rank's
  session_start: ``meta.ranks_by_host``, ``local_ranks_by_host``, ``gpus_by_host``), the foreign
  logs' facts (NCCL init lines and nccl-tests' device table: ``ranks_by_host``, ``devices``) and the
  GPU samples (each carries its host), its own and those of a ``monitor_gpu`` capture run on one of its
  nodes, found in its folder or one above it (``_joined_captures``: joined by host).
- ``scope_of``: ``inter-node`` when the collective's ranks cannot all be on one host (the session
  spans several and the group is the world, or larger than any host's ranks), ``intra-node`` when
  the session has one node; None where a sub-group's ranks are not known, and for a group of one rank
  (``alone``: it crosses no link).
- a group of one rank (a session of world size 1, or a group_size of 1): its link is ``ALONE``, no peak,
  in ``session_link`` and ``fabric`` alike (the communication rows, the run's links and nccl-tests'
  tables read them).
- ``transport_of``: what the bytes travel over, from what the run can know, strongest first: the
  backend (gloo: ``gloo/TCP``), NCCL's environment (``NCCL_IB_DISABLE``, ``NCCL_NET``,
  ``NCCL_P2P_DISABLE``), the network NCCL's INFO lines name (``Using network IB``, the NICs' link
  layer: ``IB`` or ``RoCE``), the channels' transports (``P2P``, ``SHM``, ``NVLS``), the host's
  InfiniBand devices the emitter found (none: NCCL falls back to ``Socket``), the GPU model's link.
- ``host_sync_busbw``: per host, the median over its ranks of each rank's best bus bandwidth in the
  gradient sync (its fastest record: the step it waited least for the others, so the transfer
  itself), the figure a host slower to sync than another is told by.
- ``fabric``: the link row of a scope (``peaks``), with ``scope``, ``transport``, ``peak_busbw_gb_s``
  and ``peak_source`` (where the peak comes from, or why there is none: never the GPUs' link for a
  collective that crosses hosts).
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis.kernels.peaks import (
    NVLS,
    PCIE_LANE_GB_S,
    achievable_gb_s,
    folder_network,
    gpu_model,
    link_for,
    network_link,
    nic_rate_name,
    pcie,
    spans_hosts,
)
from logkit.schema.meta import SessionMeta
from logkit.schema.vocab import EventKind, SessionKind, on_cpu

INTRA, INTER = "intra-node", "inter-node"
# a collective of a group of one rank (a one-GPU run's DDP or FSDP1, a test on one device) moves no bytes
# between GPUs (its bus factor is 0): no link carries it, so no link's peak applies
ALONE = {"link": "none (a group of one rank)", "peak_busbw_gb_s": None, "alpha_us": None, "scope": None,
         "transport": None, "transport_from": "a group of one rank: nothing leaves the GPU",
         "source": "a group of one rank: the collective moves no bytes between GPUs, so no link's peak applies"}
# NCCL's environment the emitter keeps (system_info's env) that decides a transport
NCCL_ENV = ("NCCL_P2P_DISABLE", "NCCL_IB_DISABLE", "NCCL_NET", "NCCL_SOCKET_IFNAME", "NCCL_SHM_DISABLE",
            "NCCL_NVLS_ENABLE", "GLOO_SOCKET_IFNAME")


def nccl_env(meta) -> dict:
    """NCCL's (and gloo's) environment as the run recorded it (rank 0's system_info env), set keys only."""
    info = meta.system_info if isinstance(meta.system_info, dict) else {}
    env = info.get("env") if isinstance(info.get("env"), dict) else {}
    return {k: str(env[k]) for k in NCCL_ENV if env.get(k) not in (None, "")}


def _on(value) -> bool:
    return str(value).strip().lower() in ("1", "true", "yes")


def _init_hosts(session) -> dict[str, set]:
    """{host: {rank, ...}} NCCL's init lines name (ranks None where the line names none)."""
    ev = session.events
    if ev.empty or "host" not in ev.columns:
        return {}
    inits = ev[ev["kind"] == EventKind.NCCL_INIT]
    out: dict[str, set] = {}
    for host, rank in zip(inits["host"], inits["rank"] if "rank" in inits.columns else [None] * len(inits),
                          strict=True):
        if isinstance(host, str) and host:
            out.setdefault(host, set())
            if not pd.isna(rank):
                out[host].add(int(rank))
    return out


def _joined_captures(session, others) -> list:
    """The GPU captures among ``others`` (``monitor_gpu`` run on a node beside the job) that join
    ``session`` by host: found in its folder or one above it, sampling a host its ranks ran on."""
    from pathlib import PurePath

    from logkit.analysis.kernels.groups import session_kind

    mine = set((session.meta.ranks_by_host or {}) if isinstance(session.meta.ranks_by_host, dict) else ())
    folder = PurePath(str(session.meta.folder)) if session.meta.folder else None
    out = []
    for o in others:
        if o is session or folder is None or not o.meta.folder or session_kind(o) != SessionKind.GPU_CAPTURE:
            continue
        if o.gpu.empty or "host" not in o.gpu.columns or not set(map(str, o.gpu["host"].dropna())) & mine:
            continue
        theirs = PurePath(str(o.meta.folder))
        if theirs == folder or theirs in folder.parents:
            out.append(o)
    return out


def host_rows(session, others=()) -> tuple[dict, ...]:
    """Each host of ``session``: ``{host, ranks, local_ranks, gpus}`` (lists, empty where unknown),
    sorted by host; () where nothing names a host. ``others``: the sessions read with it, whose GPU
    captures of its hosts (``_joined_captures``) add the GPUs they sampled."""
    meta = session.meta
    ranks = {h: list(r) for h, r in (meta.ranks_by_host or {}).items()} if isinstance(meta.ranks_by_host, dict) else {}
    for h in meta.hosts or [] if isinstance(meta.hosts, list) else []:
        ranks.setdefault(str(h), [])
    for h, r in _init_hosts(session).items():
        ranks.setdefault(h, sorted(r))
    local = meta.local_ranks_by_host if isinstance(meta.local_ranks_by_host, dict) else {}
    gpus: dict[str, set] = {}
    for source in (meta.gpus_by_host, meta.devices):
        for h, idx in (source or {}).items() if isinstance(source, dict) else ():
            gpus.setdefault(h, set()).update(int(i) for i in idx if isinstance(i, int))
    for g in [session.gpu, *(o.gpu for o in _joined_captures(session, others))]:
        if g.empty or "host" not in g.columns:
            continue
        for h, idx in g[["host", "gpu"]].dropna().drop_duplicates().itertuples(index=False):
            gpus.setdefault(str(h), set()).add(int(idx))
            ranks.setdefault(str(h), [])
    # a capture that names no host (a blank host column) names none: never a host called ""
    return tuple({"host": h, "ranks": sorted(ranks[h]), "local_ranks": list(local.get(h) or []),
                  "gpus": sorted(gpus.get(h, ()))} for h in sorted(ranks) if h.strip())


def node_count(session) -> int | None:
    """The nodes the session states, else the hosts its logs name (None where none)."""
    if isinstance(session.meta.nodes, int):
        return session.meta.nodes
    return len(host_rows(session)) or None


def scope_of(session, group_size) -> str | None:
    """``intra-node`` / ``inter-node`` for a collective over ``group_size`` ranks (see the module doc)."""
    if alone(session, group_size):
        return None
    nodes = node_count(session)
    if nodes is None:
        return None
    if nodes <= 1:
        return INTRA
    world = session.meta.world_size
    per_host = max((len(h["ranks"]) for h in host_rows(session)), default=0)
    n = None if group_size is None or pd.isna(group_size) or not group_size else group_size
    if n is None or (world and n >= world) or (per_host and n > per_host):
        return INTER
    return None


def _network_kind(meta) -> tuple[str | None, str]:
    """The inter-node transport the NCCL lines name (IB or RoCE by the NICs' link layer, Socket, a
    plugin's name) and what says so."""
    links = {str(n.get("link")) for n in meta.nics or [] if isinstance(n, dict) and n.get("link")}
    net = meta.network
    if net is None:
        for t in meta.transports or {}:
            if "NET/IB" in str(t):
                net = "IB"
            elif "NET/Socket" in str(t):
                net = "Socket"
    if net is None:
        return None, ""
    said = meta.network_from or "NCCL's INFO lines"
    if str(net).startswith("IB"):  # IB, IBext, IBext_v8: the verbs transport; the link layer says which
        return ("RoCE" if links == {"RoCE"} else "IB"), said
    return str(net), said


def transport_of(session, scope: str | None) -> tuple[str | None, str]:
    """(transport, what says so) of a collective of ``scope`` (see the module doc); None where nothing does."""
    meta = session.meta
    env = nccl_env(meta)
    if (meta.backend or "").lower() == "gloo" or on_cpu(meta.mode, meta.gpu_count):
        return "gloo/TCP", "the gloo backend: tensors through host memory"
    if scope == INTER:
        if str(env.get("NCCL_NET", "")).lower() == "socket" or _on(env.get("NCCL_IB_DISABLE")):
            which = "NCCL_NET=Socket" if "NCCL_NET" in env else "NCCL_IB_DISABLE=1"
            return "Socket", f"{which} in the run's environment"
        kind, said = _network_kind(meta)
        if kind is not None:
            return kind, said
        net = (meta.system_info or {}).get("network") if isinstance(meta.system_info, dict) else None
        if isinstance(net, dict) and net.get("infiniband") == []:
            return "Socket", "no InfiniBand device on the host (/sys/class/infiniband is empty): NCCL uses TCP sockets"
        return None, "no NCCL INFO lines, network environment or NIC facts say which network"
    if scope == INTRA:
        if _on(env.get("NCCL_P2P_DISABLE")):
            return "SHM", "NCCL_P2P_DISABLE=1 in the run's environment: GPU to GPU through host shared memory"
        ways = " ".join(str(t) for t in meta.transports or {})
        if "NVLS" in ways:
            return "NVLS", "NCCL's channel lines (NVLS)"
        nvml = [g for g in meta.gpus or [] if isinstance(g, dict) and isinstance(g.get("nvlinks"), int)]
        if nvml and len(meta.gpus or []) > 1:  # NVML's count of active NVLinks on each GPU, where recorded
            if all(g["nvlinks"] > 0 for g in nvml):
                return "NVLink", f"NVML: {min(g['nvlinks'] for g in nvml)}+ active NVLinks per GPU"
            return "PCIe P2P", "NVML: no active NVLink on some GPU"
        row = link_for(gpu_model(session), meta.backend)
        link = str(row.get("link")) if row else ""
        if "P2P" in ways or row is not None:
            said = "NCCL's channel lines (P2P) and " if "P2P" in ways else ""
            if link.startswith("NVLink"):
                return "NVLink", f"{said}the GPU model's link ({row['gpu_model']}: {link})"
            if link.startswith("PCIe"):
                return "PCIe P2P", f"{said}the GPU model's link ({row['gpu_model']}: {link})"
        if "SHM" in ways:
            return "SHM", "NCCL's channel lines (SHM)"
    return None, "the collective's ranks are not known to be on one host or on several"


def _socket_rate(meta, env: dict) -> tuple[float | None, str]:
    """The Ethernet rate (Gb/s) of the interface sockets go over, from the emitter's interface speeds:
    the one NCCL_SOCKET_IFNAME / GLOO_SOCKET_IFNAME names, else the host's only one that is up."""
    net = (meta.system_info or {}).get("network") if isinstance(meta.system_info, dict) else None
    speeds = net.get("interfaces") if isinstance(net, dict) and isinstance(net.get("interfaces"), dict) else {}
    speeds = {k: v for k, v in speeds.items() if isinstance(v, (int, float)) and v > 0}
    named = env.get("NCCL_SOCKET_IFNAME") or env.get("GLOO_SOCKET_IFNAME")
    if named:
        prefixes = [p.lstrip("=") for p in named.split(",") if p and not p.startswith("^")]
        hits = [v for k, v in speeds.items() if any(k.startswith(p) for p in prefixes)]
        if hits:
            return max(hits) / 1000.0, f"interface {named}, as the host reports its speed"
    if len(speeds) == 1:
        (name, speed), = speeds.items()
        return speed / 1000.0, f"{name}, the host's only network interface"
    return None, ""


def _pcie_of(meta) -> dict | None:
    """The PCIe row of the link NVML reported for the GPUs (session_start's gpus: ``pcie_gen``, ``pcie_width``,
    the slowest GPU's), where it did and it is in the table."""
    links = [(g.get("pcie_gen"), g.get("pcie_width")) for g in meta.gpus or [] if isinstance(g, dict)]
    links = [(gen, width) for gen, width in links if gen in PCIE_LANE_GB_S and isinstance(width, int) and width > 0]
    if not links:
        return None
    gen, width = min(links, key=lambda gw: PCIE_LANE_GB_S[gw[0]] * gw[1])
    row = pcie(gen, width, "", "GPUs", " as NVML reports it")
    return {**row, "source": row["source"].replace("NVIDIA datasheet GPUs: ", "", 1)}


def session_link(session, others=(), group_size=None) -> dict | None:
    """The reference link of ``session``: a ``COMMUNICATION_PEAKS`` row, ``CPU_LINK``, ``GLOO_LINK``,
    the network between hosts where the session spans several (``peaks.spans_hosts``: NCCL's init
    lines, nccl-tests' device table): its peak where the logs name a rate, else a row without a peak,
    never the GPUs' link (the network of ``others`` of its folder that share a host, where its own logs
    name none: ``peaks.folder_network``); ``ALONE`` for a group of one rank (``group_size`` 1, or none given
    and a session of one rank: no link, no peak); or None (GPU model unknown)."""
    if alone(session, group_size):
        return dict(ALONE)
    ev = session.events
    inits = ev[ev["kind"] == EventKind.NCCL_INIT] if not ev.empty and "host" in ev.columns else ev.iloc[:0]
    if spans_hosts(session.meta, len(inits["host"].dropna().unique()) if len(inits) else 0):
        named = network_link(session.meta)  # the network the logs name, its peak where they give a rate
        if named is not None:
            return named
        borrowed = folder_network(session.meta, others)
        if borrowed is not None:
            keys, sid = borrowed
            named = network_link(SessionMeta(keys))
            return {**named, "source": f"{named['source']} (from session {sid}, the same folder and hosts)"}
        nets = inits["network"].dropna().unique() if "network" in inits.columns else []
        net = f" ({', '.join(map(str, nets))})" if len(nets) else ""
        return {"link": f"inter-node network{net}", "peak_busbw_gb_s": None, "alpha_us": None,
                "source": "several hosts: the network, not the GPUs' link, bounds the collectives"}
    meta = session.meta
    cpu = bool(on_cpu(meta.mode, meta.gpu_count))
    # gloo without a GPU model is a CPU run too: link_for says so
    return link_for(gpu_model(session), str(meta.backend or "") or None, cpu=cpu)


def fabric(session, scope: str | None, others=(), group_size=None) -> dict:
    """The link row bounding a collective of ``scope``: ``link``, ``scope``, ``transport``,
    ``peak_busbw_gb_s`` (None where unknown) and ``peak_source`` (where it comes from, or why there is none),
    plus the row's ``alpha_us`` and ``source`` the verdicts read; ``ALONE`` for a group of one rank (as ``session_link``)."""
    meta = session.meta
    if alone(session, group_size):
        return dict(ALONE)
    transport, said = transport_of(session, scope)
    if scope == INTER and transport is None and (borrowed := folder_network(meta, others)) is not None:
        # the NCCL INFO lines of the same job beside it (a launcher capture of the same folder and hosts)
        kind, where = _network_kind(SessionMeta(borrowed[0]))
        if kind is not None:
            transport, said = kind, f"{where or 'NCCL INFO lines'} (session {borrowed[1]}, the same folder and hosts)"
    base = session_link(session, others) or {}
    row = dict(base)
    if scope == INTER and transport in ("Socket", "gloo/TCP") and row.get("peak_busbw_gb_s") is None:
        rate, where = _socket_rate(meta, nccl_env(meta))
        peak, how = achievable_gb_s(transport, rate)
        name = f"{nic_rate_name(transport, rate)} ({where})" if rate is not None else f"{transport} between hosts"
        row.update(link=name, peak_busbw_gb_s=peak,
                   alpha_us=None, source=how if peak is not None else (
                       f"{transport} between hosts: the logs name no interface speed, so no peak"))
    elif scope == INTRA and transport == "NVLS":
        row = dict(NVLS)
    elif scope == INTRA and transport == "SHM":
        row.update(link="SHM (host memory)", peak_busbw_gb_s=None, alpha_us=None,
                   source="SHM: GPU to GPU through host memory, so no GPU link's peak applies")
    elif scope == INTRA and transport == "PCIe P2P" and (measured := _pcie_of(meta)) is not None:
        row = measured
    elif scope == INTER and row.get("peak_busbw_gb_s") is None and not row:
        named = network_link(meta)
        row = named or {"link": "inter-node network", "peak_busbw_gb_s": None, "alpha_us": None,
                        "source": "several hosts: the logs name no network, so no peak (never the GPUs' link)"}
    row["scope"], row["transport"] = scope, transport
    row["transport_from"] = said
    row["peak_source"] = row.get("source") if row else "no link known: no peak"
    return row


def alone(session, group_size) -> bool:
    """Whether a collective over ``group_size`` ranks (None: the world) is a group of one rank."""
    if group_size is not None and not pd.isna(group_size) and group_size:
        return int(group_size) == 1
    return session.meta.world_size == 1


def host_sync_busbw(session, ops=("gradient_sync", "allreduce", "all_reduce")) -> dict[str, float]:
    """{host: median over its ranks of each rank's best busbw (MB/s) in ``ops``} (see the module doc);
    {} where the records name no rank or no host's ranks are known."""
    comm, by_host = session.comm, session.meta.ranks_by_host
    if comm.empty or not isinstance(by_host, dict) or "busbw_mb_s" not in comm.columns:
        return {}
    rows = comm[comm["op"].isin(ops)].dropna(subset=["rank", "busbw_mb_s"])
    best = rows.groupby("rank")["busbw_mb_s"].max()
    out = {}
    for host, ranks in by_host.items():
        values = best.reindex([r for r in ranks]).dropna()
        if len(values):
            out[host] = float(values.median())
    return out
