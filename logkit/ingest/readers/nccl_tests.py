"""nccl-tests output (``all_reduce_perf`` and friends): every result table of a file -> ``comm``.

Each data row gives two ``comm`` rows, out-of-place and in-place (``placement``), with
``size_bytes``, ``duration_ms`` (the table's time in us / 1000), ``algbw_mb_s`` and
``busbw_mb_s`` (GB/s x 1000: nccl-tests' GB is 10^9 bytes, our MB 10^6), ``group_size``
(the ranks listed under ``# Using devices``), ``op`` from the binary's name where the file
names it (a command line, the file name), else from the table's ``redop``. The ``# Avg bus
bandwidth`` of each table goes to ``meta["nccl_tests"]``; the ``# Using devices`` lines give
``meta["gpus"]`` (rank, host, GPU name), ``gpu_count`` and ``world_size``.
"""

from __future__ import annotations

import re
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult, read_bytes, text_lines
from logkit.schema.values import to_float

OPS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
       "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "sendrecv": "sendrecv",
       "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}
_BINARY = re.compile(r"\b(?P<op>all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|sendrecv|gather"
                     r"|scatter|hypercube)_perf(?:_mpi)?\b")
_HEADER = re.compile(r"^#\s+size\s+count\s+type\b")
_DEVICE = re.compile(r"^#\s+Rank\s+(?P<rank>\d+) Group\s+\d+ Pid\s+\d+ on\s+(?P<host>\S+) device\s+(?P<dev>\d+)"
                     r"(?:\s+\[[^\]]*\]\s+(?P<name>.+?))?\s*$")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(?P<bw>\S+)")
_COMMENT = re.compile(r"^#")
_META_LINE = re.compile(r"^(?:\$ |\s*(?:mpirun|srun|\./|/)\S*.*_perf|nccl-tests|NCCL version)")
_GB = 1000.0  # GB/s -> MB/s (both SI)


def read_nccl_tests(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), "nccl_tests")
    m = _BINARY.search(read.path.name)
    op = OPS[m["op"]] if m else None
    columns: list[str] | None = None
    group = 0
    hosts: set[str] = set()
    table = 0
    tables: list[dict] = []
    gpus: dict[int, dict] = {}
    for number, line in enumerate(text_lines(read_bytes(read.path, read), read), start=1):
        if not line.strip():
            continue
        read.lines += 1
        if (b := _BINARY.search(line)) is not None and not line.lstrip().startswith("#  "):
            op = OPS[b["op"]]  # a command line naming the binary: the tables below are that op
        if line.startswith("# nThread"):
            table, group, hosts, columns = table + 1, 0, set(), None
            read.used += 1
            continue
        if (d := _DEVICE.match(line)) is not None:
            group += 1
            hosts.add(d["host"])
            gpus.setdefault(int(d["rank"]), {"index": int(d["rank"]), "host": d["host"], "device": int(d["dev"]),
                                             "name": d["name"]})
            read.used += 1
            continue
        if _HEADER.match(line):
            columns = line.lstrip("#").split()
            read.used += 1
            continue
        if (a := _AVG.match(line)) is not None:
            tables.append({"op": op, "table": table, "avg_busbw_gb_s": to_float(a["bw"]), "group_size": group or None,
                           "hosts": sorted(hosts)})
            read.used += 1
            continue
        if _COMMENT.match(line) or _META_LINE.match(line):
            read.used += 1
            continue
        if (fields := read.table_row(number, line, columns)) is not None:
            _row(read, number, columns, fields, op, group, table)
    read.meta["nccl_tests"] = tables
    if gpus:
        read.meta.update(gpus=[gpus[r] for r in sorted(gpus)], gpu_count=len(gpus), world_size=len(gpus),
                         backend="nccl", mode="MULTI-GPU" if len(gpus) > 1 else "SINGLE-GPU")
    return read.result()


def _row(read: Read, number: int, columns: list[str], fields: list[str], op, group: int, table: int) -> None:
    # The header names time/algbw/busbw twice: out-of-place first, in-place second.
    first = {}
    places: list[dict] = [{}, {}]
    seen: dict[str, int] = {}
    for name, value in zip(columns, fields, strict=True):
        k = seen.get(name, 0)
        seen[name] = k + 1
        if name in ("time", "algbw", "busbw", "#wrong", "error"):
            places[min(k, 1)][name] = value
        else:
            first[name] = value
    size = to_float(first.get("size", ""))
    if size is None:
        read.note(number, f"value does not convert: size {first.get('size')!r}", " ".join(fields))
        return
    row_op = op or {"sum": "allreduce"}.get(first.get("redop", ""), None)
    for place, values in zip(("out-of-place", "in-place"), places, strict=True):
        if not values:
            continue
        t, alg, bus = (to_float(values.get(k, "")) for k in ("time", "algbw", "busbw"))
        if t is None:
            read.note(number, f"value does not convert: {place} time {values.get('time')!r}", " ".join(fields))
        wrong = values.get("#wrong", values.get("error"))
        read.rows["comm"].append({
            "rank": None, "step": None, "op": row_op, "size_bytes": int(size),
            "duration_ms": t / 1000.0 if t is not None else None,
            "algbw_mb_s": alg * _GB if alg is not None else None, "busbw_mb_s": bus * _GB if bus is not None else None,
            "group_size": group or None, "source": f"{read.label}:{number}", "placement": place,
            "count": int(to_float(first.get("count", "")) or 0) or None, "dtype": first.get("type"),
            "redop": first.get("redop"), "wrong": wrong, "table": table,
        })
