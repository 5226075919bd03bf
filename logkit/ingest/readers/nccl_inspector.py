"""NCCL Inspector's output (NVIDIA/nccl ``plugins/profiler/inspector``, formerly ``ext-profiler/inspector``):
every collective and point-to-point op NCCL ran, kernel-timed, one JSON object a line -> ``comm``.

Inspector writes one file per process, ``<dump dir>/<hostname>-pid<pid>.log`` (``inspector.cc``,
``inspectorStateDumpJSON``; the dump dir ``NCCL_INSPECTOR_DUMP_DIR``, else ``nccl-inspector-<SLURM job
id>`` or ``nccl-inspector-unknown-jobid``), each line an object written by ``inspector_json.cc``:

    {"header":{"id":"0x7f8c496ae9f661","comm_name":"unknown","rank":2,"n_ranks":8,"nnodes":1},
     "metadata":{"inspector_output_format_version":"v4.0","git_rev":"","rec_mechanism":"nccl_profiler_interface",
                 "dump_timestamp_us":1748030377748202,"hostname":"h","pid":1639453},
     "coll_perf":{"coll":"AllReduce","coll_sn":1407,"coll_msg_size_bytes":17179869184,"coll_exec_time_us":61974,
                  "coll_timing_source":"kernel_gpu","coll_algobw_gbs":277.210914,"coll_busbw_gbs":485.119099}}

(``p2p_perf`` with ``p2p``, ``p2p_peer``, ``p2p_msg_size_bytes``, ... for Send / Recv; with
``NCCL_INSPECTOR_DUMP_VERBOSE=1`` an ``event_trace_ts`` whose ``coll_start_ts`` is the op's start, in
gettimeofday microseconds). Older output has no ``comm_name`` and no ``*_timing_source``.

Each op is a ``comm`` row: ``op`` as NCCL names it (``AllGather``, ``ReduceScatter``, ``AllReduce``,
``Broadcast``, ``Send``, ...: kept apart from the emitter's ``all_gather`` rows of the same session, a
second timing source beside the first), ``duration_ms`` = exec time / 1000, ``algbw_mb_s`` / ``busbw_mb_s``
= Inspector's GB/s x 1000 (as Inspector computes them: ``inspectorComputeOpBw``, nccl-tests' formulas),
``size_bytes`` in logkit's sense (nccl-tests' size: NCCL's per-rank message x ``n_ranks`` for all-gather
and reduce-scatter, whose traffic Inspector counts so; the message itself otherwise), ``group_size`` =
the communicator's ``n_ranks``, ``timing_source`` = ``nccl_inspector`` (Inspector's own ``kernel_gpu`` /
``kernel_cpu`` / ``collective_cpu`` in ``inspector_timing``), ``time_s`` = the verbose start where given.
The rank of a file's rows is the process's rank in its largest communicator (the world's, where the
process joined it: a sub-communicator's rank is not the job's). Meta: the world size (largest
``n_ranks``), nodes (``nnodes``) and the hosts the files name, each stated with its line. A line that is
no Inspector object is a diagnostic with its line; a value that does not convert ("nan") is left empty.
"""

from __future__ import annotations

from pathlib import Path

import orjson

from logkit.ingest.readers.base import Read, ReadResult
from logkit.ingest.readers.formats import FileFormat
from logkit.schema.values import as_float

TIMING_SOURCE = FileFormat.NCCL_INSPECTOR.value  # the contract's timing_source is the format's own word
# the ops whose traffic Inspector counts as n_ranks x the message (inspectorComputeOpBw)
_GATHERED = ("AllGather", "AllGatherV", "ReduceScatter")


def _int(value) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _row(read: Read, number: int, header: dict, perf: dict, kind: str) -> dict | None:
    """One op's ``comm`` row (``kind``: ``coll`` or ``p2p``), None where it names no op."""
    op = perf.get(kind)
    if not isinstance(op, str) or not op:
        read.note(number, f"an Inspector {kind}_perf without its op name")
        return None
    n = _int(header.get("n_ranks"))
    msg = _int(perf.get(f"{kind}_msg_size_bytes"))
    us = as_float(perf.get(f"{kind}_exec_time_us"))
    alg, bus = as_float(perf.get(f"{kind}_algobw_gbs")), as_float(perf.get(f"{kind}_busbw_gbs"))
    trace = perf.get("event_trace_ts")
    start = as_float(trace.get(f"{kind}_start_ts")) if isinstance(trace, dict) else None
    return {"rank": None, "step": None, "op": op,
            "size_bytes": msg * n if msg is not None and n and kind == "coll" and op in _GATHERED else msg,
            "duration_ms": us / 1000.0 if us is not None else None,
            "algbw_mb_s": alg * 1000.0 if alg is not None else None,
            "busbw_mb_s": bus * 1000.0 if bus is not None else None,
            "group_size": n, "source": f"{read.label}:{number}", "timing_source": TIMING_SOURCE,
            "time_s": start / 1e6 if start else None,
            "inspector_timing": perf.get(f"{kind}_timing_source"), "comm_id": header.get("id"),
            "comm_name": header.get("comm_name"), "peer": _int(perf.get("p2p_peer"))}


def read_nccl_inspector(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.NCCL_INSPECTOR)
    rows, ranks = read.rows["comm"], {}  # communicator id -> (n_ranks, this process's rank in it)
    hosts: dict[str, int] = {}
    nodes = None
    raw = read.path.read_bytes()
    for number, line in enumerate(raw.splitlines(), 1):
        if not line.strip():
            continue
        read.lines += 1
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            read.unmatched(number, line.decode("utf-8", "replace")[:200])
            continue
        header = doc.get("header") if isinstance(doc, dict) else None
        kind = next((k for k in ("coll", "p2p") if isinstance(doc, dict) and isinstance(doc.get(f"{k}_perf"), dict)),
                    None)
        if not isinstance(header, dict) or kind is None:
            read.unmatched(number, line.decode("utf-8", "replace")[:200])
            continue
        row = _row(read, number, header, doc[f"{kind}_perf"], kind)
        if row is None:
            continue
        read.used += 1
        rows.append(row)
        n, r = _int(header.get("n_ranks")), _int(header.get("rank"))
        if n is not None and r is not None:
            ranks.setdefault(str(header.get("id")), (n, r, number))
        written_by = doc.get("metadata")  # Inspector's own block: the host and process that wrote the line
        host = written_by.get("hostname") if isinstance(written_by, dict) else None
        if isinstance(host, str) and host:
            hosts.setdefault(host, number)
        nodes = max(nodes or 0, _int(header.get("nnodes")) or 0) or nodes
    _meta(read, rows, ranks, hosts, nodes, rank)
    return read.result()


def _meta(read: Read, rows: list[dict], ranks: dict, hosts: dict, nodes: int | None, given: int | None) -> None:
    """The process's rank on its rows, and the world size, nodes and hosts its file states."""
    if ranks:
        n, r, number = max(ranks.values(), key=lambda v: (v[0], -v[2]))  # the largest communicator, first seen
        rank = given if given is not None else r
        for row in rows:
            row["rank"] = rank
        read.meta.world_size = n
        read.meta.world_size_from = f"stated: Inspector's n_ranks of its largest communicator ({read.label}:{number})"
    if nodes:
        read.meta.nodes = nodes
        read.meta.nodes_from = f"stated: Inspector's nnodes ({read.label})"
    if hosts:
        read.meta.hosts = sorted(hosts)
        read.meta.hosts_from = f"stated: Inspector's hostname ({read.label}:{min(hosts.values())})"
    read.meta.backend = "nccl"
