"""NCCL and ProcessGroupNCCL lines (foreign grammar: written by NCCL and torch, not by us).

``parse_nccl_debug`` reads ``NCCL_DEBUG=INFO`` lines (``host:pid:tid [dev] NCCL INFO|WARN ...``);
``parse_watchdog`` finds a watchdog timeout anywhere in a line (it may be glued to a
progress bar); ``parse_mismatch`` reads TORCH_DISTRIBUTED_DEBUG's collective mismatch.
``mismatches_from_timeouts`` derives a mismatch from timeouts: the same sequence number,
different operations on different ranks.
"""

from __future__ import annotations

import re

# node1:12345:12350 [0] NCCL INFO ...   /  node1:12345:12350 [0] misc/socket.cc:484 NCCL WARN ...
NCCL_DEBUG = re.compile(
    r"^(?P<host>[^\s:]+):(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:(?P<where>\S+:\d+) )?"
    r"NCCL (?P<level>INFO|WARN|TRACE|ABORT|VERSION)\s?(?P<message>.*)$"
)
_INIT = re.compile(r"comm (?P<comm>0x[0-9a-f]+) rank (?P<rank>\d+) nranks (?P<nranks>\d+) cudaDev (?P<dev>\d+)"
                   r"(?: nvmlDev \d+)? busId (?P<bus>[0-9a-fA-F]+)(?: commId (?P<comm_id>0x[0-9a-f]+))?"
                   r".*Init COMPLETE")
_NETWORK = re.compile(r"^(?:Using network (?P<net>\S+)|NET/(?P<net2>\w+) : Using (?P<ifaces>.*)"
                      r"|Bootstrap ?: Using (?P<boot>.*))")
_CHANNEL = re.compile(r"^Channel (?P<ch>\d+)/(?P<n>\d+) :")
_CHAIN = re.compile(r"^(?P<where>\S+:\d+) -> (?P<code>\d+)")
_VERSION = re.compile(r"^NCCL version (?P<version>\S+)")

_WORK = (r"WorkNCCL\(SeqNum=(?P<seq>\d+), OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel_in>-?\d+),"
         r" NumelOut=(?P<numel_out>-?\d+))?, Timeout\(ms\)=(?P<timeout_ms>\d+)\)")
WATCHDOG = re.compile(r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\]\s*Watchdog caught collective operation timeout: "
                      + _WORK + r" ran for (?P<elapsed_ms>\d+) milliseconds before timing out")
# TORCH_DISTRIBUTED_DEBUG=DETAIL: "Rank 0 is running collective: CollectiveFingerPrint(SequenceNumber=23,
# OpType=ALLREDUCE, ...), but Rank 1 is running collective: CollectiveFingerPrint(SequenceNumber=23, OpType=BROADCAST"
MISMATCH = re.compile(r"Detected mismatch between collectives on ranks")
_FINGERPRINT = re.compile(r"Rank (?P<rank>\d+) is running collective: CollectiveFingerPrint\("
                          r"(?:SequenceNumber=(?P<seq>\d+), )?OpType=(?P<op>\w+)")


def parse_nccl_debug(line: str) -> dict | None:
    """The parts of an NCCL debug line plus what it says (``what``: init, network, channel, chain,
    version, warn, info), or None."""
    m = NCCL_DEBUG.match(line)
    if m is None:
        return None
    out = m.groupdict()
    msg = out["message"]
    out["what"] = "warn" if out["level"] == "WARN" else "info"
    if out["level"] != "INFO":
        return out
    if (i := _INIT.search(msg)) is not None:
        out.update(what="init", rank=int(i["rank"]), nranks=int(i["nranks"]), comm=i["comm"],
                   comm_id=i["comm_id"] or i["comm"], bus_id=i["bus"])
    elif (n := _NETWORK.match(msg)) is not None:
        out.update(what="network", network=n["net"] or n["net2"], detail=(n["ifaces"] or n["boot"] or "").strip())
    elif (c := _CHANNEL.match(msg)) is not None:
        out.update(what="channel", channel=int(c["ch"]), channels=int(c["n"]))
    elif (c := _CHAIN.match(msg)) is not None:
        out.update(what="chain", where=c["where"], code=int(c["code"]))
    elif (v := _VERSION.match(msg)) is not None:
        out.update(what="version", version=v["version"])
    return out


def parse_watchdog(line: str) -> dict | None:
    """A watchdog timeout anywhere in ``line`` (old and new shapes): rank, op, seq, numel, timeout_ms, elapsed_ms."""
    m = WATCHDOG.search(line)
    if m is None:
        return None
    return {"rank": int(m["rank"]), "op": m["op"], "seq": int(m["seq"]),
            "numel": int(m["numel_in"]) if m["numel_in"] is not None else None,
            "timeout_ms": int(m["timeout_ms"]), "elapsed_ms": int(m["elapsed_ms"])}


def parse_mismatch(line: str) -> dict | None:
    """seq, ranks and ops of a detected collective mismatch, or None."""
    if MISMATCH.search(line) is None:
        return None
    prints = list(_FINGERPRINT.finditer(line))
    seqs = {int(p["seq"]) for p in prints if p["seq"] is not None}
    return {"seq": min(seqs) if seqs else None, "ranks": ",".join(p["rank"] for p in prints),
            "ops": ",".join(p["op"] for p in prints)}


def mismatches_from_timeouts(timeouts: list[dict]) -> list[dict]:
    """One mismatch per sequence number that timed out with different operations on different ranks."""
    by_seq: dict[int, dict[int, str]] = {}
    for t in timeouts:
        if t.get("seq") is not None and t.get("rank") is not None:
            by_seq.setdefault(t["seq"], {})[t["rank"]] = t["op"]
    out = []
    for seq, ops in sorted(by_seq.items()):
        if len(set(ops.values())) > 1:
            ranks = sorted(ops)
            out.append({"seq": seq, "ranks": ",".join(map(str, ranks)), "ops": ",".join(ops[r] for r in ranks)})
    return out
