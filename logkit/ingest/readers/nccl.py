"""NCCL_DEBUG=INFO lines (foreign grammar: written by NCCL, not by us).

``parse_nccl_debug`` reads one line (``host:pid:tid [dev] NCCL INFO|WARN ...``, or NCCL 2.0-2.2's
``host:pid:tid [dev] INFO ...`` without the word NCCL; ``[dev]`` is the CUDA device, not the global
rank) and says what it tells (``what``):

- ``init``: ``comm 0x.. rank R nranks N cudaDev D ... - Init START|Init COMPLETE|Abort COMPLETE``; NCCL 2.3's
  ``comm 0x.. rank R nranks N`` and ``rank R nranks N`` (no comm), read as an init's start;
- ``topology``: the newer ``comm 0x.. rank R nRanks N nNodes M localRanks L localRank l``;
- ``network``: ``Using network X`` (X may hold spaces: ``AWS Libfabric``; NCCL 2.3: ``Using internal Network X``);
- ``nics``: ``NET/IB : Using [0]mlx5_0:1/IB ...`` or ``NET/Socket : Using [0]eth0:10.0.0.1<0>``
  (``nics``: name, port, link), ``NET/IB : No device found`` / ``NCCL_IB_DISABLE set ... to 1``
  (``ib``: False; so does a WARN ``Failed to open libibverbs.so[.1]``, kept as a ``warn``), NCCL 2.3's
  one ``NET/IB: [0] mlx5_3:1/IB`` line per port, ``NET/OFI Selected Provider is cxi (found 4 nics)`` (``provider``, ``nic_count``);
- ``ring``: ``Channel 00/04 :    0   1 ...`` (every rank, in ring order);
- ``peer``: ``Channel 00/0 : 1[1c0] -> 2[1d0] [send] via NET/Socket/0`` and the older
  ``Ring 00 : 1 -> 0 [receive] via NET/Socket/0`` (``rank``: the rank of the writing process:
  the receiver of a ``[receive]`` line, else the sender; ``ranks``: both);
- ``channels``: ``4 coll channels, ...``; ``retry``: ``Call to connect returned X, retrying``;
- ``trees``: ``Trees [0] 154/-1/-1->155->153|...`` (``rank``: the writing process's, the middle one;
  ``ranks``: every rank a tree names);
- ``timings``: ``Init timings: rank R nranks N total ...`` (printed on the communicator's device);
- ``chain``: an error's return trace ``file:line -> N`` (after a WARN, or alone); ``version``, ``driver``,
  ``warn``, ``info`` (the rest).
"""

from __future__ import annotations

import re

from logkit.ingest.readers.formats import NCCL_AFTER_HOST_NAMED, NCCL_RECORD_START

# node1:12345:12350 [0] NCCL INFO ...   /  node1:12345:12350 [0] misc/socket.cc:484 NCCL WARN ...
# NCCL 2.0-2.2 wrote the level without the word NCCL ("cx50:18926:19004 [1] INFO Using internal Network Socket"):
# the header (host:pid:tid [dev]) is NCCL's alone, so the word is optional.
# The header is defined once, in formats (which discovery imports without any reader): every pattern that looks
# for an NCCL record (here, in prefixes, normalise, nccl_tests, formats' sniffing) is built from its fragments.
NCCL_DEBUG = re.compile(
    r"^(?P<host>[^\s:]+)" + NCCL_AFTER_HOST_NAMED + r"(?:NCCL )?(?P<level>INFO|WARN|TRACE|ABORT|VERSION)\s?(?P<message>.*)$"
)
# a second NCCL record glued to the end of a line (processes writing without line buffering)
GLUED = re.compile(r"(?<=\S) (?=" + NCCL_RECORD_START + ")")


def may_be_nccl(text: str) -> bool:
    """Whether a line may hold an NCCL debug record (a cheap look before the patterns): the word NCCL,
    or the level an NCCL 2.0-2.2 header ends with."""
    return "NCCL " in text or "] INFO " in text or " WARN " in text
# (NCCL 2.4 wrote no busId: "comm 0x.. rank 15 nranks 32 cudaDev 7 nvmlDev 7 - Init COMPLETE")
_INIT = re.compile(r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
                   r"(?: nvmlDev \d+)?(?: busId (?P<bus>[0-9a-fA-F]+))?(?: commId (?P<comm_id>0x[0-9a-fA-F]+))?"
                   r"(?: localSize \d+)?.*? - (?P<state>Init START|Init COMPLETE|Abort COMPLETE|Destroy COMPLETE)")
# NCCL 2.3 at a communicator's start, no device nor state: "comm 0x9249b110 rank 1 nranks 4", and (the first
# rank's) "rank 0 nranks 4" without the comm
_INIT_OLD = re.compile(r"^(?:comm (?P<comm>0x[0-9a-fA-F]+) )?rank (?P<rank>\d+) nranks (?P<nranks>\d+)\s*$")
_TOPOLOGY = re.compile(r"comm (?P<comm>0x[0-9a-fA-F]+) rank (?P<rank>\d+) nRanks (?P<nranks>\d+) nNodes (?P<nnodes>\d+)"
                       r" localRanks (?P<local_ranks>\d+) localRank (?P<local_rank>\d+)")
# NCCL 2.3 wrote "Using internal Network IB" (the plugin era's "internal" and a capital N)
_NETWORK = re.compile(r"^Using (?:internal )?[Nn]etwork (?P<net>\S.*?)\s*$")
# "NET/IB : Using [0]mlx5_0:1/IB [1]..." on one line; NCCL 2.3 wrote one "NET/IB: [0] mlx5_3:1/IB" per port
_NET_USING = re.compile(r"^NET/(?P<kind>IB|Socket) ?: (?:Using )?(?P<list>\[.*)$")
_IB_NIC = re.compile(r"\[\d+\] ?(?P<name>[\w.-]+):(?P<port>\d+)/(?P<link>IB|RoCE)")
_SOCKET_NIC = re.compile(r"\[\d+\](?P<name>[^:\s\[\]]+):")
# newer NCCL says a missing verbs library as an INFO ("Failed to open libibverbs.so[.1]"), older as a WARN
_NO_IB = re.compile(r"^NET/IB ?: No device found|^NCCL_IB_DISABLE set by environment to 1|^Failed to open libibverbs")
# a WARN that says the IB verbs library is not there (no IB: NCCL goes on over sockets)
_IB_ABSENT = re.compile(r"Failed to open libibverbs")
_PROVIDER = re.compile(r"^NET/OFI Selected Provider is (?P<provider>\S+) \(found (?P<n>\d+) nics?\)")
_RING = re.compile(r"^Channel (?P<ch>\d+)(?:/(?P<n>\d+))? :(?P<ranks>(?:\s+\d+)+)\s*$")
_PEER = re.compile(r"^(?:Channel|Ring) (?P<ch>\d+)(?:/\d+)? : (?P<a>\d+)(?:\[[0-9a-fA-F]+\])? -> "
                   r"(?P<b>\d+)(?:\[[0-9a-fA-F]+\])?(?: \[(?P<dir>send|receive)\])? via (?P<via>\S.*?)\s*$")
_CHANNELS = re.compile(r"^(?P<n>\d+) coll channels")
# "Trees [0] 154/-1/-1->155->153|153->155->154/-1/-1 [1] ...": per channel, a rank's tree children, itself
# and its parent (-1: none); the ranks it names are ranks of the run
# and its parent (-1: none), and in 2.4-2.6 the same from the parent's side after "|"; only whole trees are
# read (a torn line's last one is not)
_TREES = re.compile(r"^Trees \[\d+\] ")
_TREE = re.compile(r"(?<![\d/>-])(?:(-?\d+)/(-?\d+)/(-?\d+)->(\d+)->(-?\d+)|(-?\d+)->(\d+)->(-?\d+)/(-?\d+)/(-?\d+))"
                   r"(?=[|\s]|$)")
# NCCL 2.19+ after an init completes, on the communicator's device: "Init timings: rank 2 nranks 16 total
# 1.08 (...)", later "Init timings - ncclCommInitRank: rank 2 nranks 16 total ..."
_TIMINGS = re.compile(r"^Init timings(?: - \w+)?: rank (?P<rank>\d+) nranks (?P<nranks>\d+) ")
_RETRY = re.compile(r"^Call to connect returned (?P<error>.+?), retrying")
_CHAIN = re.compile(r"^(?P<where>\S+:\d+) -> (?P<code>\d+)")
_VERSION = re.compile(r"^NCCL version (?P<version>\S+)")
_DRIVER = re.compile(r"^cudaDriverVersion (?P<driver>\d+)")


def _init(msg: str) -> dict | None:
    if (i := _INIT.search(msg)) is not None:
        state = i["state"].split()[0].lower()  # init / abort / destroy
        return {"what": "init", "rank": int(i["rank"]), "nranks": int(i["nranks"]), "comm": i["comm"],
                "comm_id": i["comm_id"], "bus_id": i["bus"],
                "state": "complete" if i["state"] == "Init COMPLETE" else "start" if state == "init" else state}
    if (o := _INIT_OLD.match(msg)) is not None:
        return {"what": "init", "rank": int(o["rank"]), "nranks": int(o["nranks"]), "comm": o["comm"],
                "comm_id": None, "bus_id": None, "state": "start"}
    if (t := _TOPOLOGY.search(msg)) is not None:
        return {"what": "topology", "comm": t["comm"], "rank": int(t["rank"]), "nranks": int(t["nranks"]),
                "nnodes": int(t["nnodes"]), "local_ranks": int(t["local_ranks"]), "local_rank": int(t["local_rank"])}
    return None


def _network(msg: str) -> dict | None:
    if (n := _NETWORK.match(msg)) is not None:
        return {"what": "network", "network": n["net"]}
    if (u := _NET_USING.match(msg)) is not None:
        if u["kind"] == "IB":
            nics = [{"name": m["name"], "port": int(m["port"]), "link": m["link"]} for m in _IB_NIC.finditer(u["list"])]
        else:
            nics = [{"name": m["name"], "port": None, "link": "Socket"} for m in _SOCKET_NIC.finditer(u["list"])]
        return {"what": "nics", "nics": nics, "transport": u["kind"]} if nics else None
    if _NO_IB.match(msg):
        return {"what": "nics", "nics": [], "transport": "IB", "ib": False}
    if (p := _PROVIDER.match(msg)) is not None:
        return {"what": "nics", "nics": [], "transport": "OFI", "provider": p["provider"], "nic_count": int(p["n"])}
    return None


def _channel(msg: str) -> dict | None:
    if (r := _RING.match(msg)) is not None:
        return {"what": "ring", "channel": int(r["ch"]), "channels": int(r["n"]) if r["n"] else None,
                "ring": [int(x) for x in r["ranks"].split()]}
    if (p := _PEER.match(msg)) is not None:
        a, b = int(p["a"]), int(p["b"])
        return {"what": "peer", "rank": b if p["dir"] == "receive" else a, "ranks": (a, b), "via": p["via"]}
    if (c := _CHANNELS.match(msg)) is not None:
        return {"what": "channels", "channels": int(c["n"])}
    if _TREES.match(msg) is not None:
        trees = _TREE.findall(msg)
        ranks = {int(x) for tree in trees for x in tree if x and x != "-1"}
        own = trees[0][3] or trees[0][6] if trees else None  # the rank in the middle: the one writing
        return {"what": "trees", "rank": int(own), "ranks": sorted(ranks)} if ranks else None
    return None


def _other(msg: str) -> dict | None:
    if (c := _CHAIN.match(msg)) is not None:
        return {"what": "chain", "where": c["where"], "code": int(c["code"])}
    if (v := _VERSION.match(msg)) is not None:
        return {"what": "version", "version": v["version"]}
    if (d := _DRIVER.match(msg)) is not None:
        return {"what": "driver", "driver": int(d["driver"])}
    if (r := _RETRY.match(msg)) is not None:
        return {"what": "retry", "error": r["error"]}
    if (t := _TIMINGS.match(msg)) is not None:
        return {"what": "timings", "rank": int(t["rank"]), "nranks": int(t["nranks"])}
    return None


def parse_nccl_debug(line: str) -> dict | None:
    """The parts of an NCCL debug line plus what it says (``what``, see the module doc), or None."""
    m = NCCL_DEBUG.match(line)
    if m is None:
        return None
    out = m.groupdict()
    out["pid"], out["dev"] = int(out["pid"]), int(out["dev"])
    out["what"] = "warn" if out["level"] == "WARN" else "info"
    if out["level"] != "INFO":
        if _IB_ABSENT.search(out["message"]):  # still a WARN, that also says IB is absent
            out.update(nics=[], ib=False)
        return out
    msg = out["message"]
    for grammar in (_init, _network, _channel, _other):
        if (found := grammar(msg)) is not None:
            out.update(found)
            break
    return out
