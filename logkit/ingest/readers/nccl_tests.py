"""nccl-tests output (``all_reduce_perf`` and friends): every result table of a file -> ``comm``.

Each data row gives two ``comm`` rows, out-of-place and in-place (``placement``), with
``size_bytes``, ``duration_ms`` (the table's time in us / 1000), ``algbw_mb_s`` and
``busbw_mb_s`` (GB/s x 1000: nccl-tests' GB is 10^9 bytes, our MB 10^6), ``group_size``
(the ranks listed under ``# Using devices``), ``op`` from the binary's name where the file
names it (a command line, the file name: ``all_reduce_perf``, or ``..._all_gather.log`` where
no command line was kept and the table's ``redop`` agrees), else from the table's ``redop``.
The ``# Avg bus bandwidth`` of each table goes to ``meta.nccl_tests``; the ``# Using
devices`` lines (``#  Rank  0 Group  0 Pid 123 on node-a device  0 [0x07] NVIDIA H100 ...``, and
the older form without ``Group``) give ``meta.gpus`` (rank, host, GPU name), ``gpu_count``,
``world_size``, ``hosts``, ``nodes`` (the distinct hosts) and ``ranks_by_host``, each stated with
its ``_from`` and its lines in ``meta.facts_source``; a table the file ends inside (its last line a device
line, or one cut short) may go on past the file: its ranks and hosts are then lower bounds. A run that fails says so: ``host: Test
NCCL failure ... '<reason>'`` and ``.. host pid P: Test failure`` give an ``nccl_error`` event
(with the ranks of that pid, from the device table), and the MPI launcher's "first process to
exit" a ``child_failed`` event (``root_cause``).

Rows kept without the header above them (a log cut short, a test harness's excerpt) are read with
nccl-tests' own columns (``src/common.cu``: size count type redop root, then time algbw busbw #wrong
out-of-place and in-place), and a diagnostic says so. A row printed in pieces around NCCL's own lines
(``NCCL_DEBUG_SUBSYS=COLL``: its size ... root, then each placement's part, NCCL's records between them and
glued onto the pieces without a line break) is put back together as one row citing its first line
(``cut_glued``, ``_Tests.piece``). Output as users paste it is read as it is: behind launcher prefixes (``[1,0]<stdout>:``, taken
off by ``prefixes``), indented as in a README, in a markdown quote (``> ``), or with its ``#``
eaten by markdown (`` nThread 1 nGpus 1 ...``, `` Using devices``). NCCL_DEBUG=INFO lines among
the output say the network between the hosts: ``Using network IB``, the NICs (``NET/IB : Using
[0]mlx5_0:1/IB``), a NIC's ``speed=`` (Mb/s, NCCL's ``NET/IB: [0] mlx5_0:...`` line) or an
``ibstat``/``ibstatus`` rate pasted with them (``meta.network``, ``nics``, ``nic_provider``,
``nic_count``, ``link_speed_gbps``), the reference of a run over several hosts; and, as in a console
capture (``nccl_procs``), its processes: an ``nccl_init`` event per communicator (comm id, Init START /
COMPLETE, nRanks / nNodes / localRanks), NCCL's warnings with their error traces, the CUDA devices per host.
The device table's facts are the benchmark's and come after NCCL's (a table the file ends inside yields to
a world size NCCL's nranks states, or the launcher's command line: ``mpirun -np 8 ... all_reduce_perf``,
its processes x nThread x nGpus, ``launch_command``; so does a file without a table).
"""

from __future__ import annotations

import re
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult
from logkit.ingest.readers.formats import NCCL_AFTER_HOST, FileFormat
from logkit.ingest.readers.launch_command import Launch, launched, ranks_started
from logkit.ingest.readers.nccl import GLUED, parse_nccl_debug
from logkit.ingest.readers.nccl_procs import NcclProcs
from logkit.ingest.readers.normalise import Grammar, records
from logkit.ingest.readers.torch_lines import parse_prte
from logkit.schema.values import to_float
from logkit.schema.vocab import EventKind, Mode

OPS = {"all_reduce": "allreduce", "all_gather": "allgather", "reduce_scatter": "reduce_scatter",
       "broadcast": "broadcast", "reduce": "reduce", "alltoall": "alltoall", "sendrecv": "sendrecv",
       "gather": "gather", "scatter": "scatter", "hypercube": "hypercube"}
_BINARY = re.compile(r"\b(?P<op>all_reduce|all_gather|reduce_scatter|broadcast|reduce|alltoall|sendrecv|gather"
                     r"|scatter|hypercube)_perf(?:_mpi)?\b")
# '#' is optional in front of nccl-tests' own lines: markdown eats it when output is pasted bare
_NTHREAD = re.compile(r"^#?\s*nThread (?P<threads>\d+) nGpus (?P<gpus>\d+)")
# a device line the file cut short ("#  Rank 12 Group  0 Pid   18"): the table goes on past the file
_DEVICE_HEAD = re.compile(r"^#?\s*Rank\s+\d+(?: Group\s+\d+)?(?: Pid\b.*)?$")
_HEADER = re.compile(r"^#?\s*size\s+count\s+type\b")
_DEVICE = re.compile(r"^#?\s*Rank\s+(?P<rank>\d+)(?: Group\s+\d+)? Pid\s+(?P<pid>\d+) on\s+(?P<host>\S+) device\s+"
                     r"(?P<dev>\d+)(?:\s+\[[^\]]*\]\s+(?P<name>.+?))?\s*$")
# a result row as nccl-tests prints it (src/common.cu: size, count, type, redop, root, then time, algbw, busbw,
# #wrong out-of-place and in-place), for rows kept without the header above them (a log cut, a harness's excerpt)
COLUMNS = ["size", "count", "type", "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
           "#wrong"]
ROW = re.compile(r"^\s*\d+\s+\d+\s+[a-z]\w*\s+(?:sum|prod|max|min|avg|none|premulsum|mulsum)\s+-?\d+"
                 r"(?:\s+(?:[\d.]+|N/A)){3}\s+(?:\d+|N/A)(?:\s+(?:[\d.]+|N/A)){3}\s+(?:\d+|N/A)\s*$")
# A row printed in pieces around NCCL's own lines (NCCL_DEBUG_SUBSYS=COLL: an "AllReduce: opCount ..." line per
# call): nccl-tests writes the size, count, type, redop, root first, then each placement's time, algbw, busbw,
# #wrong as it is measured, and NCCL's lines land between them, the first glued on without a line break
# ("...  sum      -1mew0:64904:64904 [1] NCCL INFO AllReduce: ..."). The pieces, and where a glued record begins:
_HEAD_PIECE = re.compile(r"^\d+\s+\d+\s+[a-z]\w*\s+(?:sum|prod|max|min|avg|none|premulsum|mulsum)(?:\s+-?\d+)?$")
_PART_PIECE = re.compile(r"^(?:[\d.]+|N/A)\s+(?:[\d.]+|N/A)\s+(?:[\d.]+|N/A)\s+\S+$")
_NCCL_AT = re.compile(NCCL_AFTER_HOST + r"(?:NCCL )?(?:INFO|WARN) ")  # a record's header after its host
_AVG = re.compile(r"^#?\s*Avg bus bandwidth\s*:\s*(?P<bw>\S+)")
_COMMENT = re.compile(r"^#|^(?:Using devices|Out of bounds values|Blocking Enabled|Collective test|nccl-tests version"
                      r"|out-of-place\s+in-place|\(B\)\s+\(elements\))")
# NCCL's NIC line with its speed (Mb/s; NCCL_DEBUG_SUBSYS=NET, or INFO in newer versions)
_NIC_SPEED = re.compile(r"^NET/IB ?: \[\d+\] (?P<name>[\w.-]+):\S*?:?(?P<port>\d+)/(?P<link>IB|RoCE)\b.*?"
                        r"\bspeed=(?P<speed>\d+)")
# ibstat's "Rate: 400", ibstatus' "rate: 200 Gb/sec (4X HDR)", pasted beside the run
_IB_RATE = re.compile(r"^[Rr]ate:\s*(?P<rate>\d+(?:\.\d+)?)(?: Gb/sec\b.*)?\s*$")
# a command line (behind a shell prompt: "$ ", "user@host:~/dir# ", a conda env's "(base) "), the banner,
# a markdown fence
_META_LINE = re.compile(r"^(?:\$ |(?:\(\S+\) )?[\w.-]+@[\w.-]+:\S*[#$] |\s*(?:mpirun|srun|\./|/)\S*.*_perf|nccl-tests|```)")
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
_PASTE = re.compile(r"^[ \t]*(?:>[ \t]?)*[ \t]*")  # indentation, markdown quote marks
GRAMMAR = Grammar(re.compile(r"#|\s*\d+\s+\d+\s+\w+|\$ |\s*(?:mpirun|srun|\./|/)\S*|[^\s:]+:\d+:\d+ \[\d+\] "
                             r"|NCCL version|[\w.-]+: Test |.*Process name:"))


def _piece(text: str) -> bool:
    text = text.strip()
    return _HEAD_PIECE.match(text) is not None or _PART_PIECE.match(text) is not None


def cut_glued(line: str, hosts: set[str]) -> tuple[str, str] | None:
    """A row's piece and the NCCL record glued after it (``(piece, record)``), or None. The host name of the
    record is read back from the glued text: a host the file names elsewhere, else the shortest piece that reads
    as one (``-1`` of ``-1mew0``: a row's root, then host ``mew0``)."""
    m = _NCCL_AT.search(line)
    if m is None:
        return None
    start = max(line.rfind(" ", 0, m.start()), line.rfind(":", 0, m.start())) + 1
    if start == 0:
        return None  # the line begins with the record: nothing glued
    glued = line[start:m.start()]
    splits = [k for k in range(1, len(glued)) if _piece(line[:start + k])]
    known = [k for k in splits if glued[k:] in hosts]
    if not splits:
        return None
    k = (known or splits)[0]
    return line[:start + k].strip(), line[start + k:]


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
        self.table = 0
        self.ranks: set[int] = set()  # the ranks of the current table
        self.hosts: set[str] = set()
        self.tables: list[dict] = []
        self.gpus: dict[int, dict] = {}
        self.pids: dict[int, list[int]] = {}  # pid -> its ranks (one process may drive several GPUs)
        self.per_process = 1  # ranks per MPI process: nThread x nGpus
        self.per_line: int | None = None  # the line that said nThread and nGpus
        self.launch: tuple[Launch, int] | None = None  # the launcher's command line (mpirun -np 8 ...), its line
        self.device_lines: list[int] = []
        self.placed: dict[int, set[str]] = {}  # rank -> the hosts that list it
        self.last = 0  # the file's last line with text (a device table it ends inside may go on)
        self.torn_device: int | None = None  # the line of a device line cut short
        self.pending: tuple[int, list[str]] | None = None  # (line, cells) of a row printed in pieces
        self.net = _Network(read)

    def line(self, number: int, line: str) -> bool:
        if (b := _BINARY.search(line)) is not None and not line.lstrip().startswith("#  "):
            self.op, self.op_from_name = OPS[b["op"]], False  # a command line naming the binary
            if self.launch is None and (launch := launched(line, _BINARY)) is not None:
                self.launch = (launch, number)
        if (per := _NTHREAD.match(line)) is not None:
            self.table, self.ranks, self.hosts, self.columns = self.table + 1, set(), set(), None
            self.per_process, self.per_line = int(per["threads"]) * int(per["gpus"]), number
            return True
        if (d := _DEVICE.match(line)) is not None:
            self.ranks.add(int(d["rank"]))
            self.hosts.add(d["host"])
            self.placed.setdefault(int(d["rank"]), set()).add(d["host"])
            self.gpus.setdefault(int(d["rank"]), {"index": int(d["rank"]), "host": d["host"],
                                                  "device": int(d["dev"]), "name": d["name"]})
            self.pids.setdefault(int(d["pid"]), []).append(int(d["rank"]))
            self.device_lines.append(number)
            return True
        if _DEVICE_HEAD.match(line):
            self.torn_device = number
            self.read.note(number, "nccl-tests: a device line cut short (the table goes on past it)", line)
            return True
        if _HEADER.match(line):
            self.columns = line.lstrip("#").split()
            return True
        if (a := _AVG.match(line)) is not None:
            self.tables.append({"op": self.op, "table": self.table, "avg_busbw_gb_s": to_float(a["bw"]),
                                "group_size": self.group or None, "hosts": sorted(self.hosts)})
            return True
        if self.net.line(number, line):
            return True
        if _COMMENT.match(line) or _META_LINE.match(line):
            return True
        return self._failure(number, line)

    @property
    def group(self) -> int:
        """The ranks of the current table's collectives (a rank listed by several hosts counts once)."""
        return len(self.ranks)

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

    def piece(self, number: int, line: str) -> tuple[int, list[str]] | None:
        """A row printed in pieces: its head (size ... root) opens it, each placement's part adds to it; the
        row's line (its head's) and its cells once complete (no cells while not yet), None for a line that is
        no piece. A row left incomplete when another opens is said in a diagnostic."""
        columns = self.columns
        if columns is None or not _piece(line):
            return None
        cells = line.split()
        if _HEAD_PIECE.match(line) is not None:
            if self.pending is not None:
                self.read.note(self.pending[0], "nccl-tests: a row printed in pieces left incomplete", line)
            self.pending = (number, cells)
            return number, []
        if self.pending is None:
            return None
        head, held = self.pending
        held = held + cells
        if len(held) > len(columns):
            self.pending = None
            return None
        if len(held) < len(columns):
            self.pending = (head, held)
            return head, []
        self.pending = None
        return head, held

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
        number = rec.number
        line = rec.text[_PASTE.match(rec.text).end():].rstrip()  # a paste's own indentation and quote marks
        if line:
            state.last = rec.last or number
        if state.columns is not None and (cut := cut_glued(line, state.hosts | state.net.hosts)) is not None:
            line = cut[0]  # a row's piece with an NCCL record glued after it: the record is read as NCCL's
            state.net.line(number, cut[1])
        if not line:
            read.used += 1
        elif (piece := state.piece(number, line)) is not None:
            read.used += 1
            if piece[1]:
                _row(read, piece[0], state, piece[1])
        elif state.line(number, line):
            read.used += 1
        elif state.columns is None and ROW.match(line) is not None:
            # rows without their header: nccl-tests' own columns, said once
            state.columns = list(COLUMNS)
            read.note(number, "nccl-tests rows without their header: read as nccl-tests prints its columns "
                              f"({' '.join(COLUMNS)})", line)
            _row(read, number, state, line.split())
        elif (fields := read.table_row(number, line, state.columns)) is not None:
            _row(read, number, state, fields)
    read.meta.nccl_tests = state.tables
    state.net.procs.finish()  # NCCL's own account first: the device table's facts are the benchmark's
    _device_meta(read, state)
    state.net.meta(read)
    return read.result()


def _device_meta(read: Read, state: _Tests) -> None:
    """What the device table states: the ranks, their GPUs, their hosts."""
    gpus = state.gpus
    if not gpus:  # no table: the size the launcher's command states, where NCCL's lines state none
        if (started := _started(read, state)) is not None and read.meta.world_size is None:
            read.meta.update(world_size=started[0], world_size_from=started[1], backend="nccl",
                             facts_source={**(read.meta.facts_source or {}), "world_size": f"{read.label}:{started[2]}"})
        return
    hosts = sorted(set().union(*state.placed.values()))
    first, last = min(state.device_lines), max(state.device_lines)
    where = f"{read.label}:{first}" + (f"-{last}" if last > first else "")
    said = f"nccl-tests' device table ({where})"
    nodes, nodes_from = len(hosts), f"stated: {len(hosts)} distinct host(s) in {said}"
    repeated = sorted(r for r, named in state.placed.items() if len(named) > 1)
    if repeated:
        # the same ranks on several hosts: each host ran a test of its own (nccl-tests without MPI,
        # or mpirun starting copies of a non-MPI build); no collective crossed hosts
        nodes = 1
        nodes_from = (f"stated: rank(s) {_span(repeated)} listed by each of {len(hosts)} hosts in {said}: each host "
                      "ran a test of its own (nccl-tests without MPI), so a collective spans 1 host")
        read.note(first, f"nccl-tests: the same rank(s) ({_span(repeated)}) on {len(hosts)} hosts "
                         f"({', '.join(hosts)}): independent tests, one per host, not one job over them")
    world, world_from, world_at = len(gpus), f"stated: {len(gpus)} rank(s) in {said}", first
    hosts_from = f"stated: the hosts of {said}"
    if max(last, state.torn_device or 0) == state.last and not repeated:
        # the file ends inside the table (a paste or a capture cut there): the ranks listed are some of the run's
        world_from = (f"inferred (lower bound): {len(gpus)} rank(s) in {said}, which the file ends inside (more "
                      "may follow)")
        nodes_from = f"inferred (lower bound): {len(hosts)} distinct host(s) in {said}, which the file ends inside"
    if max(gpus) + 1 > world:  # ranks missing from the table (an excerpt, a cut paste): never below a rank shown
        world = max(gpus) + 1
        world_from = f"inferred (lower bound): highest rank in {said} + 1; {world - len(gpus)} rank(s) not listed"
        more = sorted(state.net.hosts - set(hosts))
        if more:  # the unlisted ranks' hosts, where NCCL's lines name them
            hosts = sorted(set(hosts) | set(more))
            hosts_from += f" and of NCCL's lines ({', '.join(more)})"
        if not repeated:
            nodes = len(hosts)
            nodes_from = (f"inferred (lower bound): {nodes} host(s) named; the device table lists {len(gpus)} of at "
                          f"least {world} ranks")
    if world_from.startswith("inferred") and (started := _started(read, state)) is not None and started[0] >= world:
        world, world_from, world_at = started  # the launcher's command line states what a cut table cannot
    held = read.meta
    sources = {**(held.facts_source or {}), **{k: f"{read.label}:{first}" for k in ("gpu_count", "hosts")}}
    if world_from.startswith("inferred") and str(held.world_size_from).startswith("stated") \
            and (held.world_size or 0) >= world:
        world, world_from = held.world_size, held.world_size_from  # NCCL's nranks states what the table cannot
    else:
        sources["world_size"] = f"{read.label}:{world_at}"
    if nodes_from.startswith("inferred") and str(held.nodes_from).startswith("stated") and (held.nodes or 0) >= nodes:
        nodes, nodes_from = held.nodes, held.nodes_from  # NCCL's nNodes
    else:
        sources["nodes"] = f"{read.label}:{first}"
    read.meta.update(gpus=[gpus[r] for r in sorted(gpus)], gpu_count=len(gpus), world_size=world,
                     world_size_from=world_from,
                     gpu_count_from=f"stated: {len(gpus)} GPU(s) in {said}", backend="nccl",
                     mode=Mode.MULTI_GPU if len(gpus) > 1 else Mode.SINGLE_GPU, hosts=hosts,
                     hosts_from=hosts_from, nodes=nodes, nodes_from=nodes_from,
                     ranks_by_host={h: sorted(r for r, named in state.placed.items() if h in named) for h in hosts},
                     facts_source=sources)


def _started(read: Read, state: _Tests) -> tuple[int, str, int] | None:
    if state.launch is None:
        return None
    per = (state.per_process, state.per_line) if state.per_line is not None else None
    return ranks_started(*state.launch, read.label, per)


def _span(ranks: list[int]) -> str:
    return f"{ranks[0]}-{ranks[-1]}" if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)) \
        else ", ".join(map(str, ranks))


class _Network:
    """What NCCL_DEBUG=INFO lines (and an ibstat rate) among the output say of the network between
    the hosts."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.network: tuple[str, int] | None = None  # (name, line)
        self.nics: dict[tuple, dict] = {}  # (name, port) -> the NIC
        self.speeds: dict[str, float] = {}  # NIC -> Gb/s
        self.rates: list[float] = []
        self.facts: dict = {}
        self.where: dict[str, int] = {}
        self.hosts: set[str] = set()  # the hosts NCCL's lines name
        # every NCCL line goes to the processes too: their communicators (nccl_init events: comm id, Init
        # COMPLETE, nRanks / nNodes / localRanks), warnings and error traces, as a console capture's are read
        self.procs = NcclProcs(read)

    def line(self, number: int, line: str) -> bool:
        if line.startswith("NCCL version "):  # printed by rank 0 without NCCL's line header
            self.facts.setdefault("nccl_version", line.split()[2])
            return True
        if (r := _IB_RATE.match(line)) is not None:
            self.rates.append(float(r["rate"]))
            self.where.setdefault("link_speed_gbps", number)
            return True
        found = [n for part in GLUED.split(line) if (n := parse_nccl_debug(part)) is not None]
        for n in found:
            self._nccl(number, n)
        return bool(found)

    def _nccl(self, number: int, n: dict) -> None:
        what = n["what"]
        self.hosts.add(n["host"])
        self.procs.line(number, n, None)
        if what == "warn":  # its event is the processes' (with its error trace)
            if n.get("ib") is False:  # "Failed to open libibverbs": no IB
                self.facts.setdefault("ib", False)
            return
        if what == "network" and self.network is None:
            self.network = (n["network"], number)
        elif what == "nics":
            for nic in n["nics"]:
                self.nics.setdefault((nic["name"], nic["port"]), nic)  # a device's two ports are two NICs
            self.where.setdefault("nics", number)
            for key in ("provider", "nic_count", "ib"):
                if n.get(key) is not None:
                    self.facts.setdefault(key, n[key])
        elif what == "version":
            self.facts.setdefault("nccl_version", n["version"])
        elif what == "driver":  # "cudaDriverVersion 12040": the CUDA version the driver supports
            self.facts.setdefault("cuda_driver_version", n["driver"])
            self.where.setdefault("cuda_driver_version", number)
        elif (s := _NIC_SPEED.match(n["message"])) is not None:
            self.speeds[s["name"]] = int(s["speed"]) / 1000.0  # NCCL's speed is in Mb/s
            self.where.setdefault("link_speed_gbps", number)

    def meta(self, read: Read) -> None:
        meta, label = read.meta, read.label
        sources = dict(meta.facts_source or {})
        if self.network is not None:
            meta.update(network=self.network[0],
                        network_from=f"stated: NCCL 'Using network {self.network[0]}' ({label}:{self.network[1]})")
            sources["network"] = f"{label}:{self.network[1]}"
        if self.nics:
            meta.nics = list(self.nics.values())
            sources["nics"] = f"{label}:{self.where['nics']}"
            links = {nic["link"] for nic in self.nics.values()}
            if meta.network is None and len(links) == 1:
                meta.network = "Socket" if links == {"Socket"} else "IB"
                meta.network_from = f"stated: the NICs NCCL set up ({label}:{self.where['nics']})"
        if "provider" in self.facts:
            meta.nic_provider = self.facts["provider"]
        if "nic_count" in self.facts:
            meta.nic_count = self.facts["nic_count"]
        if "ib" in self.facts:
            meta.ib = self.facts["ib"]
        if "nccl_version" in self.facts:
            meta.nccl_version = self.facts["nccl_version"]
        if "cuda_driver_version" in self.facts:
            meta.cuda_driver_version = self.facts["cuda_driver_version"]
            sources["cuda_driver_version"] = f"{label}:{self.where['cuda_driver_version']}"
        rates = set(self.speeds.values()) | set(self.rates)
        if len(rates) == 1:  # one rate for every NIC named: the link rate (several: none is the run's)
            meta.link_speed_gbps = rates.pop()
            sources["link_speed_gbps"] = f"{label}:{self.where['link_speed_gbps']}"
        if sources:
            meta.facts_source = sources


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
