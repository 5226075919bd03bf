"""What the NCCL_DEBUG lines of a capture say about its processes, put together.

Each process (host and pid of its lines) gathers what its lines tell: its communicators
(``Init START`` / ``Init COMPLETE`` lines and the newer ``nRanks .. nNodes .. localRanks ..``
line), the network and NICs it uses, its rank where only channel lines name it, and the rank
its launcher prefix gave. At the end (``finish``) every process becomes one ``nccl_init``
event per communicator (``init``: complete, start, abort, or None where no init line was seen:
the log may stop before ``Init COMPLETE``) and the whole capture gives meta: ``world_size``
(NCCL's nranks, else the ranks a ring lists), ``nodes`` (NCCL's nNodes, else the hosts seen, a
lower bound), ``hosts``, ``ranks_by_host``, ``devices`` (CUDA devices per host), ``local_ranks``,
``network``, ``nics``, ``nic_provider``, ``nic_count``, ``cuda_driver_version``.

Lines torn by processes writing without line buffering can lose the head of a host name
(``5c0s31b0n0:307469`` for ``x3005c0s31b0n0:307469``) or carry another record's tail before it
(``x3005x3005c0s31b0n0:307469``): a process whose host name and another's (same pid) end one
with the other is joined to the one more lines name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from logkit.ingest.readers.base import Read
from logkit.schema.vocab import EventKind

_VIA_NET = re.compile(r"^NET/(?P<net>.+?)/\d+$")
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
    launcher_rank: int | None = None
    network: str | None = None
    channels: int | None = None
    message: str = ""
    count: int = 0  # lines that named this host and pid

    def merge(self, other: _Proc) -> None:
        self.line, self.count = min(self.line, other.line), self.count + other.count
        self.devices |= other.devices
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
        self.nics: dict[str, dict] = {}
        self.facts: dict = {}
        self.ring = 0

    def _proc(self, n: dict, number: int, launcher_rank: int | None) -> _Proc:
        key = (n["host"], n["pid"])
        proc = self.procs.get(key)
        if proc is None:
            proc = self.procs[key] = _Proc(n["host"], n["pid"], number)
        if launcher_rank is not None and proc.launcher_rank is None:
            proc.launcher_rank = launcher_rank
        proc.count += 1
        return proc

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
        elif what == "chain" and (ev := self.warns.get((n["host"], n["pid"]))) is not None:
            link = f"{n['where']} -> {n['code']}"
            ev["chain"] = link if ev["chain"] is None else f"{ev['chain']}; {link}"
        else:
            self._fact(proc, n, number)
        proc.devices.add(n["dev"])

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
        elif what == "nics":
            for nic in n["nics"]:
                self.nics.setdefault(nic["name"], nic)
            for key in ("provider", "nic_count", "ib"):
                if key in n:
                    self.facts.setdefault({"provider": "nic_provider"}.get(key, key), n[key])
        elif what == "ring":
            self.ring = max(self.ring, len(n["ring"]))
            proc.channels = max(proc.channels or 0, n["channels"] or 0) or None
        elif what == "peer":
            proc.rank = n["rank"] if proc.rank is None else proc.rank
            self.facts.setdefault("ranks_named", set()).update(n["ranks"])
            if (net := _VIA_NET.match(n["via"])) is not None:  # "via NET/Socket/0": the network's transport
                self.facts.setdefault("via", set()).add(net["net"])
        elif what == "version":
            self.read.meta.fill(nccl_version=n["version"])
        elif what == "driver":
            self.facts.setdefault("cuda_driver_version", n["driver"])
        elif what == "retry":
            self.read.event(EventKind.WARNING, number, host=n["host"], level="WARNING", pid=n["pid"],
                            message=f"NCCL: call to connect returned {n['error']}, retrying")

    def _joined(self) -> list[_Proc]:
        """The processes, torn host names joined to their whole ones."""
        procs = dict(self.procs)
        for key in sorted(procs, key=lambda k: procs[k].count):
            host, pid = key
            same = [k for k in procs if k[1] == pid and k[0] != host and (k[0].endswith(host) or host.endswith(k[0]))]
            whole = max(same, key=lambda k: procs[k].count, default=None)
            if whole is not None and procs[whole].count >= procs[key].count:
                procs[whole].merge(procs.pop(key))
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

    def _meta(self, procs: list[_Proc]) -> None:
        meta = self.read.meta
        comms = [c for p in procs for c in p.comms.values()]
        nranks = [c["nranks"] for c in comms if c.get("nranks")]
        nnodes = [c["nnodes"] for c in comms if c.get("nnodes")]
        hosts = sorted({p.host for p in procs})
        if nranks:
            meta.update(world_size=max(nranks), world_size_from="nccl init (nranks)")
        elif self.ring:
            meta.update(world_size=self.ring, world_size_from="nccl ring (every rank listed)")
        elif "ranks_named" in self.facts:
            meta.update(world_size=max(self.facts["ranks_named"]) + 1,
                        world_size_from="ranks the NCCL channel lines name (a lower bound)")
        if nnodes:
            meta.update(nodes=max(nnodes), nodes_from="nccl init (nNodes)")
        else:
            meta.update(nodes=len(hosts), nodes_from="hosts in the NCCL lines (a lower bound)")
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
        for key in FACT_META:
            if key in self.facts:
                meta[key] = self.facts[key]
        links = {nic["link"] for nic in self.nics.values()}
        via = self.facts.get("via", set())
        if meta.network is None and len(links) == 1:
            # no "Using network" line: the transport NCCL set up says it (IB and RoCE are NCCL's "IB")
            meta.network = "Socket" if links == {"Socket"} else "IB"
            meta.network_from = "the NICs NCCL set up (no 'Using network' line)"
        elif meta.network is None and len(via) == 1:
            meta.network = next(iter(via))
            meta.network_from = "the channels' transport (via NET/<network>/<n>)"
        if "ranks_named" in self.facts:
            meta.nccl_ranks_seen = sorted(self.facts["ranks_named"])

    @staticmethod
    def _devices(proc: _Proc) -> set:
        """A process's CUDA devices: its init lines' cudaDev, else the ``[dev]`` of its lines."""
        init = {c["device"] for c in proc.comms.values() if c.get("device") is not None}
        return init or proc.devices
