"""Console captures of training jobs: whatever a launcher printed, from every rank, as people
bring them (a log shipper's timestamps, a paste with line numbers, pdsh output, half a log).

Its records come through ``normalise`` (prefixes taken off, wrapped lines joined, glued ones split, as
``console_shapes.GRAMMAR`` says), then lose their log prefixes (glog, Python logging, ``LEVEL |``). Then:

- step lines (``[GPU 0] Step [3/10] | Loss: ...``, ``Train Epoch: 3 [16000/60000 (27%)]  Loss: 0.04``),
  transformers' printed log dicts (also as JSON or without the opening brace: ms-swift's), Megatron's
  iteration lines, a training bar's own loss and rate (``BarRows``), a script's own counter and loss lines
  (``script_lines``) -> ``steps`` / ``evals`` / meta;
  NaN report blocks -> ``nan_detected``;
- NCCL INFO/WARN (``nccl_procs.py``) -> ``nccl_init`` / ``nccl_warn`` events and meta (world
  size, nodes, hosts, network, NICs);
- the watchdog (``torch_lines.py``) -> ``nccl_timeout`` (a wrapped line joined, one cut short kept:
  ``truncated``), ``watchdog_work``, ``watchdog_hang``; ``collective_mismatch`` (with what differs);
  ``cuda_oom``; ``nccl_error``; ``rendezvous_timeout`` / ``address_in_use``;
- why a process failed (``torch_lines.failure_cause``: a script python cannot open, a missing
  module, an import, CUDA OOM or another CUDA error, an NCCL error and its ``Last error:`` detail,
  a signal, the exception a traceback ends in) -> ``failure_cause`` (once per rank and cause);
- the launchers: torchrun's ChildFailedError block and its agent's ``failed (exitcode: -9)``
  line, DeepSpeed's and PALS' exit lines -> ``child_failed`` (``signal`` from a negative exit
  code; ``root_cause``: the first failure the launcher observed); ``Sending process P closing
  signal SIGTERM`` -> ``warning`` events (``subkind`` sigterm_sent, ``pid``);
- other exceptions -> ``error``.

The run facts the lines state become meta with their provenance (``run_facts.py``). The last progress
``n/total`` goes to meta (the training's: none after the Trainer's final summary, whose later bars are an
evaluation's); other lines are diagnostics. The file is streamed: memory follows what is kept.
"""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from logkit.ingest.readers import (
    cause_detail,
    framework_steps,
    oom_lines,
    phase_lines,
    rank_lines,
    script_lines,
    sharded_frames,
)
from logkit.ingest.readers import console_blocks as blocks
from logkit.ingest.readers import console_shapes as shapes
from logkit.ingest.readers import torch_lines as tl
from logkit.ingest.readers.base import Lines, Read, ReadResult, epoch
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.framework_lines import FrameworkLines
from logkit.ingest.readers.nccl import GLUED, may_be_nccl, parse_nccl_debug
from logkit.ingest.readers.nccl_procs import NcclProcs
from logkit.ingest.readers.normalise import Line, records
from logkit.ingest.readers.run_facts import stated_facts
from logkit.schema.records import EventType
from logkit.schema.vocab import EventKind, FailureCause, LineSubkind


class _Console(blocks.Blocks):
    """Parser state across the lines of one capture."""

    def __init__(self, read: Read, rank: int | None) -> None:
        super().__init__(read)
        self.default_rank = rank
        self.timeouts: list[dict] = []
        self.seen_timeouts: set[tuple] = set()
        self.timeouts_events: list[dict] = []
        self.nccl = NcclProcs(read)
        self.year = 1970
        self.hf_step = 0
        self.trained = False  # the Trainer's final summary printed: a later bar is an evaluation's, not the run's
        self.agent_exits: list[dict] = []
        self.facts: dict = {}
        self.joined = rank_lines.Joined(read)  # the processes that said their rank as they joined
        self.frameworks = FrameworkLines(read.label)  # the fine-tuning frameworks' and launchers' lines
        self.fact_lines: dict[str, int] = {}  # a fact -> the line that first stated it
        self.verl_row: dict | None = None  # verl's last record, while the next line may be its rest
        self.causes, self.torn_causes = set(), {}  # (rank, cause, line or None) of the causes; those off a torn line
        self.last_error: tuple | None = None  # (an NCCL error's cause event, "Last error:" read)
        self.nccl_error_line: int | None = None  # the line of the last NCCL error cause read
        self.dist_op: str | None = None  # the last torch.distributed call a traceback showed
        self.prefix_hosts: dict[str, int] = {}  # a host a line's prefix names (Ray's ip=, a host tag) -> its first line
        self.sharded = sharded_frames.ShardedFrames()  # the current traceback's frames in FSDP's or ZeRO's code
        self.trace_open: tuple | None = None  # a traceback not yet ended by its exception line
        self.bars, self.last_phase = blocks.BarRows(read), phase_lines.LastPhase(read)  # bars; save/eval lines
        self.script_progress = script_lines.ScriptLines()  # a script's own counter and loss lines, per process

    # -- time ------------------------------------------------------------------------------
    def _time(self, md: str | None, hms: str | None) -> float | None:
        if not md or not hms:
            return None
        try:
            # c10's glog-style header writes the month without its leading zero (E816 for Aug 16)
            return epoch(datetime.strptime(f"{self.year}{md:0>4} {hms.split('.')[0]}", "%Y%m%d %H:%M:%S")) + (
                float("0." + hms.split(".")[1]) if "." in hms else 0.0)
        except ValueError:
            return None

    def _full_time(self, text: str) -> float | None:
        for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%m/%d/%Y %H:%M:%S", "%Y-%m-%d_%H:%M:%S"):
            try:
                stamp = datetime.strptime(text.replace(",", ".").split(".")[0][:19], fmt)
            except ValueError:
                continue
            self.year = stamp.year
            return epoch(stamp)
        return None

    # -- one record ------------------------------------------------------------------------
    def line(self, line: Line) -> bool:
        number, text = line.number, line.text
        rank = line.rank if line.rank is not None else self.default_rank
        if line.host is not None and line.host not in self.prefix_hosts:
            self.prefix_hosts[line.host] = number
        if not text.strip():
            return True  # a prefix alone (a pasted line number before an empty line)
        m = shapes.GLOG_STAMP.search(text) if ":" in text else None
        t = self._time(m["md"], m["hms"]) if m else (self._full_time(line.stamp) if line.stamp else None)
        if "<" in text and not self.trained and (p := tl.parse_progress(text)) is not None:
            self.read.meta.progress = {**p, "line": number}  # a bar may carry the next record glued on
            self.bars.see(number, text, rank, t)
        if self.entry_traceback(text):
            # a worker's own traceback under its failure entry (error_file set): its frames are the entry's,
            # its exception line is that rank's cause; the block goes on to the next entry
            if shapes.EXCEPTION.match(text.strip()) is None:
                self._traceback_call(number, text)
                return True
            block, rank, text = self.block, self.current["rank"], text.strip()
            self.block, self.trace_open = None, (number, rank, t)
            try:
                return self._line(number, text, rank, t)
            finally:
                self.block, self.trace_open = block, None
        return self.last_phase.see(number, text, rank, t) | bool(self._line(number, text, rank, t))

    def _line(self, number: int, text: str, rank: int | None, t: float | None) -> bool:
        if self.last_error is not None and (took := self._last_error(text)) is not None:
            # "Last error:" is read; the detail it announces is the NCCL error's, and read as any line too
            return True if took == "header" else (self._read(number, text, rank, t) or True)
        if any(h in text for h in tl.CAUSE_HINTS) and (c := tl.failure_cause(text)) is not None:
            in_child = self.block == "child" and self.current is not None  # a failure entry's "traceback :" field
            self._cause(number, c, self.current.get("rank") if in_child else rank, t)
            if c["cause"] == FailureCause.FILE_NOT_FOUND:
                return True  # python's own message: nothing else reads it
            return self._read(number, text, rank, t) or True  # read as well; never "not understood"
        return self._read(number, text, rank, t)

    def _read(self, number: int, text: str, rank: int | None, t: float | None) -> bool:
        """The line (its prefixes off) by what it is: a block's, the watchdog's, NCCL's, or another."""
        if self.block is not None and self.in_block(number, text):
            self._traceback_call(number, text)
            if text.startswith("Traceback"):
                self.trace_open = (number, rank, t)
            return True
        if self.block is None and text[:1] in " \t[RF" and self.table_from_middle(number, text):
            self.frameworks.launcher("torchrun", number)  # torch.distributed.elastic's table: torchrun's agent
            return True
        if "Watchdog caught" in text and (w := tl.parse_watchdog(text)) is not None:
            self._timeout(number, text, w, t)  # one the file cuts short keeps what it holds (truncated)
            return True
        if "Rank" in text and tl.WORK_START.search(text) and (w := tl.parse_work(text)) is not None:
            self._work(number, text, w, t)
            return True
        if "Terminating the process" in text and (h := tl.parse_hang(text)) is not None:
            self.read.event(EventKind.WATCHDOG_HANG, number, level="CRITICAL", time_s=t, message=text.strip()[:300], **h)
            return True
        if may_be_nccl(text) and self._nccl(number, text, rank):
            return True
        return self._not_nccl(number, text, rank, t)

    def _not_nccl(self, number: int, text: str, rank: int | None, t: float | None) -> bool:
        read = self.read
        if text.startswith("NCCL version") and (v := shapes.NCCL_VERSION.match(text)) is not None:
            read.meta.fill(nccl_version=v["version"])
            return True
        if "mismatch between collectives" in text and (mm := tl.parse_mismatch(text)) is not None:
            self._mismatch(number, text, mm, rank, t)
            return True
        if "CUDA out of memory" in text and (o := oom_lines.parse_oom(text)) is not None:
            self.read.event(EventKind.CUDA_OOM, number, rank=rank, level="ERROR", message=text.strip()[:300], **o,
                            **self.sharded.take())
            self.block = "trace"
            self.trace_open = None
            return True
        if "NCCL error" in text and (e := tl.parse_nccl_error(text)) is not None:
            self.trace_open = None
            read.meta.fill(nccl_version=e["nccl_version"])
            read.event(EventKind.NCCL_ERROR, number, level="ERROR", time_s=t, message=text.strip()[:300],
                       **{**e, "rank": e["rank"] if e["rank"] is not None else rank}, op=self.dist_op,
                       exception=m["type"] if (m := shapes.EXCEPTION.match(text)) else None)
            self.block = "trace"
            return True
        if "died from signal" in text and (d := tl.parse_died(text)) is not None:
            read.event(EventKind.CHILD_FAILED, number, level="ERROR", time_s=t, message=text.strip()[:300],
                       launcher="pals", root_cause=None, **d)
            return True
        if ("timed out" in text or "already in use" in text) and (f := tl.parse_setup_failure(text)) is not None:
            read.event(f.pop("kind"), number, rank=rank, level="ERROR", time_s=t, message=text.strip()[:300], **f)
            if shapes.EXCEPTION.match(text):  # raised: its traceback follows
                self.block, self.trace_open = "trace", None
            return True
        if text.endswith("FAILED") and (f := shapes.FAILED_HEAD.match(text)) is not None:
            # torchrun's ChildFailedError block without its exception line (a paste that starts at the
            # block's rule): "<script> FAILED" opens it all the same
            self.frameworks.launcher("torchrun", number)
            self.open_child_block()
            self.script = f["script"]
            return True
        level = None
        first = text[:1]
        if first == "[" and (p := self.frameworks.peel(number, text)) is not None:  # LLaMA-Factory's format
            level, stamp, text = p
            t = self._full_time(stamp)
        elif first in shapes.GLOG_FIRST and (m := shapes.GLOG.match(text)) is not None:
            level = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}[m["lvl"]]
            t, text = self._time(m["md"], m["hms"]), m["msg"]
        elif (first == "[" or first.isdigit()) and (m := shapes.PYLOG.match(text)) is not None:
            self.frameworks.logger(number, m["name"])
            level, t, text = m["level"], self._full_time(m["date"]), m["msg"]
            if text[:1] == "[" and (r := shapes.RELOGGED.match(text)) is not None \
                    and (m := shapes.PYLOG.match(text[r.end():])) is not None:
                # logged again by a wrapper's logger: the record's own header says its level and time
                level, t, text = m["level"], self._full_time(m["date"]), m["msg"]
        elif first in shapes.LEVEL_FIRST and (m := shapes.LEVEL_BAR.match(text)) is not None:
            level, text = m["level"], m["msg"]
        return self._message(number, text, level, rank, t)

    def _mismatch(self, number: int, text: str, mm: dict, rank: int | None, t: float | None) -> None:
        """A collective mismatch: torch raises it (``TORCH_CHECK`` in ProcessGroupWrapper), so it is the
        failure's cause, an exception, of the rank the line's prefix names (the ranks it names are ranks
        of the run: ``ingest.meta`` counts them among the ranks seen)."""
        read = self.read
        read.event(EventKind.COLLECTIVE_MISMATCH, number, rank=rank, level="ERROR", message=text.strip()[:300], **mm)
        raised = shapes.EXCEPTION.match(text.strip())
        self._cause(number, {"cause": FailureCause.EXCEPTION, "what": raised["type"] if raised else None,
                             "message": text.strip()[:300]}, rank, t)
        self.trace_open = None

    def _nccl(self, number: int, text: str, rank: int | None) -> bool:
        parts = GLUED.split(text)
        found = [(p, n) for p in parts if (n := parse_nccl_debug(p)) is not None]
        if not found:
            return False
        for _, n in found:
            self.nccl.line(number, n, rank)
        return True

    def _timeout(self, number: int, text: str, w: dict, t: float | None) -> None:
        key = (w["rank"], w["seq"], w["op"])
        if key in self.seen_timeouts:  # torch repeats it in "what():" lines
            return
        self.seen_timeouts.add(key)
        complete = w.pop("complete")
        self.timeouts.append({**w, "line": number})
        self.timeouts_events.append(self.read.event(EventKind.NCCL_TIMEOUT, number, level="ERROR", time_s=t,
                                                    message=text.strip()[-300:], truncated=not complete, **w))

    def _work(self, number: int, text: str, w: dict, t: float | None) -> None:
        self.read.event(EventKind.WATCHDOG_WORK, number, level="ERROR", message=text.strip()[-300:], time_s=t, **w)
        for ev in reversed(self.timeouts_events):  # the rank's own timeout line says the same work
            if ev["rank"] == w["rank"] and ev["seq"] in (w["seq"], None):
                ev.update(last_enqueued=w["last_enqueued"], last_completed=w["last_completed"])
                break

    def _traceback_call(self, number: int, text: str) -> None:
        """A traceback's line: the torch.distributed call it shows, the framework, FSDP's or ZeRO's code."""
        self.frameworks.frame(number, text)
        if (c := shapes.DIST_CALL.search(text)) is not None:
            self.dist_op = c["op"]
        self.sharded.see(text)

    # -- a message without its log prefix --------------------------------------------------
    def _stated(self, number: int, text: str) -> dict:
        """The run facts the line states (``torch_lines.run_facts``), kept with their line; a value that
        cannot be right is a note, never a fact."""
        stated = tl.run_facts(text)
        for key, value in stated.items():
            why = shapes.FACT_KEYS[key].why_not(value) if key in shapes.FACT_KEYS else None
            if why is not None:
                self.read.note(number, f"{key}: {why}: left unknown", text)
            else:
                self.facts.setdefault(key, value)
                self.fact_lines.setdefault(key, number)
        return stated

    def _step_line(self, number: int, text: str, rank: int | None, t: float | None) -> bool:
        """A per-GPU or ``Train Epoch`` step line as a step row (no rank: the GPU it names, else 0); else False."""
        if (row := tl.parse_step_line(text)) is None:
            return False
        gpu = row.pop("gpu")
        if row["step"] is None:  # numbered in the order logged, as transformers' printed dicts are
            self.hf_step += 1
            row["log_index"] = self.hf_step
        self.read.step(number, {"rank": rank if rank is not None else (gpu if gpu is not None else 0), "time_s": t,
                                **row})
        return True

    def _message(self, number: int, text: str, level: str | None, rank: int | None, t: float | None) -> bool:
        read = self.read
        stated = self._stated(number, text)
        if any(h in text for h in rank_lines.HINTS) and (joined := rank_lines.parse_rank_line(text)) is not None:
            self.joined.line(number, text, joined, t)
            return True
        if any(h in text for h in shapes.AGENT_HINT) and (records := tl.agent_records(text)):
            self._agent(number, text, records, level, rank, t)
            # the launcher's failure line is its own line too (DeepSpeed's "[launch.py:315:sigkill_handler]
            # Killing subprocess ..."): its framework and facts are seen as any of its lines'
            self.frameworks.line(number, text)
            return True
        if self.frameworks.line(number, text)[0]:
            for at, joined in self.frameworks.take_joined():
                read.event(EventKind.DIST_INIT, at, rank=joined, level=level or "INFO", time_s=t, message=text.strip()[:300])
            return True
        if text.startswith(("[GPU ", "Train Epoch: ")) and self._step_line(number, text, rank, t):
            return True
        if "DETECTED" in text and (m := shapes.NAN_HEAD.match(text)) is not None:
            self.block = "nan"
            self.current = read.event(EventType.NAN_DETECTED, number, rank=rank if rank is not None else int(m["gpu"]),
                                      level="ERROR", message=text.strip(), gpu=int(m["gpu"]), time_s=t)
            return True
        if (logged := blocks.log_dict_text(text)) is not None:
            index = blocks.hf_dict(read, number, logged, rank, t, self.hf_step)
            if index is None:
                return False
            if blocks.is_torn(text):
                read.note(number, "log dict cut short: its whole values read, the rest lost", text)
            self.hf_step = index
            self.trained = self.trained or "'train_runtime'" in text
            return True
        if framework_steps.step(self, number, text, 0 if rank is None else rank, t):
            return True
        if any(w in text for w in shapes.EXCEPTION_WORDS) and (m := shapes.EXCEPTION.match(text)) is not None:
            return self._exception(number, text, m, rank, t)
        if "/" in text and shapes.PROGRESS.search(text):
            return True  # its n/total went to meta (segment)
        if self.trace_line(text):
            self._traceback_call(number, text)
            if text.startswith("Traceback") or (self.trace_open is None and text.lstrip().startswith('File "')):
                # a frame with no traceback open: one whose header the paste cut, open all the same (its
                # exception line is the cause)
                self.trace_open = (number, rank, t)
            return True
        return self._other(number, text, level, rank, t) or bool(stated)

    def _cause(self, number: int, c: dict, rank: int | None, t: float | None) -> None:
        """A ``failure_cause`` event: why a process failed, once per rank and cause (every rank, and
        torch's ``what():`` lines, repeat it). Python's ``can't open file`` is the one exception: the
        interpreter prints it once and exits 2, so each such line is one process (a launcher's workers
        print it once each, all unranked). An NCCL error's ``Last error:`` detail, on the lines after it,
        is added to its message (``_last_error``)."""
        key = (rank, c["cause"], number if c["cause"] == FailureCause.FILE_NOT_FOUND else None)
        if key in self.causes:
            cause_detail.mend_torn(self.torn_causes, key, f"{self.read.label}:{number}", c["message"])
            return
        if c["cause"] == FailureCause.NCCL_ERROR and self.nccl_error_line == number - 1 and c["what"] \
                and c["what"].startswith("nccl") and c["message"].startswith(c["what"]):
            # "ncclInternalError: ..." on the line after torch's "NCCL error: ..." is that error's second line (torch
            # prefixes only the first with the rank): no cause of its own
            self.nccl_error_line = number
            return
        self.causes.add(key)
        ev = self.read.event(EventKind.FAILURE_CAUSE, number, rank=rank, level="ERROR", time_s=t, cause=c["cause"],
                             message=c["message"], error=c["what"], **self.sharded.fields())
        cause_detail.hold_torn(self.torn_causes, key, ev)
        if c["cause"] == FailureCause.NCCL_ERROR:
            self.last_error = (ev, False)
            self.nccl_error_line = number

    def _last_error(self, text: str) -> str | None:
        """NCCL's ``Last error:`` ("header") and the line after it ("detail": ``socketStartConnect: Connect
        to ... failed``), the detail of the last NCCL error read, added to its cause's message; else None."""
        ev, opened = self.last_error
        if not opened:
            if text.strip() != "Last error:":
                return None
            self.last_error = (ev, True)
            return "header"
        self.last_error = (ev, False)
        cause_detail.add_detail(ev, text)
        return "detail"

    def _exception(self, number: int, text: str, m: re.Match, rank: int | None, t: float | None) -> bool:
        if (self.trace_open is not None or self.block == "trace") and not m["type"].endswith(
                ("Warning", "ChildFailedError")) and tl.failure_cause(text) is None:
            # the exception a traceback ends in, of no kind the causes name: the cause is the exception
            self._cause(number, {"cause": FailureCause.EXCEPTION, "what": m["type"], "message": text.strip()[:300]},
                        rank, t)
        self.trace_open = None
        if m["type"].endswith("ChildFailedError"):
            self.frameworks.launcher("torchrun", number)  # torch.distributed.elastic's report: torchrun's agent
            self.open_child_block()
        else:
            self.block = "trace"
            self.read.event(EventKind.ERROR, number, rank=rank, level="ERROR", time_s=t, message=text.strip()[:300],
                            exception=m["type"])
        return True

    def _other(self, number: int, text: str, level: str | None, rank: int | None, t: float | None) -> bool:
        read = self.read
        if "Training time:" in text and (secs := tl.parse_training_time(text)) is not None:
            # a rank's own summary: its training time, a row of that rank (its throughput line, next, joins it)
            read.rows["perf"].append({"rank": rank, "step": None, "time_s": t, "source": f"{read.label}:{number}",
                                      "duration_s": secs})
            return True
        if "Throughput:" in text and (p := tl.parse_throughput(text)) is not None:
            last = read.rows["perf"][-1] if read.rows["perf"] else None
            if last is not None and last["rank"] == rank and last.get("throughput_samples_s") is None \
                    and p["duration_s"] is None:
                last.update({k: v for k, v in p.items() if k != "duration_s"})  # the same rank's summary, one row
                return True
            read.rows["perf"].append({"rank": rank, "step": None, "time_s": t, "source": f"{read.label}:{number}", **p})
            return True
        if level is not None:
            if level in ("WARNING", "WARN") and not text.strip(" *"):
                return True  # banner rules of torchrun's warnings
            if level in ("WARNING", "WARN", "ERROR", "CRITICAL"):
                peer = (tl.parse_peer(text) if "peer" in text or "RPC" in text else None) or {}
                read.event(EventKind.ERROR if level in ("ERROR", "CRITICAL") else EventKind.WARNING, number,
                           rank=rank if rank is not None else peer.get("rank"), level=level, time_s=t,
                           message=text.strip()[:300], **({"peer": peer["peer"]} if peer else {}))
            return True
        if ("peer" in text or "RPC" in text) and (peer := tl.parse_peer(text)) is not None:
            read.event(EventKind.WARNING, number, rank=rank if rank is not None else peer["rank"], level="WARNING",
                       time_s=t, message=text.strip()[:300], peer=peer["peer"])
            return True
        return self.nan_rule(text) or shapes.RULE.match(text) is not None

    def _agent(self, number: int, text: str, records: list[dict], level: str | None, rank: int | None,
               t: float | None) -> None:
        """torchrun's agent (or DeepSpeed's launcher) on its workers: SIGTERMs, and the first failure."""
        for rec in records:
            if rec["what"] == "sigterm_sent":
                self.read.event(EventKind.WARNING, number, rank=rank, level=level or "WARNING", time_s=t,
                                message=rec["text"], subkind=LineSubkind.SIGTERM_SENT, pid=rec["pid"], signal=rec["signal"])
                continue
            if rec["launcher"] == "torchrun":
                self.frameworks.launcher("torchrun", number)
            ev = self.read.event(EventKind.CHILD_FAILED, number, rank=None, level="ERROR", time_s=t,
                                 message=text[rec["start"]:].strip()[:300], local_rank=rec["local_rank"],
                                 pid=rec["pid"], exitcode=rec["exitcode"], signal=rec["signal"],
                                 root_cause=not self.agent_exits, launcher=rec["launcher"])
            self.agent_exits.append(ev)

    # -- the end ---------------------------------------------------------------------------
    def finish(self) -> None:
        self.nccl.finish()
        self.bars.finish()
        if self.trace_open is not None:
            number, rank, t = self.trace_open
            self.read.event(EventKind.ERROR, number, rank=rank, level="ERROR", time_s=t, subkind=LineSubkind.TRACEBACK_CUT,
                            message="a traceback the log ends in, cut before its exception line")
        for ev in self.agent_exits:
            if ev["pid"] is not None and ev["pid"] in self.block_pids:
                # the ChildFailedError block says it in full: the agent's line stays a line
                ev.update(kind=EventKind.ERROR, local_rank=None, pid=None, exitcode=None, signal=None, root_cause=None,
                          launcher=None)
            elif ev.get("script") is None and self.script is not None and ev["launcher"] == "torchrun":
                ev["script"] = self.script  # a block cut before its entries still names the script ("test.py FAILED")
        blocks.signal_causes(self.read, self.causes)
        self.joined.write()
        for mm in tl.mismatches_from_timeouts(self.timeouts):
            line = max(t["line"] for t in self.timeouts if t["seq"] == mm["seq"])
            self.read.event(EventKind.COLLECTIVE_MISMATCH, line, level="ERROR", rank=None,
                            message=f"collective {mm['seq']} timed out as different operations on ranks {mm['ranks']}"
                                    f": {mm['ops']}", derived_from=EventKind.NCCL_TIMEOUT, **mm)
        self._facts()

    def _facts(self) -> None:
        """Run facts the lines stated, as meta: the frameworks' (stated before derived before inferred, each
        with its line), then the launchers', NCCL's and torch's (``run_facts.stated_facts``)."""
        if self.script is not None:  # the script a ChildFailedError names: a framework's own (llamafactory/launcher.py)
            self.frameworks.code(self.script_line, self.script)
        self.frameworks.write(self.read.meta)
        stated_facts(self.read, self.facts, self.fact_lines, self.timeouts)
        if self.prefix_hosts and self.read.meta.hosts is None:
            # the hosts the lines' prefixes name, where no other line named hosts (a prefix may name a machine by
            # its address where NCCL names it by its hostname): stated; their count a lower bound of the nodes (a
            # host that printed nothing in the file may run processes too)
            meta, hosts = self.read.meta, sorted(self.prefix_hosts)
            where = f"{self.read.label}:{min(self.prefix_hosts.values())}"
            meta.state("hosts", hosts, "stated", "the hosts the lines' prefixes name (Ray's ip=, a host tag)", where)
            meta.state("nodes", len(hosts), "inferred (lower bound)", "the distinct hosts the lines' prefixes name",
                       where)



def read_console(path: Path, rank: int | None = None) -> ReadResult:
    """Events, steps and meta from a console capture; ``rank`` is used where a line names none."""
    read = Read(Path(path), FileFormat.CONSOLE)
    parser = _Console(read, rank)
    lines = Lines(read.path)  # three passes (the layout's sample, the year, the whole): a small file read once
    parser.year = shapes.year(read.path, lines)
    for line in records(read, shapes.GRAMMAR, lines=lines):
        if parser.line(line):
            read.used += 1
        else:
            read.unmatched(line.number, line.text)
    parser.finish()
    return read.result()
