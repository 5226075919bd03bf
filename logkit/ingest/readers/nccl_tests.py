"""nccl-tests output (``all_reduce_perf`` and friends): every result table of a file -> ``comm``.

Each data row gives two ``comm`` rows, out-of-place and in-place (``placement``), with
``size_bytes``, ``duration_ms`` (the table's time in us / 1000), ``algbw_mb_s`` and
``busbw_mb_s`` (GB/s x 1000: nccl-tests' GB is 10^9 bytes, our MB 10^6), ``group_size``
(the ranks listed under ``# Using devices``), ``op`` from the binary's name where the file
names it (a command line, the file name: ``all_reduce_perf``, or ``..._all_gather.log`` where
no command line was kept and the table's ``redop`` agrees), else from the table's ``redop``.
The ``# Avg bus bandwidth`` of each table goes to ``meta.nccl_tests``; the ``# Using
devices`` lines give ``meta.gpus`` (rank, host, GPU name), ``gpu_count``, ``world_size``,
``hosts``, ``nodes`` and ``ranks_by_host``. A run that fails says so: ``host: Test NCCL failure
... '<reason>'`` and ``.. host pid P: Test failure`` give an ``nccl_error`` event (with the ranks
of that pid, from the device table), and the MPI launcher's "first process to exit" a
``child_failed`` event (``root_cause``).
"""

from __future__ import annotations

import re
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.normalise import Grammar, records
from logkit.ingest.readers.torch_lines import parse_prte
from logkit.schema.values import to_float
from logkit.schema.vocab import EventKind, Mode

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
# the op in a file's name where no command line was kept (alcf_..._all_gather.log)
_NAME_OP = re.compile(r"(?:^|[^a-z])(?P<op>all_reduce|all_gather|reduce_scatter|alltoall|broadcast|sendrecv|gather"
                      r"|scatter|reduce)(?:[^a-z]|$)")
_NO_REDOP = {"allgather", "broadcast", "alltoall", "gather", "scatter", "sendrecv", "hypercube"}
_FAILURE = re.compile(r"^\s*(?P<host>\S+): Test NCCL failure (?P<where>\S+) '(?P<error>.*?)"
                      r"(?: \(run with NCCL_DEBUG=INFO for details\))?\s*/?\s*'")
_FAILED_PID = re.compile(r"^\s*\.\. (?P<host>\S+) pid (?P<pid>\d+): Test failure (?P<where>\S+)")
# the MPI launcher's closing banner: its lines say nothing beyond the failure
_BANNER = re.compile(r"^-{10,}$|^(?:prterun|mpirun|Primary job|a non-zero exit code|thus causing|The first process|"
                     r"   Process name:|\S+ detected that one or more processes)")
_GB = 1000.0  # GB/s -> MB/s (both SI)
# How a line of nccl-tests' output begins (what a prefix taken off by ``normalise`` must leave): a comment,
# a result row, the command line, an NCCL debug line.
GRAMMAR = Grammar(re.compile(r"#|\s*\d+\s+\d+\s+\w+|\$ |\s*(?:mpirun|srun|\./|/)\S*|[^\s:]+:\d+:\d+ \[\d+\] "
                             r"|NCCL version|[\w.-]+: Test |.*Process name:"))


def _name_op(name: str) -> str | None:
    m = _BINARY.search(name) or _NAME_OP.search(name)
    return OPS[m["op"]] if m else None


class _Tests:
    """The state of one file: the op, the current table, the devices, the failures."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.op = _name_op(read.path.name)
        self.op_from_name = self.op is not None and _BINARY.search(read.path.name) is None
        self.columns: list[str] | None = None
        self.group, self.table = 0, 0
        self.hosts: set[str] = set()
        self.tables: list[dict] = []
        self.gpus: dict[int, dict] = {}
        self.pids: dict[int, list[int]] = {}  # pid -> its ranks (one process may drive several GPUs)
        self.per_process = 1  # ranks per MPI process: nThread x nGpus

    def line(self, number: int, line: str) -> bool:
        if (b := _BINARY.search(line)) is not None and not line.lstrip().startswith("#  "):
            self.op, self.op_from_name = OPS[b["op"]], False  # a command line naming the binary
        if line.startswith("# nThread"):
            self.table, self.group, self.hosts, self.columns = self.table + 1, 0, set(), None
            per = re.match(r"# nThread (\d+) nGpus (\d+)", line)
            self.per_process = int(per[1]) * int(per[2]) if per else 1
            return True
        if (d := _DEVICE.match(line)) is not None:
            self.group += 1
            self.hosts.add(d["host"])
            self.gpus.setdefault(int(d["rank"]), {"index": int(d["rank"]), "host": d["host"],
                                                  "device": int(d["dev"]), "name": d["name"]})
            if (pid := re.search(r"Pid\s+(\d+)", line)) is not None:
                self.pids.setdefault(int(pid[1]), []).append(int(d["rank"]))
            return True
        if _HEADER.match(line):
            self.columns = line.lstrip("#").split()
            return True
        if (a := _AVG.match(line)) is not None:
            self.tables.append({"op": self.op, "table": self.table, "avg_busbw_gb_s": to_float(a["bw"]),
                                "group_size": self.group or None, "hosts": sorted(self.hosts)})
            return True
        if _COMMENT.match(line) or _META_LINE.match(line):
            return True
        return self._failure(number, line)

    def _failure(self, number: int, line: str) -> bool:
        read = self.read
        if (f := _FAILURE.match(line)) is not None:
            read.event(EventKind.NCCL_ERROR, number, host=f["host"], level="ERROR", message=line.strip()[:300],
                       error=f["error"].strip(), where=f["where"])
            return True
        if (f := _FAILED_PID.match(line)) is not None:
            ranks = self.pids.get(int(f["pid"]), [])
            for ev in reversed(read.rows["events"]):
                if ev["kind"] == EventKind.NCCL_ERROR and ev.get("host") == f["host"]:
                    ev.update(pid=int(f["pid"]), rank=ranks[0] if len(ranks) == 1 else None,
                              ranks=",".join(map(str, ranks)) or None)
                    break
            return True
        if (p := parse_prte(line)) is not None:
            # the launcher names its process; a process drives nThread x nGpus ranks
            ranks = list(range(p["rank"] * self.per_process, (p["rank"] + 1) * self.per_process))
            read.event(EventKind.CHILD_FAILED, number, rank=ranks[0] if len(ranks) == 1 else None, level="ERROR",
                       message=line.strip()[:300], exitcode=p["exitcode"], process=p["process"], root_cause=True,
                       launcher="mpirun", ranks=",".join(map(str, ranks)))
            return True
        return bool(_BANNER.match(line))

    def row_op(self, redop: str | None) -> str | None:
        """The op of a row: a file name's op only where the table's redop agrees with it."""
        if self.op is not None and self.op_from_name and redop is not None:
            if (redop == "none") != (self.op in _NO_REDOP):
                return {"sum": "allreduce"}.get(redop)
        return self.op or {"sum": "allreduce"}.get(redop or "", None)


def read_nccl_tests(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.NCCL_TESTS)
    state = _Tests(read)
    for rec in records(read, GRAMMAR):
        number, line = rec.number, rec.text
        if state.line(number, line):
            read.used += 1
        elif (fields := read.table_row(number, line, state.columns)) is not None:
            _row(read, number, state, fields)
    read.meta.nccl_tests = state.tables
    gpus = state.gpus
    if gpus:
        hosts = sorted({g["host"] for g in gpus.values()})
        read.meta.update(gpus=[gpus[r] for r in sorted(gpus)], gpu_count=len(gpus), world_size=len(gpus),
                         world_size_from="nccl-tests device table (ranks)", backend="nccl",
                         mode=Mode.MULTI_GPU if len(gpus) > 1 else Mode.SINGLE_GPU, hosts=hosts, nodes=len(hosts),
                         nodes_from="nccl-tests device table (hosts)",
                         ranks_by_host={h: sorted(r for r, g in gpus.items() if g["host"] == h) for h in hosts})
    return read.result()


def _int(text: str | None) -> int | None:
    value = to_float(text or "")
    return int(value) if value is not None and value == value and abs(value) < 2**63 else None


def _row(read: Read, number: int, state: _Tests, fields: list[str]) -> None:
    # The header names time/algbw/busbw twice: out-of-place first, in-place second.
    first = {}
    places: list[dict] = [{}, {}]
    seen: dict[str, int] = {}
    for name, value in zip(state.columns, fields, strict=True):
        k = seen.get(name, 0)
        seen[name] = k + 1
        if name in ("time", "algbw", "busbw", "#wrong", "error"):
            places[min(k, 1)][name] = value
        else:
            first[name] = value
    size = _int(first.get("size"))
    if size is None:
        read.note(number, f"value does not convert: size {first.get('size')!r}", " ".join(fields))
        return
    row_op = state.row_op(first.get("redop"))
    group, table = state.group, state.table
    for place, values in zip(("out-of-place", "in-place"), places, strict=True):
        if not values:
            continue
        t, alg, bus = (to_float(values.get(k, "")) for k in ("time", "algbw", "busbw"))
        if t is None:
            read.note(number, f"value does not convert: {place} time {values.get('time')!r}", " ".join(fields))
        wrong = values.get("#wrong", values.get("error"))
        read.rows["comm"].append({
            "rank": None, "step": None, "op": row_op, "size_bytes": size,
            "duration_ms": t / 1000.0 if t is not None else None,
            "algbw_mb_s": alg * _GB if alg is not None else None, "busbw_mb_s": bus * _GB if bus is not None else None,
            "group_size": group or None, "source": f"{read.label}:{number}", "placement": place,
            "count": _int(first.get("count")), "dtype": first.get("type"),
            "redop": first.get("redop"), "wrong": wrong, "table": table,
        })
