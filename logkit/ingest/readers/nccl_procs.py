"""What the NCCL_DEBUG lines of a capture say about its processes, put together.

Each process (host and pid of its lines) gathers what its lines tell: its communicators
(``Init START`` / ``Init COMPLETE`` lines and the newer ``nRanks .. nNodes .. localRanks ..``
line), the network and NICs it uses, its rank where only channel or tree lines name it (a rank per
device where one process drives several GPUs, nccl-tests' ``-g 8``), and the rank its launcher
prefix gave. At the end (``finish``) every process becomes one ``nccl_init`` event per communicator
(per device, for such a process) (``init``: complete, start, abort, or None where no init line was seen:
the log may stop before ``Init COMPLETE``) and the whole capture gives meta: ``world_size``
(NCCL's nranks: stated; else the ranks a ring lists: derived; else the highest rank a channel or
tree line names: a lower bound), ``nodes`` (NCCL's nNodes, else the hosts seen, a lower bound), ``hosts``,
``ranks_by_host``, ``devices`` (CUDA devices per host: its init lines' and ``Init timings`` lines' cudaDev, else
every ``[dev]`` its lines carry), ``local_ranks``, ``network`` (``Using network
X``; where IB was looked for and not found first, ``network_fallback`` says so), ``nics``,
``transports`` (connections per transport of the channel lines: ``via P2P/IPC/read`` counts as
``P2P/IPC``, ``via NET/IB/0/GDRDMA`` as ``NET/IB``), ``nic_provider``, ``nic_count``,
``cuda_driver_version``; each fact with its provenance (``SessionMeta.state``: the file and line).

Lines torn by processes writing without line buffering can lose the head of a host name
(``5c0s31b0n0:307469`` for ``x3005c0s31b0n0:307469``) or carry another record's tail before it
(``x3005x3005c0s31b0n0:307469``): a process whose host name and another's (same pid) end one
with the other is joined to the one more lines name; a process all of whose records were glued onto
lines other records began, whose host name ends with a host that begins a line of its own
(``... rank 1 nrc0b58536a5f1:324666:...``: the tail of ``nranks`` before ``c0b58536a5f1``), is that host's.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from logkit.ingest.readers.base import Read
from logkit.schema.vocab import EventKind

_VIA_NET = re.compile(r"^NET/(?P<net>.+?)/\d+(?:/.*)?$")
# A channel's transport as NCCL names it (transport/*.cc: "P2P/IPC/read", "P2P/direct pointer",
# "P2P/CUMEM/CE", "SHM/direct/direct", "NET/IB/0/GDRDMA", "NET/Socket/1", "NET/AWS Libfabric/0"):
# the transport and its mode, without the device index and options that follow.
_VIA_P2P = re.compile(r"^(?P<t>P2P|SHM|CollNet|NVLS)(?:/(?P<mode>[^/]+))?")
# The facts of the NCCL lines that become meta as they are (meta keys).
FACT_META = ("network", "nic_provider", "nic_count", "cuda_driver_version", "ib")


@dataclass
class _Proc:
    host: str
    pid: int
    line: int
    devices: set = field(default_factory=set)
    comms: dict = field(default_factory=dict)  # comm address -> what its lines said
    rank: int | None = None  # from channel lines
    dev_ranks: dict = field(default_factory=dict)  # device -> the own rank its channel / tree lines name
    comm_devices: set = field(default_factory=set)  # devices a communicator's lines (Init timings) were written on
    launcher_rank: int | None = None
    network: str | None = None
    channels: int | None = None
    message: str = ""
    count: int = 0  # lines that named this host and pid
    shared: int = 0  # of them, records on a line another process's record is on too (glued onto one line)

    def merge(self, other: _Proc) -> None:
        self.line, self.count = min(self.line, other.line), self.count + other.count
        self.shared += other.shared
        self.devices |= other.devices
        self.comm_devices |= other.comm_devices
        self.dev_ranks = {**other.dev_ranks, **self.dev_ranks}
        for comm, facts in other.comms.items():
            self.comms.setdefault(comm, {}).update({k: v for k, v in facts.items() if v is not None})
        for name in ("rank", "launcher_rank", "network", "channels"):
            if getattr(self, name) is None:
                setattr(self, name, getattr(other, name))


class NcclProcs:
    """The processes of one capture, as its NCCL lines describe them."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.procs: dict[tuple[str, int], _Proc] = {}
        self.warns: dict[tuple[str, int], dict] = {}  # the last WARN of a process, for its chain
        self.nics: dict[tuple, dict] = {}  # (name, port) -> the NIC
        self.facts: dict = {}
        self.ring = 0
        self.where: dict[str, int] = {}  # a fact -> the first line that said it
        self.transports: dict[str, int] = {}
        self.last: tuple[int, _Proc, bool] | None = None  # the last record's line, process, whether it shares the line

    def _proc(self, n: dict, number: int, launcher_rank: int | None) -> _Proc:
        key = (n["host"], n["pid"])
        proc = self.procs.get(key)
        if proc is None:
            proc = self.procs[key] = _Proc(n["host"], n["pid"], number)
        if launcher_rank is not None and proc.launcher_rank is None:
            proc.launcher_rank = launcher_rank
        proc.count += 1
        self._share(number, proc)
        return proc

    def _share(self, number: int, proc: _Proc) -> None:
        """Count the records that share a line with another process's (a line's records come one after another)."""
        last = self.last
        shares = last is not None and last[0] == number and (last[1] is not proc or last[2])
        if shares:
            proc.shared += 1
            if not last[2]:
                last[1].shared += 1
        self.last = (number, proc, shares)

    def line(self, number: int, n: dict, launcher_rank: int | None) -> None:
        """Take in one parsed NCCL line (``nccl.parse_nccl_debug``)."""
        proc = self._proc(n, number, launcher_rank)
        what = n["what"]
        if what in ("init", "topology"):
            comm = proc.comms.setdefault(n["comm"], {"line": number})
            self._comm(comm, n, number)
            return
        if what == "warn":
            self.warns[(n["host"], n["pid"])] = self.read.event(
                EventKind.NCCL_WARN, number, host=n["host"], rank=launcher_rank, level="WARNING",
                message=n["message"].strip(), device=n["dev"], pid=n["pid"], where=n["where"], chain=None)
            if n.get("ib") is False:  # "Failed to open libibverbs": the WARN also says there is no IB
                self._nics(n, number)
        elif what == "chain":
            self._chain(n, number, launcher_rank)
        else:
            self._fact(proc, n, number)
        proc.devices.add(n["dev"])

    def _chain(self, n: dict, number: int, launcher_rank: int | None) -> None:
        """An error's return trace (NCCLCHECK's ``INFO(NCCL_ALL, "%s:%d -> %d", ...)``, one line per frame it
        unwinds): added to the process's last WARN; where no WARN opened it (an internal check that fails
        without one), its first line opens an ``nccl_warn`` of its own, so that the chain is kept."""
        key = (n["host"], n["pid"])
        link = f"{n['where']} -> {n['code']}"
        ev = self.warns.get(key)
        if ev is None:
            self.warns[key] = self.read.event(
                EventKind.NCCL_WARN, number, host=n["host"], rank=launcher_rank, level="WARNING",
                message=f"NCCL error return trace (no WARN before it): {link}", device=n["dev"], pid=n["pid"],
                where=n["where"], chain=link)
            return
        ev["chain"] = link if ev["chain"] is None else f"{ev['chain']}; {link}"

    def _comm(self, comm: dict, n: dict, number: int) -> None:
        for key in ("rank", "nranks", "nnodes", "local_ranks", "local_rank", "comm_id", "bus_id"):
            if n.get(key) is not None:
                comm[key] = n[key]
        if n["what"] == "init":
            comm["device"] = int(n["dev"]) if comm.get("device") is None else comm["device"]
            # an init's state is how far its init got: an abort or destroy later (the end of every
            # run) does not undo a complete init
            if n["state"] == "complete" or (n["state"] == "start" and comm.get("state") is None):
                comm["state"], comm["line"], comm["message"] = n["state"], number, n["message"].strip()

    def _fact(self, proc: _Proc, n: dict, number: int) -> None:
        what = n["what"]
        if what == "network":
            proc.network = proc.network or n["network"]
            self.facts.setdefault("network", n["network"])
            self.where.setdefault("network", number)
        elif what == "nics":
            self._nics(n, number)
        elif what == "ring":
            if len(n["ring"]) > self.ring:
                self.ring, self.where["ring"] = len(n["ring"]), number
            proc.channels = max(proc.channels or 0, n["channels"] or 0) or None
        elif what == "peer":
            self._peer(proc, n, number)
            proc.dev_ranks.setdefault(n["dev"], n["rank"])
        elif what == "trees":
            self._named(n["ranks"], number)
            proc.rank = n["rank"] if proc.rank is None else proc.rank
            proc.dev_ranks.setdefault(n["dev"], n["rank"])
        elif what == "timings":
            proc.comm_devices.add(n["dev"])
        elif what == "version":
            self.read.meta.fill(nccl_version=n["version"])
        elif what == "driver":
            self.facts.setdefault("cuda_driver_version", n["driver"])
        elif what == "retry":
            self.read.event(EventKind.WARNING, number, host=n["host"], level="WARNING", pid=n["pid"],
                            message=f"NCCL: call to connect returned {n['error']}, retrying")

    def _nics(self, n: dict, number: int) -> None:
        for nic in n["nics"]:
            self.nics.setdefault((nic["name"], nic["port"]), nic)  # a device's two ports are two NICs
        if n["nics"]:
            self.where.setdefault("nics", number)
        for key in ("provider", "nic_count", "ib"):
            if key in n:
                self.facts.setdefault({"provider": "nic_provider"}.get(key, key), n[key])
        if n.get("ib") is False:  # "NET/IB : No device found": what comes next is a fallback
            self.where.setdefault("no_ib", number)
            self.facts.setdefault("no_ib", n["message"].strip())

    def _peer(self, proc: _Proc, n: dict, number: int) -> None:
        """A channel's connection: the process's rank, the ranks named, and the transport it goes by."""
        proc.rank = n["rank"] if proc.rank is None else proc.rank
        self._named(n["ranks"], number)
        self.where.setdefault("transports", number)
        name = transport(n["via"])
        self.transports[name] = self.transports.get(name, 0) + 1
        if (net := _VIA_NET.match(n["via"])) is not None:  # "via NET/Socket/0": the network's transport
            self.facts.setdefault("via", set()).add(net["net"])

    def _named(self, ranks, number: int) -> None:
        """Ranks a channel or tree line names: ranks of the run (the highest gives a lower bound)."""
        self.facts.setdefault("ranks_named", set()).update(ranks)
        if max(ranks) >= max(self.facts["ranks_named"]):
            self.where["ranks_named"] = number

    def _joined(self) -> list[_Proc]:
        """The processes, torn host names joined to their whole ones."""
        procs = dict(self.procs)
        for key in sorted(procs, key=lambda k: procs[k].count):
            host, pid = key
            same = [k for k in procs if k[1] == pid and k[0] != host and (k[0].endswith(host) or host.endswith(k[0]))]
            whole = max(same, key=lambda k: procs[k].count, default=None)
            if whole is not None and procs[whole].count >= procs[key].count:
                procs[whole].merge(procs.pop(key))
        _untear(procs)
        return sorted(procs.values(), key=lambda p: p.line)

    def finish(self) -> None:
        """The ``nccl_init`` events and the capture's meta."""
        procs = self._joined()
        networks = {p.network for p in procs if p.network}
        network = next(iter(networks)) if len(networks) == 1 else None
        for proc in procs:  # a process that did not say its network uses the capture's one, if one
            self._events(proc, network)
        if procs:
            self._meta(procs)

    def _events(self, proc: _Proc, network: str | None) -> None:
        comms = sorted(proc.comms.items(), key=lambda kv: kv[1]["line"])
        # NCCL 2.3's "rank R nranks N" without a comm, where the process names that rank's comm too: one init
        named = {f.get("rank") for c, f in comms if c is not None}
        comms = [(c, f) for c, f in comms if c is not None or f.get("rank") not in named]
        if not comms and len(proc.dev_ranks) > 1:
            # one process driving several GPUs (nccl-tests -g 8): each device's channel lines name its own rank
            comms = [(None, {"line": proc.line, "rank": rank, "device": dev})
                     for dev, rank in sorted(proc.dev_ranks.items())]
        if not comms:
            comms = [(None, {"line": proc.line, "rank": proc.rank if proc.rank is not None else proc.launcher_rank})]
        for comm, facts in comms:
            device = facts.get("device")
            self.read.event(
                EventKind.NCCL_INIT, facts["line"], host=proc.host, rank=facts.get("rank"), nranks=facts.get("nranks"),
                comm_id=facts.get("comm_id") or comm, network=proc.network or network, level="INFO",
                message=facts.get("message") or f"NCCL process {proc.host}:{proc.pid}", pid=proc.pid,
                device=device if device is not None else (min(proc.devices) if proc.devices else None),
                channels=proc.channels, nnodes=facts.get("nnodes"), local_ranks=facts.get("local_ranks"),
                local_rank=facts.get("local_rank"), init=facts.get("state"))

    def _at(self, line: int | None) -> str:
        return self.read.label if line is None else f"{self.read.label}:{line}"

    def _meta(self, procs: list[_Proc]) -> None:
        meta = self.read.meta
        comms = [c for p in procs for c in p.comms.values()]
        nranks = [c for c in comms if c.get("nranks")]
        nnodes = [c for c in comms if c.get("nnodes")]
        hosts = sorted({p.host for p in procs})
        if nranks:
            top = max(nranks, key=lambda c: (c["nranks"], -c["line"]))
            meta.state("world_size", top["nranks"], "stated", f"NCCL init: nranks {top['nranks']}", self._at(top["line"]))
        if self.ring:
            meta.state("world_size", self.ring, "derived", "the ranks an NCCL ring lists (nccl ring)",
                       self._at(self.where.get("ring")))
        if "ranks_named" in self.facts:
            meta.state("world_size", max(self.facts["ranks_named"]) + 1, "inferred (lower bound)",
                       "the highest rank the NCCL channel and tree lines name + 1", self._at(self.where.get("ranks_named")))
        if nnodes:
            top = max(nnodes, key=lambda c: (c["nnodes"], -c["line"]))
            meta.state("nodes", top["nnodes"], "stated", f"NCCL init: nNodes {top['nnodes']}", self._at(top["line"]))
        meta.state("nodes", len(hosts), "inferred (lower bound)", "the distinct hosts the NCCL lines name",
                   self._at(min(p.line for p in procs)))
        meta.state("hosts", hosts, "stated", "the hosts the NCCL lines name (host:pid:tid)",
                   self._at(min(p.line for p in procs)))
        local = [c["local_ranks"] for c in comms if c.get("local_ranks")]
        by_host: dict[str, set] = {}
        for p in procs:
            ranks = {c["rank"] for c in p.comms.values() if c.get("rank") is not None}
            ranks |= {r for r in (p.rank, p.launcher_rank) if r is not None and not ranks}
            by_host.setdefault(p.host, set()).update(ranks)
        devices = {h: sorted({d for p in procs if p.host == h for d in self._devices(p)}) for h in hosts}
        meta.update(hosts=hosts, ranks_by_host={h: sorted(r) for h, r in by_host.items()}, devices=devices)
        if local:
            meta.local_ranks = max(local)
        if self.nics:
            meta.nics = list(self.nics.values())
            meta.facts_source = {**(meta.facts_source or {}), "nics": self._at(self.where.get("nics"))}
        for key in FACT_META:
            if key in self.facts and key != "network":
                meta[key] = self.facts[key]
        if self.transports:
            meta.transports = dict(sorted(self.transports.items(), key=lambda kv: -kv[1]))
            meta.facts_source = {**(meta.facts_source or {}), "transports": self._at(self.where["transports"])}
        self._network(meta)
        if "ranks_named" in self.facts:
            meta.nccl_ranks_seen = sorted(self.facts["ranks_named"])

    def _network(self, meta) -> None:
        """The network: ``Using network X`` states it; else the NICs NCCL set up, else the channels'
        transport derive it. IB looked for and not found (``NET/IB : No device found``) before
        another network: NCCL fell back, and ``network_fallback`` says from what."""
        links = {nic["link"] for nic in self.nics.values()}
        via = self.facts.get("via", set())
        net = self.facts.get("network")
        if net is not None:
            meta.state("network", net, "stated", f"Using network {net}", self._at(self.where["network"]))
        elif len(links) == 1:
            # no "Using network" line: the transport NCCL set up says it (IB and RoCE are NCCL's "IB")
            name = "Socket" if links == {"Socket"} else "IB"
            meta.state("network", name, "derived", f"the NICs NCCL set up (NET/{name} : Using ...; no 'Using network' "
                                                  "line)", self._at(self.where.get("nics")))
        elif len(via) == 1:
            name = next(iter(via))
            meta.state("network", name, "derived", f"the channels' transport (via NET/{name}/<n>)",
                       self._at(self.where.get("transports")))
        if "no_ib" in self.facts and meta.network is not None and meta.network != "IB":
            meta.network_fallback = f"IB: {self.facts['no_ib']} ({self._at(self.where['no_ib'])})"
            meta.network_from = f"{meta.network_from}; fell back from IB ({self.facts['no_ib']})"

    @staticmethod
    def _devices(proc: _Proc) -> set:
        """A process's CUDA devices: its init lines' cudaDev, else the ``[dev]`` of its lines."""
        init = {c["device"] for c in proc.comms.values() if c.get("device") is not None} | proc.comm_devices
        return init or proc.devices


def transport(via: str) -> str:
    """The transport a channel line's ``via ...`` names, without device index and options:
    ``NET/IB/0/GDRDMA`` -> ``NET/IB``, ``P2P/IPC/read`` -> ``P2P/IPC``, ``SHM/direct/direct`` -> ``SHM``."""
    if (net := _VIA_NET.match(via)) is not None:
        return f"NET/{net['net']}"
    if (p := _VIA_P2P.match(via)) is not None:
        return p["t"] if p["t"] == "SHM" or not p["mode"] else f"{p['t']}/{p['mode']}"
    return via.split("/")[0]


def _untear(procs: dict[tuple[str, int], _Proc]) -> None:
    """A process whose every record shares its line with another process's (glued onto a line another
    record began: processes writing without line buffering) and whose host name ends with the host of a
    process with a line of its own (``... rank 1 nrc0b58536a5f1:324666:...`` for ``c0b58536a5f1``): the name's
    head is the other record's torn tail; the process is that host's (the longest such host, if several)."""
    whole = {p.host for p in procs.values() if p.shared < p.count}
    for key in [k for k, p in procs.items() if k[0] not in whole and p.shared == p.count]:
        host = max((h for h in whole if len(key[0]) > len(h) and key[0].endswith(h)), key=len, default=None)
        if host is None:
            continue
        proc = procs.pop(key)
        proc.host = host
        if (host, key[1]) in procs:
            procs[(host, key[1])].merge(proc)
        else:
            procs[(host, key[1])] = proc

