"""Lines that torch, its launchers and training frameworks print when a distributed run fails
(foreign grammar: written by others, read here one kind per function; each returns a dict of
what the line says, or None).

- ProcessGroupNCCL's watchdog: a timeout (``parse_watchdog``: old and new shapes, anywhere in a
  line; a line cut short gives what it holds, ``complete`` False), the work it stopped at
  (``parse_work``: ``detected by watchdog at work: N, last enqueued ..: M, last completed ..: K``
  and the older ``Timeout at NCCL work`` / newer ``failure detected by watchdog at work sequence
  id`` wordings), a watchdog hang that terminates the process (``parse_hang``);
- TORCH_DISTRIBUTED_DEBUG's collective mismatch (``parse_mismatch``: sequence number, ranks, ops,
  each rank's tensor shape and dtype, and the fields torch says differ, with both values);
- the launchers: torchrun's agent (``agent_records``: ``Sending process P closing signal
  SIGTERM``, ``failed (exitcode: -9) local_rank: 4 (pid: P)``; several may be glued on one
  line), DeepSpeed's (``Killing subprocess P``, ``... --local_rank=1 ... exits with return code
  = -11``), PALS/mpich's ``host: rank 2 died from signal 6``, prterun's first failed process;
- CUDA out of memory (``parse_oom``: what was asked, the GPU's capacity and free memory, what PyTorch holds);
- NCCL errors raised into Python (``NCCL error ..., <reason>, NCCL version X``), the c10d
  rendezvous timing out, a port already in use, torch RPC agents losing a peer;
- progress: tqdm bars (``parse_bar``: a training bar's loss and s/it), Megatron's ``iteration N/M | ... | lm loss: ...`` lines, transformers'
  "Running training" block.

A negative exit code is the signal that ended the process (``SIGNALS``: -9 SIGKILL, -6 SIGABRT).
"""

from __future__ import annotations

import re

from logkit.ingest.readers.iteration_lines import seconds_of
from logkit.schema.values import to_float
from logkit.schema.vocab import EventKind, FailureCause

SIGNALS = {1: "SIGHUP", 2: "SIGINT", 4: "SIGILL", 6: "SIGABRT", 7: "SIGBUS", 8: "SIGFPE", 9: "SIGKILL",
           11: "SIGSEGV", 13: "SIGPIPE", 15: "SIGTERM"}

_WATCHDOG = re.compile(r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\]\s*Watchdog caught coll")
# a field of a watchdog line is read only when its delimiter follows it (a cut line ends mid-number)
_WORK_FIELDS = {"seq": r"SeqNum=(\d+)[,)]", "op": r"OpType=(\w+)[,)]", "numel": r"NumelIn=(-?\d+)[,)]",
                "numel_out": r"NumelOut=(-?\d+)[,)]", "timeout_ms": r"Timeout\(ms\)=(\d+)\)",
                "elapsed_ms": r"ran for (\d+) milliseconds before timing out"}
_WORK_RE = {k: re.compile(v) for k, v in _WORK_FIELDS.items()}
_PG = r"\[PG (?:ID )?(?P<pg>\d+)(?: PG GUID \d+)?\s*(?:\((?P<pg_name>[^)]*)\))?\s*Rank (?P<rank>\d+)\]\s*"
WORK_START = re.compile(_PG + r"(?:Exception \(either an error or timeout\) detected|Timeout at NCCL work"
                        r"|failure detected by watchdog)")
_WORK = re.compile(_PG + r"(?:Exception \(either an error or timeout\) detected by watchdog at work|Timeout at NCCL work"
                   r"|failure detected by watchdog at work sequence id): (?P<work>\d+),? (?:PG status: )?"
                   r"last enqueued (?:NCCL )?work: (?P<enqueued>\d+), last completed (?:NCCL )?work: (?P<completed>\d+)")
_HANG = re.compile(_PG + r".*?Terminating the process after attempting to dump debug info, due to "
                   r"(?P<why>ProcessGroupNCCL watchdog hang|[^.]+)")
MISMATCH = re.compile(r"Detected mismatch between collectives")
# ProcessGroupWrapper.cpp: 1.9/1.10 name one side ("is running inconsistent collective"); later both sides,
# with "SequenceNumber=N, OpType=" (and "SequenceNumber=NOpType=", no comma, for a collective of no tensors).
_FINGERPRINT = re.compile(r"Rank (?P<rank>\d+) is running (?:inconsistent )?collective: CollectiveFingerPrint\("
                          r"(?:SequenceNumber=(?P<seq>\d+),? ?)?OpType=(?P<op>\w+)"
                          r"(?:, TensorShape=\[(?P<shape>[^\]]*)\])?(?:, TensorDtypes=\[?(?P<dtype>\w+))?")
_DIFFERS = re.compile(r"Collectives differ in the following aspects:(?P<rest>.*)$")
_DIFF = re.compile(r"(?P<field>Sequence number|Op type|(?:Tensor )*(?:shapes|dtypes|device types)):\s*"
                   r"(?P<a>.*?)\s*vs\s*(?P<b>.*?)(?=\s{2,}|\s*$|\s+(?:Tensor |Op type|Sequence number))")
_FIELD_NAMES = {"Sequence number": "seq", "Op type": "op", "shapes": "shape", "dtypes": "dtype",
                "device types": "device"}
_SIGTERM = re.compile(r"Sending process (?P<pid>\d+) closing signal (?P<signal>SIG\w+)")
_AGENT_FAILED = re.compile(r"failed \(exitcode: (?P<code>-?\d+)\) local_rank: (?P<local>\d+) \(pid: (?P<pid>\d+)\)"
                           r"(?: of binary: ?(?P<binary>\S*))?")
_DS_KILL = re.compile(r"Killing subprocess (?P<pid>\d+)")
_DS_EXIT = re.compile(r"--local_rank=(?P<local>\d+).*?\bexits with return code = (?P<code>-?\d+)")
_DIED = re.compile(r"^(?P<host>[\w.-]+): rank (?P<rank>\d+) died from signal (?P<sig>\d+)(?P<core> and dumped core)?")
_PRTE = re.compile(r"Process name: \[(?P<proc>[^\]]*@\d+,(?P<rank>\d+))\]\s+Exit code:\s+(?P<code>-?\d+)")
_NCCL_ERROR = re.compile(r"NCCL error(?: in: (?P<where>\S+?))?[:,] (?P<error>.+?), NCCL version (?P<version>[\w.+-]+)")
_RANK_TAG = re.compile(r"\[(?:PG [^\]]*?)?Rank (?P<rank>\d+)\]")
_RENDEZVOUS = re.compile(r"connect\(\) timed out\. Original timeout was (?P<ms>\d+) ms")
_IN_USE = re.compile(r"failed to (?:listen on|bind to) (?P<addr>\S+?):(?P<port>\d+) \(errno: (?P<errno>\d+) - "
                     r"Address already in use\)")
_RPC = re.compile(r"RPC agent for (?P<agent>\d+) encountered error when [^:]*? (?:to|from) (?P<peer>\d+): (?P<error>.*)")
_PEER_CLOSED = re.compile(r"Connection closed by remote peer (?P<peer>\S+)")
_TQDM = re.compile(r"(?:^|\||\s)(?P<n>\d+)/(?P<total>\d+) \[\d+:\d+(?::\d+)?<")
_MEGATRON = re.compile(r"iteration\s+(?P<it>\d+)/\s*(?P<of>\d+) \|(?P<fields>.*)$")
_MEGATRON_FIELDS = {"elapsed time per iteration (ms)": "step_time_ms", "learning rate": "learning_rate",
                    "global batch size": "total_batch_size", "lm loss": "loss", "grad norm": "grad_norm",
                    "lm_loss": "loss"}  # Megatron-DeepSpeed writes "lm_loss"
_DS_VERSION = re.compile(r"DeepSpeed info: version=(?P<v>[^,\s]+)")
# Megatron: "[Rank 0] (after 1 iterations) memory (MB) | allocated: 17657.19 | max allocated: ..."
_MEGATRON_MEMORY = re.compile(r"\[Rank (?P<rank>\d+)\] \(after \d+ iterations\) memory \(MB\)(?P<fields>.*)$")
_MEMORY_FIELD = re.compile(r"\|\s*([a-z ]+?):\s*([0-9.]+)")
_DP = re.compile(r"data parallel size: (\d+)")
_IB_RATE = re.compile(r"^\s*[Rr]ate:\s*(?P<rate>\d+(?:\.\d+)?)(?: Gb/sec\b.*)?\s*$")
_OF = re.compile(r"\b(?:worker|rank|process) (?P<rank>\d+) of (?P<size>\d+)\b", re.I)
_TORCHRUN = re.compile(r"\b(?:torchrun|torch\.distributed\.(?:run|launch))\b")
# a launcher's flags, as typed (--nnodes=2, --nnodes 2, --nnodes="2"): not the 0 of 0x10, not an elastic 1:4
_FLAG = r"[= ]['\"]?(?P<n>\d+)['\"]?(?![:\w.])"
_NPROC = re.compile(r"--nproc[_-]per[_-]node" + _FLAG)
_NNODES = re.compile(r"--nnodes" + _FLAG)
_LAUNCH_FLAGS = {"num_processes": re.compile(r"--num[_-]processes" + _FLAG),  # accelerate launch: all ranks
                 "num_machines": re.compile(r"--num[_-]machines" + _FLAG),  # accelerate launch: nodes
                 "num_gpus": re.compile(r"--num[_-]gpus" + _FLAG),  # deepspeed: GPUs per node
                 "num_nodes": re.compile(r"--num[_-]nodes" + _FLAG)}  # deepspeed: nodes
# WORLD_SIZE=8, world_size = 2, world_size: 2, 'world_size': 2, "world_size": 2 (not local_world_size)
_WORLD = re.compile(r"(?<![\w.])world_size['\"]?\s*[:=]\s*['\"]?(?P<n>\d+)\b", re.I)
# accelerate's state ("Num processes: 8"), a launcher's NNODES=2, "Num GPUs: 8"
_NUM_PROCESSES = re.compile(r"\bNum processes\s*[:=]\s*(?P<n>\d+)\b")
_NNODES_ENV = re.compile(r"(?<![\w.])NNODES\s*=\s*['\"]?(?P<n>\d+)\b")
_NUM_GPUS = re.compile(r"\bNum(?:ber of)? GPUs\s*[:=]\s*(?P<n>\d+)\b", re.I)
# (words one of its lines holds, the pattern, the fact): cheap tests first, every line comes here
_SIZE_LINES = ((("orld", "ORLD"), _WORLD, "world_size_said"), (("Num processes",), _NUM_PROCESSES, "num_processes_said"),
               (("NNODES",), _NNODES_ENV, "nnodes"), (("GPUs",), _NUM_GPUS, "gpus_said"))
_THROUGHPUT = re.compile(r"Throughput: (?P<rate>\d+(?:\.\d+)?) (?:images|samples)/s"
                         r"(?:, Batch size: (?P<batch>\d+))?(?:, Num of GPUs: (?P<gpus>\d+))?"
                         r"(?:, Total time: (?P<time>[0-9.]+) s)?")


# Why a process failed, as the line that says it reads (cause, pattern), tried in this order: a
# script that cannot be opened (python's own message, exit code 2), an import, CUDA out of memory
# (torch.OutOfMemoryError / torch.cuda.OutOfMemoryError / "CUDA error: out of memory"), another CUDA
# error, an NCCL error raised into Python (ncclSystemError, ncclInternalError, ncclRemoteError,
# ncclUnhandledCudaError, ncclInvalidUsage... and the reason torch prints: after "NCCL error in: file:line," or,
# in the watchdog's what() of torch 2.x, straight after "NCCL error: "), a signal named by
# torchrun's failure entry ("Signal 9 (SIGKILL) received by PID 14750").
_CAUSES: tuple[tuple[FailureCause, re.Pattern], ...] = (
    (FailureCause.FILE_NOT_FOUND, re.compile(r"\bcan't open file '(?P<what>[^']*)': \[Errno 2\] No such file or directory")),
    (FailureCause.MODULE_NOT_FOUND, re.compile(r"\bModuleNotFoundError: No module named '?(?P<what>[\w.]+)'?")),
    (FailureCause.IMPORT_ERROR, re.compile(r"^(?:[\w.]+\.)?ImportError: (?P<what>.+)$")),
    (FailureCause.CUDA_OOM, re.compile(r"(?:OutOfMemoryError|RuntimeError|CUDA error): (?:CUDA )?out of memory")),
    (FailureCause.CUDA_ERROR, re.compile(r"\bCUDA error: (?P<what>.+?)(?:\s*$|\s*CUDA kernel errors)")),
    # (also glued onto whatever another process wrote before it: "DistBackendErrorNCCL error in: ...",
    # "default_pgNCCL error in: ...", "42NCCL error: ...": the strict list of reasons keeps other text out)
    (FailureCause.NCCL_ERROR, re.compile(r"NCCL error(?:\b.*?,|:) (?P<what>unhandled system error|"
                                         r"unhandled cuda error|internal error|remote process exited or there was a "
                                         r"network error|invalid usage|invalid argument)|^(?P<what2>nccl(?:(?:System|"
                                         r"Internal|Remote|UnhandledCuda|InvalidUsage|InvalidArgument)Error|"
                                         r"InvalidUsage|InvalidArgument))\b")),
    (FailureCause.SIGNAL, re.compile(r"\bSignal (?P<num>\d+) \((?P<what>SIG\w+)\) received by PID")),
)
# a launcher's stream tag before a child's line ("[stderr]ModuleNotFoundError: ...")
_STREAM_TAG = re.compile(r"^\[(?:stderr|stdout)\]\s*")
# The words one of those lines holds: a line without any is not tried.
CAUSE_HINTS = ("rror", "ncclInvalid", "can't open file", "out of memory", "received by PID")


def failure_cause(text: str) -> dict | None:
    """Why a process failed, where ``text`` (a line without its prefixes) says it: ``cause`` (a
    ``FailureCause``), ``what`` (the file, module, error or signal named) and ``message`` (the line)."""
    for cause, pattern in _CAUSES:
        if (m := pattern.search(text)) is not None:
            found = m.groupdict()
            what = found.get("what") or found.get("what2")
            # a failure entry's "traceback : Signal 9 ..." field: the signal's own words
            message = text[m.start():].strip() if cause == FailureCause.SIGNAL else _STREAM_TAG.sub("", text.strip())
            return {"cause": cause, "what": what.strip() if what else None, "message": message[:300]}
    return None


def signal_of(code: int | None) -> str | None:
    """The signal a negative exit code says ended the process (Python's and torchrun's convention)."""
    return SIGNALS.get(-code, f"signal {-code}") if code is not None and code < 0 else None


def parse_watchdog(line: str) -> dict | None:
    """A watchdog timeout anywhere in ``line``: rank, op, seq, numel, numel_out, timeout_ms,
    elapsed_ms (None where the line is cut before them), and whether it is ``complete``."""
    m = _WATCHDOG.search(line)
    if m is None:
        return None
    rest = line[m.end():]
    out: dict = {"rank": int(m["rank"])}
    for key, pattern in _WORK_RE.items():
        f = pattern.search(rest)
        out[key] = (f[1] if key == "op" else int(f[1])) if f else None
    out["complete"] = out["elapsed_ms"] is not None
    return out


def parse_work(line: str) -> dict | None:
    """The work a rank's watchdog stopped at: rank, pg, pg_name, seq, last_enqueued, last_completed."""
    m = _WORK.search(line)
    if m is None:
        return None
    return {"rank": int(m["rank"]), "pg": m["pg"], "pg_name": m["pg_name"], "seq": int(m["work"]),
            "last_enqueued": int(m["enqueued"]), "last_completed": int(m["completed"])}


def parse_hang(line: str) -> dict | None:
    m = _HANG.search(line)
    return None if m is None else {"rank": int(m["rank"]), "pg": m["pg"], "pg_name": m["pg_name"], "why": m["why"]}


def parse_mismatch(line: str) -> dict | None:
    """seq (the lowest), ranks, ops, seqs, shapes and dtypes (per rank, in the order the ranks are named) of a
    collective mismatch, and ``differs`` / ``differences``: the fields torch says differ, and
    each with both values (``shape 195812480 vs 51123456``), or None."""
    if MISMATCH.search(line) is None:
        return None
    prints = list(_FINGERPRINT.finditer(line))
    seqs = {int(p["seq"]) for p in prints if p["seq"] is not None}
    out = {"seq": min(seqs) if seqs else None, "ranks": ",".join(p["rank"] for p in prints),
           "ops": ",".join(p["op"] for p in prints), "seqs": ",".join(p["seq"] or "?" for p in prints) or None,
           "shapes": ";".join(f"[{p['shape'].replace(' ', '')}]" if p["shape"] is not None else "?" for p in prints)
           or None,  # "[359, 1, 1435, 16]" kept as "[359,1,1435,16]": ";" and "," alone separate
           "dtypes": ",".join(p["dtype"] or "?" for p in prints) or None, "differs": None, "differences": None}
    if (d := _DIFFERS.search(line)) is not None:
        found = []
        for m in _DIFF.finditer(d["rest"]):
            name = m["field"].replace("Tensor ", "")
            found.append((_FIELD_NAMES.get(name, name), m["a"].strip(), m["b"].strip()))
        if found:
            out["differs"] = ",".join(f for f, _, _ in found)
            out["differences"] = "; ".join(f"{f} {a} vs {b}" for f, a, b in found)
    return out


def mismatches_from_timeouts(timeouts: list[dict]) -> list[dict]:
    """One mismatch per sequence number that timed out with different operations on different ranks."""
    by_seq: dict[int, dict[int, str]] = {}
    for t in timeouts:
        if t.get("seq") is not None and t.get("rank") is not None and t.get("op") is not None:
            by_seq.setdefault(t["seq"], {})[t["rank"]] = t["op"]
    out = []
    for seq, ops in sorted(by_seq.items()):
        if len(set(ops.values())) > 1:
            ranks = sorted(ops)
            out.append({"seq": seq, "ranks": ",".join(map(str, ranks)), "ops": ",".join(ops[r] for r in ranks)})
    return out


def agent_records(text: str) -> list[dict]:
    """What launchers say about their workers, in the order the line says it (records may be glued
    on one line): ``sigterm_sent`` (pid, signal) and ``child_exit`` (local_rank, pid, exitcode,
    signal, launcher, start: where the record starts in ``text``)."""
    out = []
    for m in _SIGTERM.finditer(text):
        out.append({"what": "sigterm_sent", "pid": int(m["pid"]), "signal": m["signal"], "start": m.start(),
                    "text": m[0], "launcher": "torchrun"})
    for m in _DS_KILL.finditer(text):
        out.append({"what": "sigterm_sent", "pid": int(m["pid"]), "signal": None, "start": m.start(), "text": m[0],
                    "launcher": "deepspeed"})
    for m in _AGENT_FAILED.finditer(text):
        code = int(m["code"])
        out.append({"what": "child_exit", "local_rank": int(m["local"]), "pid": int(m["pid"]), "exitcode": code,
                    "signal": signal_of(code), "start": m.start(), "launcher": "torchrun"})
    if (m := _DS_EXIT.search(text)) is not None:
        code = int(m["code"])
        out.append({"what": "child_exit", "local_rank": int(m["local"]), "pid": None, "exitcode": code,
                    "signal": signal_of(code), "start": m.start(), "launcher": "deepspeed"})
    return sorted(out, key=lambda r: r["start"])


def parse_died(text: str) -> dict | None:
    """PALS/mpich: ``host: rank 2 died from signal 6 and dumped core``."""
    m = _DIED.match(text)
    if m is None:
        return None
    sig = int(m["sig"])
    return {"host": m["host"], "rank": int(m["rank"]), "exitcode": -sig, "signal": signal_of(-sig),
            "core_dumped": bool(m["core"])}


def parse_prte(text: str) -> dict | None:
    """prterun/mpirun: the first process to exit with a non-zero status (``@1,7`` is rank 7)."""
    m = _PRTE.search(text)
    return None if m is None else {"process": m["proc"], "rank": int(m["rank"]), "exitcode": int(m["code"])}


def parse_nccl_error(text: str) -> dict | None:
    """``NCCL error in: <file>:<line>, <reason>, NCCL version X`` (raised into Python, or in a
    watchdog's ``what():``): reason, version, where, and the rank a ``[... Rank N]`` tag names."""
    m = _NCCL_ERROR.search(text)
    if m is None:
        return None
    r = _RANK_TAG.search(text, 0, m.start())
    return {"error": m["error"].strip(), "nccl_version": m["version"], "where": m["where"],
            "rank": int(r["rank"]) if r else None}


def parse_setup_failure(text: str) -> dict | None:
    """The process group could not form: the rendezvous store timed out, or a port was taken."""
    if (m := _RENDEZVOUS.search(text)) is not None:
        return {"kind": EventKind.RENDEZVOUS_TIMEOUT, "timeout_ms": float(m["ms"])}
    if (m := _IN_USE.search(text)) is not None:
        return {"kind": EventKind.ADDRESS_IN_USE, "port": int(m["port"]), "errno": int(m["errno"]), "address": m["addr"]}
    return None


def parse_peer(text: str) -> dict | None:
    """A peer lost: a torch RPC agent's error (``rank``: the agent, ``peer``) or a socket closed
    by a remote peer (``peer``: host<port>)."""
    if (m := _RPC.search(text)) is not None:
        return {"rank": int(m["agent"]), "peer": m["peer"], "error": m["error"].strip()}
    if (m := _PEER_CLOSED.search(text)) is not None:
        return {"rank": None, "peer": m["peer"], "error": "connection closed by remote peer"}
    return None


# a bar whose label names another phase than training (datasets' "Map", an evaluation, a download): its
# n/total is not the run's progress
_OTHER_PHASE_BAR = re.compile(r"^\s*(?:Map|Filter|Tokeniz\w*|Running tokenizer|Download\w*|Load\w*|Fetching|Extract\w*|"
                              r"Generat\w*|Sav\w*|Eval\w*|Validat\w*|Test\w*|Predict\w*|Inference|Processed prompts|Adding requests)\b[^|]*?:\s*\d+%\|",
                              re.I)


# a training bar's loss, in its description ("step 49/50 completed (loss: 1.03)", torchtune's "1|16|Loss: 2.57")
# or its postfix (Lightning's "[9:07:58<878:01:48, 41.36s/it, loss=3.1, ...]"); a whole word: not "reduced_train_loss"
_BAR_LOSS = re.compile(r"(?<![\w/])loss\s*[:=]\s*(?P<loss>[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf)(?![\w.])",
                       re.I)
# a bar's percentage, where its label ends ("...: 100%|")
_BAR_PERCENT = re.compile(r"\d{1,3}%\|")
# the rate a bar states in its bracket, after the times: "10.82s/it" or "1.27it/s" ("?it/s" before the first)
_BAR_RATE = re.compile(r"\[\d+:\d+(?::\d+)?<[^,\]]*,\s*(?P<rate>\d+(?:\.\d+)?)\s*(?P<unit>s/it|it/s)")


# a field of a bar's postfix ("reduced_train_loss=nan.0", "train_step_timing in s=0.615"): NeMo's, Lightning's logged
# metrics; the training loss under its frameworks' names where no plain "loss" is there, the step's time where the
# key says its unit (NeMo's timing callback measures each step: preferred to tqdm's smoothed rate)
_BAR_FIELD = re.compile(r"(?:^|,)\s*(?P<key>[A-Za-z_][\w ]{0,60}?)\s*=\s*(?P<value>[^,\]]*)")
_BAR_LOSS_KEYS = ("reduced_train_loss", "train_loss", "lm_loss", "train_loss_step")
_BAR_NONFINITE = re.compile(r"^(?P<v>[-+]?(?:nan|inf))(?:\.0)?$", re.I)  # Lightning's "nan.0"


def _bar_fields(bracket: str) -> tuple[float | None, float | None]:
    """The training loss (a framework's name for it) and the step's time in seconds a bar's postfix states."""
    loss = step_time = None
    for f in _BAR_FIELD.finditer(bracket):
        key, raw = f["key"].strip().lower(), f["value"].strip()
        nonfinite = _BAR_NONFINITE.match(raw)
        value = to_float(nonfinite["v"] if nonfinite else raw)
        if value is None:
            continue
        if key in _BAR_LOSS_KEYS and loss is None:
            loss = value
        elif step_time is None and value >= 0:
            step_time = seconds_of(key, value)
    return loss, step_time


def parse_bar(text: str) -> dict | None:
    """A training progress bar's step row: ``step`` (its n), ``loss`` where its description or postfix
    states one, ``step_time_s`` from a postfix timing field with its unit (NeMo's ``train_step_timing in s``),
    else from its rate (tqdm's smoothed s/it, or 1 / it/s); None for no training bar or a bar stating
    neither a loss nor a time."""
    found = list(_TQDM.finditer(text))
    if not found or _OTHER_PHASE_BAR.match(text) is not None:
        return None
    last = found[-1]
    # the description is the text before the last bar's percentage; the postfix is in its bracket
    pct = [m for m in _BAR_PERCENT.finditer(text, 0, last.start())]
    desc = text[: pct[-1].start()] if pct else ""
    bracket = text[last.end():].split("]", 1)[0]
    m = _BAR_LOSS.search(desc) or _BAR_LOSS.search(bracket)
    r = _BAR_RATE.search(text, last.start())
    named_loss, timed = _bar_fields(bracket) if "=" in bracket else (None, None)
    loss = float(m["loss"]) if m else named_loss
    step_time = timed
    if step_time is None and r is not None and float(r["rate"]) > 0:
        step_time = float(r["rate"]) if r["unit"] == "s/it" else 1.0 / float(r["rate"])
    if loss is None and step_time is None:
        return None
    return {"step": int(last["n"]), "loss": loss, "step_time_s": step_time}


def parse_progress(text: str) -> dict | None:
    """The last ``n/total`` of a tqdm bar in ``text`` (a bar may be glued to the next record); None for a bar
    of another phase than training (``Map:``, ``Evaluating:``)."""
    found = list(_TQDM.finditer(text))
    if not found or _OTHER_PHASE_BAR.match(text) is not None:
        return None
    return {"step": int(found[-1]["n"]), "total": int(found[-1]["total"])}


# a training script's own epoch summary: "Epoch: 0, Average Training Loss: 4.85, Average Evaluation Loss: 2.55"
# (also "epoch 3 | train loss 0.41 | val loss 0.52"): the training loss a steps row, the evaluation's an evals row
_SUMMARY_NUM = r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?|nan|NaN|inf"
_EPOCH_SUMMARY = re.compile(rf"^\s*Epoch\s*[:=]?\s*(?P<epoch>\d+)\s*[,|]\s*(?:Average |Avg\.? |Mean )?"
                            rf"(?:Training|Train) Loss\s*[:=]?\s*(?P<loss>{_SUMMARY_NUM})(?:\s*[,|]\s*(?:Average |Avg\.? |Mean )?"
                            rf"(?:Evaluation|Eval|Validation|Val) Loss\s*[:=]?\s*(?P<eval>{_SUMMARY_NUM}))?\s*$", re.I)


def parse_epoch_summary(text: str) -> dict | None:
    """A script's epoch summary line: ``epoch``, ``loss`` and, where it says one, ``eval_loss``."""
    m = _EPOCH_SUMMARY.match(text)
    if m is None:
        return None
    return {"epoch": float(m["epoch"]), "loss": to_float(m["loss"]),
            "eval_loss": to_float(m["eval"]) if m["eval"] else None}


def parse_megatron(text: str) -> dict | None:
    """Megatron's ``iteration N/ M | ... | lm loss: 1.259228E+01 | ...`` line: a steps row."""
    m = _MEGATRON.search(text)
    if m is None:
        return None
    values = {}
    for part in m["fields"].split("|"):
        key, _, value = part.partition(":")
        if key.strip() in _MEGATRON_FIELDS:
            values[_MEGATRON_FIELDS[key.strip()]] = to_float(value.strip())
    if "loss" not in values:
        return None
    ms = values.pop("step_time_ms", None)
    batch = values.pop("total_batch_size", None)
    return {"step": int(m["it"]), "max_steps": int(m["of"]), "step_time_s": ms / 1000 if ms is not None else None,
            "total_batch_size": int(batch) if batch is not None else None, **values}


# a script's own per-rank summary, "Process 31 - Training time: 10.09 seconds" (behind mpirun's rank prefix)
_TRAINING_TIME = re.compile(r"(?:^|[\s-])Training time: (?P<s>\d+(?:\.\d+)?) s(?:ec(?:ond)?s?)?\s*$")


def parse_training_time(text: str) -> float | None:
    """The seconds a ``Training time: N seconds`` line states, or None."""
    m = _TRAINING_TIME.search(text)
    return to_float(m["s"]) if m is not None else None


def parse_throughput(text: str) -> dict | None:
    m = _THROUGHPUT.search(text)
    if m is None:
        return None
    return {"throughput_samples_s": to_float(m["rate"]), "batch_size": int(m["batch"]) if m["batch"] else None,
            "num_gpus": int(m["gpus"]) if m["gpus"] else None, "duration_s": to_float(m["time"])}


def run_facts(text: str) -> dict:
    """Facts about the run a line states (the frameworks' own are ``framework_lines``'): ``worker N of M``,
    ``WORLD_SIZE=N`` / ``world_size = N`` / ``'world_size': N``, accelerate's ``Num processes: N``,
    ``Num GPUs: N``, a launcher's flags (torchrun's ``--nnodes`` / ``--nproc_per_node``, accelerate's
    ``--num_processes`` / ``--num_machines``, DeepSpeed's ``--num_gpus`` / ``--num_nodes``, ``NNODES=N``),
    a ``data parallel size``, an InfiniBand port's rate (``ibstat``'s ``Rate: 200``, ``ibstatus``'
    ``rate: 200 Gb/sec (4X HDR)``). Cheap tests first: every line of a capture comes here."""
    out: dict = {}
    if " of " in text and (m := _OF.search(text)) is not None and int(m["rank"]) < int(m["size"]):
        out["world_size_stated"] = int(m["size"])
    _sizes(text, out)
    if "parallel size" in text and (m := _DP.search(text)) is not None:
        out["data_parallel_size"] = int(m[1])
    if "ate:" in text and (m := _IB_RATE.match(text)) is not None:
        out["link_speed_gbps"] = float(m["rate"])
    if "DeepSpeed info" in text and (m := _DS_VERSION.search(text)) is not None:
        out["deepspeed_version"] = m["v"]
    if "memory (MB)" in text and (m := _MEGATRON_MEMORY.search(text)) is not None:
        values = {k.strip().replace(" ", "_"): to_float(v) for k, v in _MEMORY_FIELD.findall(m["fields"])}
        out["memory_mb"] = {"rank": int(m["rank"]), **values}
    return out


def _sizes(text: str, out: dict) -> None:
    """The sizes of the job a line states: a launcher's flags (processes per node, nodes, processes),
    a printed world size, accelerate's ``Num processes``, ``NNODES=N``, ``Num GPUs``."""
    if "--nproc" in text and (m := _NPROC.search(text)) is not None:
        out["nproc_per_node"] = int(m["n"])
        if "--standalone" in text and _TORCHRUN.search(text):
            out["nnodes"] = 1
    if "--nnodes" in text and (m := _NNODES.search(text)) is not None:
        out["nnodes"] = int(m["n"])
    if "--num" in text:
        for key, pattern in _LAUNCH_FLAGS.items():
            if (m := pattern.search(text)) is not None:
                out[key] = int(m["n"])
    for hints, pattern, key in _SIZE_LINES:
        if any(h in text for h in hints) and (m := pattern.search(text)) is not None:
            out[key] = int(m["n"])

# --- step lines of plain loops -------------------------------------------------------------------------
_F = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|NaN|inf|-inf|Infinity"
# a per-GPU loop's step line: [GPU 0] Step [3/100] | Loss: ... | LR: ... (| Grad Norm: ...)(| ETA: ...)
_GPU_STEP = re.compile(rf"^\[GPU (?P<gpu>\d+)\] Step \[(?P<step>\d+)/(?P<max>\d+)\] \| Loss: (?P<loss>{_F})"
                       rf" \| LR: (?P<lr>{_F})(?: \| Grad Norm: (?P<gn>{_F}))?(?: \| ETA: (?P<eta>\S+))?\s*$")
# a plain training loop's line, PyTorch's MNIST example's and its many copies (pytorch/examples mnist/main.py:
# 'Train Epoch: {} [{}/{} ({:.0f}%)]\tLoss: {:.6f}'; Kubeflow's copy prints '\tloss={:.4f}'): the epoch, the
# samples done of the epoch's, the loss; no step (the loop numbers none)
_TRAIN_EPOCH = re.compile(rf"^Train Epoch: (?P<epoch>\d+) \[(?P<done>\d+)/(?P<total>\d+) \((?P<pct>\d+(?:\.\d+)?)%\)\]"
                          rf"\s+(?:Loss: |loss=)(?P<loss>{_F})\s*$")


def parse_step_line(text: str) -> dict | None:
    """A per-GPU step line or a plain loop's ``Train Epoch`` line: its step row's fields (``gpu``: the GPU
    it names, else None; ``step`` None where the loop numbers none); else None."""
    if text.startswith("[GPU ") and (m := _GPU_STEP.match(text)) is not None:
        return {"gpu": int(m["gpu"]), "step": int(m["step"]), "loss": to_float(m["loss"]),
                "learning_rate": to_float(m["lr"]), "grad_norm": to_float(m["gn"]), "max_steps": int(m["max"]),
                "eta": m["eta"]}
    if text.startswith("Train Epoch: ") and (m := _TRAIN_EPOCH.match(text)) is not None:
        return {"gpu": None, "step": None, "loss": to_float(m["loss"]), "epoch": float(m["epoch"])}
    return None
