"""Reference figures of hardware: the link between GPUs of one host, and a GPU's peak FLOP/s.

``COMMUNICATION_PEAKS``: one row per GPU model (matched when every word of ``match`` is a
substring of the lower-case device name; most specific rows first): the link its GPUs of one host talk over, the
bus bandwidth NCCL achieves over it per direction in GB/s (10^9 bytes/s, the unit of nccl-tests' busbw: the line
rate less NCCL's protocol overhead, ``LINK_SHARE``; the line rate beside it), the
per-call latency ``alpha_us`` of a collective over it (alpha-beta model), and where the
figure comes from. A measured busbw is compared with ``peak_busbw_gb_s``; a message is called
latency-bound when it is smaller than ``half_peak_bytes = alpha x peak`` (the size at which
the alpha-beta model t(m) = alpha + m / peak reaches half the peak bandwidth).

``GPU_PEAK_TFLOPS``: dense (no sparsity) BF16/FP16 tensor-core peak per GPU, vendor datasheets.

``NIC_PEAKS`` / ``network_link``: the network between hosts, which bounds a collective that spans
several nodes (NVLink does not). One NIC's peak per direction is its link rate / 8 (Gb/s ->
GB/s); a node's is that times its NICs (NCCL spreads channels over them), the reference for
a multi-node busbw. The rate comes from the log where it names it (``ibstat``/``ibstatus``'s
rate, read into ``meta.link_speed_gbps``), or from the fabric's one rate (HPE Slingshot 11:
the ``cxi`` provider); InfiniBand, RoCE, EFA and TCP sockets come in many rates, so without one
the peak is unknown (None), and says so.
"""

from __future__ import annotations

_NV = "NVIDIA datasheet"
# What NCCL achieves of a GPU link's line rate: "450GB/s is the line rate. With the protocol overhead (~20%)
# NCCL can get an effective NVLink bandwidth of 370GB/s" (NCCL's maintainer on H100, NVIDIA/nccl-tests#212).
# The same protocol overhead is taken for every NVLink generation and for PCIe peer-to-peer.
LINK_SHARE = 370.0 / 450.0
_SHARE_SOURCE = "achievable: NCCL's protocol overhead (~20%) leaves 370 of NVLink 4's 450 GB/s (NVIDIA/nccl-tests#212)"
# NVLink by generation: line rate per GPU per direction (GB/s), NVIDIA datasheets (bidirectional / 2)
NVLINK_LINE_RATE = {2: 150.0, 3: 300.0, 4: 450.0, 5: 900.0}
# NVLink SHARP (NVLS, NVSwitch 3 with H100/H200): all_reduce busbw on 8 GPUs, not the wire's bandwidth
NVLS = {"link": "NVLS (NVLink 4 SHARP)", "peak_busbw_gb_s": 480.0, "alpha_us": 20.0,
        "source": "NVLink SHARP all_reduce: 'on 8 GPUs, you should reach a peak busBw of ~480GB/s' (NCCL's "
                  "maintainer, NVIDIA/nccl-tests#212)"}
# PCIe by generation: GB/s per lane per direction after 128b/130b encoding (PCI-SIG: 8, 16, 32 GT/s)
PCIE_LANE_GB_S = {3: 0.985, 4: 1.969, 5: 3.938}


def nvlink(gen: int, match: str, model: str, datasheet: str) -> dict:
    """A ``COMMUNICATION_PEAKS`` row of NVLink generation ``gen``: its line rate and what NCCL achieves of it."""
    line = NVLINK_LINE_RATE[gen]
    return {"match": match, "gpu_model": model, "link": f"NVLink {gen} ({model})", "line_rate_gb_s": line,
            "peak_busbw_gb_s": round(line * LINK_SHARE, 1), "alpha_us": 20.0,
            "source": f"{datasheet}: NVLink {gen}, {line:g} GB/s per direction line rate; {_SHARE_SOURCE}"}


def pcie(gen: int, width: int, match: str, model: str, note: str) -> dict:
    """A ``COMMUNICATION_PEAKS`` row of GPUs that talk over PCIe generation ``gen`` x ``width``."""
    line = PCIE_LANE_GB_S[gen] * width
    return {"match": match, "gpu_model": model, "link": f"PCIe {gen}.0 x{width}", "line_rate_gb_s": round(line, 2),
            "peak_busbw_gb_s": round(line * LINK_SHARE, 1), "alpha_us": 15.0,
            "source": f"{_NV} {model}: PCIe Gen{gen} x{width}{note}, {line:.3g} GB/s per direction line rate "
                      f"(PCI-SIG); {_SHARE_SOURCE}"}


COMMUNICATION_PEAKS: tuple[dict, ...] = (
    nvlink(5, "b200", "B200", f"{_NV} (DGX B200)"),
    nvlink(4, "h200", "H200", f"{_NV} H200"),
    pcie(5, 16, "h100 pcie", "H100 PCIe", " (without NVLink bridge)"),
    nvlink(4, "h100", "H100 SXM", f"{_NV} H100 SXM"),
    pcie(4, 16, "a100 pcie", "A100 PCIe", " (without NVLink bridge)"),
    nvlink(3, "a100", "A100 SXM", f"{_NV} A100 SXM"),
    nvlink(2, "v100", "V100 SXM2", f"{_NV} V100 SXM2"),
    pcie(4, 16, "l40s", "L40S", ", no NVLink"),
    pcie(4, 16, "l40", "L40", ", no NVLink"),
    pcie(4, 16, "l4", "L4", ", no NVLink"),
    pcie(4, 16, "a10", "A10 / A10G", ", no NVLink"),
    pcie(4, 16, "4090", "RTX 4090", ", no NVLink, no peer-to-peer (traffic goes through host memory)"),
    pcie(4, 16, "3090", "RTX 3090", " (an NVLink bridge is not assumed)"),
    pcie(4, 16, "a6000", "RTX A6000", " (an NVLink bridge is not assumed)"),
    pcie(3, 16, "t4", "T4", ""),
)
CPU_LINK: dict = {"match": None, "gpu_model": None, "link": "loopback/gloo (CPU)", "peak_busbw_gb_s": None,
                  "alpha_us": None, "source": "no reference peak: gloo over loopback is bound by memory "
                                              "copies and software overhead, not by a link"}
GLOO_LINK: dict = {"match": None, "gpu_model": None, "link": "gloo (TCP / shared memory)", "peak_busbw_gb_s": None,
                   "alpha_us": None, "source": "no reference peak: gloo moves tensors through host memory over TCP "
                                               "sockets or shared memory, never over NVLink or PCIe peer-to-peer, "
                                               "so no GPU link peak applies (use the nccl backend on GPUs)"}

# Dense BF16/FP16 tensor-core TFLOP/s per GPU (no sparsity), vendor datasheets.
GPU_PEAK_TFLOPS: tuple[tuple[str, str, float], ...] = (
    ("b200", "B200", 2250.0),
    ("h200", "H200", 989.0),
    ("h100 pcie", "H100 PCIe", 756.0),
    ("h100", "H100 SXM", 989.0),
    ("a100", "A100", 312.0),
    ("v100", "V100", 125.0),
    ("l40s", "L40S", 362.0),
    ("l40", "L40", 181.0),
    ("l4", "L4", 121.0),
    ("a10g", "A10G", 70.0),
    ("a10", "A10", 125.0),
    ("4090", "RTX 4090", 165.0),
    ("3090", "RTX 3090", 71.0),
    ("a6000", "RTX A6000", 155.0),
    ("t4", "T4", 65.0),
)


# Named rates of InfiniBand 4x links (Gb/s), to say which generation a logged rate is.
IB_GENERATIONS = {40.0: "QDR", 56.0: "FDR", 100.0: "EDR", 200.0: "HDR", 400.0: "NDR", 800.0: "XDR"}
# Fabrics whose NIC has one rate: provider (as NCCL's OFI plugin names it) -> (fabric, Gb/s, source)
NIC_PEAKS: dict[str, tuple[str, float, str]] = {
    "cxi": ("HPE Slingshot 11", 200.0, "HPE Slingshot 11 NIC (Cassini, the libfabric 'cxi' provider): "
                                       "200 Gb/s per NIC = 25 GB/s per direction"),
}
_UNKNOWN_RATE = {
    "IB": "InfiniBand HCAs run at 100-800 Gb/s (EDR to XDR) and the log names no rate (ibstat's 'Rate')",
    "RoCE": "RoCE NICs run at 25-400 Gb/s and the log names no rate",
    "Socket": "NCCL over TCP sockets: bound by the hosts' Ethernet NICs, whose speed the log does not name",
    "efa": "AWS EFA: 100-3200 Gb/s per instance, depending on the instance type, which the log does not name",
}


# --- what a network achieves (issue 26) ---------------------------------------------------------------
# A collective's bus bandwidth over a NIC reaches a fraction of its line rate (headers, the transport's
# copies): per fabric, the fraction and the measurement it rests on. A ring across nodes sends every
# byte of its busbw through the nodes' NICs, so the node's NICs together bound it (NCCL spreads its
# channels over them); on two nodes NCCL's tree algorithms can go past that bound (NVIDIA/nccl-tests#196).
ACHIEVABLE: dict[str, tuple[float, str]] = {
    "IB": (0.91, "InfiniBand: nccl-tests all_reduce between 2 HGX A100 nodes over four 200 Gb/s HDR NICs "
                 "reached 91 GB/s busbw, 91% of the 100 GB/s line rate (NVIDIA/nccl-tests#100)"),
    "RoCE": (0.91, "RoCE: RDMA verbs as InfiniBand, the same share of the line rate; 75% over 8 x 100 Gb RoCE "
                   "was called 'a bit low' by NCCL's maintainers (NVIDIA/nccl#495)"),
    "Socket": (0.8, "TCP sockets: the kernel's copies cost about a fifth of the line rate; NCCL's socket "
                    "transport saturates a 10 Gb/s NIC at about 1 GB/s of payload (google/nccl-fastsocket#2)"),
}
ACHIEVABLE["gloo/TCP"] = (ACHIEVABLE["Socket"][0], "gloo over TCP: " + ACHIEVABLE["Socket"][1])
# Ethernet's named rates (Gb/s), to say which a logged interface speed is
ETHERNET_RATES = (1.0, 10.0, 25.0, 40.0, 50.0, 100.0, 200.0, 400.0, 800.0)


def nic_rate_name(kind: str, rate_gbps: float) -> str:
    """``"200 Gb/s HDR"`` for InfiniBand, ``"100 GbE"`` for Ethernet (RoCE, sockets), else ``"N Gb/s"``."""
    if kind == "IB" and rate_gbps in IB_GENERATIONS:
        return f"{rate_gbps:g} Gb/s {IB_GENERATIONS[rate_gbps]}"
    if kind in ("RoCE", "Socket", "gloo/TCP") and rate_gbps in ETHERNET_RATES:
        return f"{rate_gbps:g} GbE"
    return f"{rate_gbps:g} Gb/s"


def achievable_gb_s(kind: str | None, rate_gbps: float | None) -> tuple[float | None, str]:
    """(the bus bandwidth one NIC of ``kind`` at ``rate_gbps`` achieves in GB/s, where it comes from);
    None and why where the fabric or its rate is unknown."""
    if rate_gbps is None:
        return None, _UNKNOWN_RATE.get(kind or "", "the logs name no link rate")
    if kind not in ACHIEVABLE:
        return None, f"{kind or 'an unknown fabric'} at {rate_gbps:g} Gb/s: no measured share of its line rate"
    share, why = ACHIEVABLE[kind]
    return rate_gbps / 8.0 * share, (f"{nic_rate_name(kind, rate_gbps)} = {rate_gbps / 8:g} GB/s line rate x "
                                     f"{share:g} achievable ({why})")


def network_link(meta: dict) -> dict | None:
    """The reference link of a session that spans hosts, from what its logs say (``meta``:
    ``network``, ``nics``, ``nic_provider``, ``nic_count``, ``link_speed_gbps``): a row like
    ``COMMUNICATION_PEAKS``' (``link``, ``peak_busbw_gb_s`` of a node's NICs or None,
    ``nic_peak_gb_s``, ``nics``, ``source``); None where the logs name no network at all."""
    network, provider = meta.network, meta.nic_provider
    nics = [n for n in meta.nics or [] if isinstance(n, dict)]
    links = sorted({str(n.get("link")) for n in nics if n.get("link")})
    count = meta.nic_count or (len(nics) if nics else None)
    rate = meta.link_speed_gbps
    if not (network or provider or nics or rate):
        return None
    kind = links[0] if len(links) == 1 else ("Socket" if network == "Socket" else None)
    name = NIC_PEAKS[provider][0] if provider in NIC_PEAKS else (kind or network or "network")
    if rate is None and provider in NIC_PEAKS:
        rate, source = NIC_PEAKS[provider][1], NIC_PEAKS[provider][2]
        nic_peak, how = achievable_gb_s("RoCE", rate)  # Slingshot: RDMA over Ethernet, as RoCE
        source += f"; {how}" if nic_peak is not None else ""
    elif rate is not None:
        nic_peak, source = achievable_gb_s(kind or ("IB" if str(network).startswith("IB") else network), rate)
        source = f"the log names the link rate: {source}"
    else:
        nic_peak = None
        source = _UNKNOWN_RATE.get(provider or "", _UNKNOWN_RATE.get(kind or "", "the log names no link rate"))
    peak = nic_peak * count if nic_peak is not None and count else nic_peak
    link = f"{name}" + (f", {count} NIC(s)" if count else "") + (f" at {rate:g} Gb/s" if rate is not None else "")
    return {"match": None, "gpu_model": None, "link": link, "peak_busbw_gb_s": peak, "nic_peak_gb_s": nic_peak,
            "nics": count, "alpha_us": None,
            "source": source + ("" if peak is None else f"; x {count} NIC(s) per node" if count else "")}


def spans_hosts(meta, init_hosts: int = 0) -> bool:
    """Whether a session's collectives cross hosts, so the network between them, not the GPUs' link
    of one host, bounds them: NCCL's init lines name several hosts (``init_hosts``), or the session
    states several nodes (``meta.nodes``: nccl-tests' device table, NCCL's nNodes). The hosts named
    count only where no node count is stated: several hosts each running a test of its own (nccl-tests
    without MPI) name two hosts and one node per collective."""
    if isinstance(meta.nodes, int):
        return max(init_hosts, meta.nodes) > 1
    hosts = len(meta.hosts) if isinstance(meta.hosts, list) else 0
    return max(init_hosts, hosts) > 1


_NETWORK_KEYS = ("network", "nic_provider", "nics", "nic_count", "link_speed_gbps")


def folder_network(meta, others) -> tuple[dict, str] | None:
    """The network another session of the same folder names, for a session spanning hosts whose own
    logs name none (nccl-tests output beside the NCCL_DEBUG=INFO log of the same job): the first such
    session that shares a host with it, as (its network keys, its session id); None where none does.
    Sharing a host keeps a capture of some other cluster out."""
    hosts = set(meta.hosts or [])
    if not hosts or not meta.folder:
        return None
    for other in others:
        m = other.meta
        if m is meta or m.folder != meta.folder or not hosts & set(m.hosts or []):
            continue
        if network_link(m) is not None:
            return {k: m.get(k) for k in _NETWORK_KEYS}, str(m.session_id)
    return None


def link_for(gpu_name: str | None, backend: str | None = None, cpu: bool = False) -> dict | None:
    """The ``COMMUNICATION_PEAKS`` row for a device name; ``CPU_LINK`` for a CPU run; ``GLOO_LINK`` for
    gloo on GPUs (gloo never uses the GPUs' link); else None (model unknown or not in the table)."""
    if cpu or (backend or "").lower() == "gloo" and not gpu_name:
        return CPU_LINK
    if (backend or "").lower() == "gloo":
        return GLOO_LINK
    name = (gpu_name or "").lower()
    if not name:
        return None
    for row in COMMUNICATION_PEAKS:
        if all(token in name for token in row["match"].split()):
            return row
    return None


def peak_tflops_for(gpu_name: str | None) -> tuple[str, float] | None:
    """(model, dense BF16 TFLOP/s) of a device name, or None when the model is not in the table."""
    name = (gpu_name or "").lower()
    for match, model, tflops in GPU_PEAK_TFLOPS if name else ():
        if all(token in name for token in match.split()):
            return model, tflops
    return None


def half_peak_bytes(link: dict | None) -> float | None:
    """Message size (bytes) at which the link's alpha-beta model reaches half its peak bandwidth."""
    if not link or link.get("peak_busbw_gb_s") is None or link.get("alpha_us") is None:
        return None
    return link["alpha_us"] * 1e-6 * link["peak_busbw_gb_s"] * 1e9


def gpu_model(session) -> str | None:
    """The GPU's name as the session logs it: session_start's gpus, summary.json's gpus, or the gpu
    frame's gpu_name (a GPU capture)."""
    for g in session.meta.gpus or []:
        if isinstance(g, dict) and g.get("name"):
            return str(g["name"])
    doc = session.meta.summary
    for g in (doc.get("gpus") or []) if isinstance(doc, dict) else []:
        if isinstance(g, dict) and g.get("name"):
            return str(g["name"])
    if "gpu_name" in session.gpu.columns:
        names = session.gpu["gpu_name"].dropna()
        if not names.empty:
            return str(names.iloc[0])
    return None
