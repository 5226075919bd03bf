"""Blocks of a console capture that span lines: a per-GPU logger's NaN report, torchrun's
ChildFailedError block (one ``child_failed`` event per failure entry; ``root_cause`` for the
entry under "Root Cause"; the signal from the traceback line, else from a negative exit code),
a Python traceback (its frames are used and dropped); and transformers' printed log dicts. A failure table
pasted from its middle is read from where it begins.
"""

from __future__ import annotations

import ast
import re

from logkit.ingest.readers.base import Read
from logkit.ingest.readers.torch_lines import parse_bar, signal_of
from logkit.schema.values import as_float, to_float
from logkit.schema.vocab import EventKind, FailureCause

_NONFINITE = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")
_NAN_LINES = re.compile(r"^(?:={3,}|-{3,}|Step: \d+|Loss: .*|Gradient Norm: .*|PROBLEMATIC TENSORS:|.*with NaN.*"
                        r"|\s*• .*|\s+Grad values: .*|\s+(?:Param|Tensor) values: .*|\s+NaN count: .*|\s+Inf count: .*"
                        r"|Total layers with .*|Affected layers: .*|Checkpoint saved: .*|Debug tensors saved: .*)$")
TRACE_NOISE = re.compile(r"^(?:Traceback \(most recent call last\):|\s+File \".*\", line \d+.*|\s{2,}\S.*|\s*\^+\s*"
                         r"|During handling of the above exception.*|The above exception was the direct cause.*"
                         r"|frame #\d+: .*|Exception raised from .*|terminate called .*|\s*what\(\):.*"
                         r"|To enable traceback see: .*|\[W \S+\] .*)$")
_TRACE_FIRST = frozenset(" \t^TDtfEw[")  # the first characters TRACE_NOISE's lines can have
_CHILD_FIELD = re.compile(r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<value>.*)$")
_CHILD_ENTRY = re.compile(r"^\[(?P<i>\d+)\]:\s*$")
_CHILD_TEXT = re.compile(r"^(?:={3,}|-{3,}|\S+ FAILED|Failures:|Root Cause \(first observed failure\):"
                         r"|\s*<NO_OTHER_FAILURES>)\s*$")
# a failure entry's field as torch writes it ("  host      : ..."; torch.distributed.elastic's template pads each key to
# ten characters): a table pasted from its middle (no exception line, no rule, no "[N]:" before it) still opens there
_TABLE_FIELD = re.compile(r"^\s+(?:time {6}|host {6}|rank {6}|exitcode  |error_file|traceback ): ")
_TABLE_TEXT = re.compile(r"^(?:\[\d+\]:|Failures:|Root Cause \(first observed failure\):)\s*$")
_RANK_FIELD = re.compile(r"(?P<rank>-?\d+) \(local_rank: (?P<local>-?\d+)\)")
_EXIT_FIELD = re.compile(r"(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)")
_SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\)")


class Blocks:
    """The state of the multi-line blocks of one capture (``block``: "nan", "child", "trace")."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.block: str | None = None
        self.current: dict | None = None  # the event a block is filling
        self.root_cause = False
        self.block_pids: set[int] = set()  # the pids a ChildFailedError block names
        self.entry_trace = False  # the current failure entry's traceback field opened a traceback
        self.script: str | None = None
        self.script_line: int | None = None  # the line of "<script> FAILED"

    def open_child_block(self) -> None:
        self.block, self.current, self.root_cause, self.entry_trace = "child", None, False, False

    def table_from_middle(self, number: int, text: str) -> bool:
        """A line of torchrun's failure table with no table open (a paste that begins inside it): an entry's
        ``[N]:`` head or the "Root Cause" line opens the table; a field in torch's padded layout opens it with an
        entry whose head the paste cut (the entry cites the field's line). Whether ``text`` was one."""
        field = _TABLE_FIELD.match(text) is not None
        if not field and _TABLE_TEXT.match(text) is None:
            return False
        self.open_child_block()
        if field:
            self.current = self.read.event(EventKind.CHILD_FAILED, number, rank=None, level="ERROR",
                                           message="torchrun child process failed", root_cause=False, script=None)
        return self._child_line(number, text)

    def entry_traceback(self, text: str) -> bool:
        """A line of the traceback a failure entry's ``traceback :`` field opens (torch prints the worker's
        traceback there, indented under the entry, when its error_file was written)."""
        return (self.block == "child" and self.entry_trace and self.current is not None and text.startswith("  ")
                and _CHILD_FIELD.match(text) is None)

    def trace_line(self, text: str) -> bool:
        """A traceback's own line (a ``Traceback`` header opens a block)."""
        if text[:1] not in _TRACE_FIRST or not TRACE_NOISE.match(text):
            return False
        if text.startswith("Traceback"):
            self.block = "trace"
        return True

    @staticmethod
    def nan_rule(text: str) -> bool:
        return text.startswith("=") and bool(_NAN_LINES.match(text))  # the rule that opens a NaN report

    def in_block(self, number: int, text: str) -> bool:
        """Whether ``text`` belongs to the open block (which closes on a line that does not)."""
        if self.block == "nan":
            if _NAN_LINES.match(text):
                self._nan_line(text)
                return True
        elif self.block == "child":
            if self._child_line(number, text):
                return True
        elif self.block == "trace" and TRACE_NOISE.match(text):
            return True
        self.block = None
        return False

    def _nan_line(self, text: str) -> None:
        ev = self.current
        if ev is None:
            return
        if text.startswith("Step: "):
            ev["step"] = int(text[6:])
        elif text.startswith("Loss: "):
            ev["value"] = to_float(text[6:])
        elif "NaN count:" in text:
            ev["nan_tensors"] = (ev.get("nan_tensors") or 0) + 1
        elif text.startswith(("Checkpoint saved: ", "Debug tensors saved: ")):
            ev["dump_path"] = text.split(": ", 1)[1]

    def _child_line(self, number: int, text: str) -> bool:
        if _CHILD_ENTRY.match(text) is not None:
            self.entry_trace = False
            self.current = self.read.event(EventKind.CHILD_FAILED, number, rank=None, level="ERROR",
                                           message="torchrun child process failed", root_cause=self.root_cause,
                                           script=self.script)
            return True
        if text.startswith("Root Cause"):
            self.root_cause, self.entry_trace = True, False
            return True
        if _CHILD_TEXT.match(text):
            if text.endswith(" FAILED"):
                self.script = text[: -len(" FAILED")].strip()  # the script whose children failed
                self.script_line = number
            return True
        if (m := _CHILD_FIELD.match(text)) is not None and self.current is not None:
            self._child_field(m["key"], m["value"].strip())
            return True
        return False

    def _child_field(self, key: str, value: str) -> None:
        ev = self.current
        if key == "rank" and (m := _RANK_FIELD.match(value)):
            ev["rank"], ev["local_rank"] = int(m["rank"]), int(m["local"])
        elif key == "exitcode" and (m := _EXIT_FIELD.match(value)):
            ev["exitcode"], ev["pid"] = int(m["code"]), int(m["pid"])
            self.block_pids.add(ev["pid"])
            if ev.get("signal") is None:
                ev["signal"] = signal_of(ev["exitcode"])  # the traceback line, when there is one, says it too
        elif key == "host":
            ev["host"] = value
        elif key == "time":
            ev["time_s"] = self._full_time(value)
            ev["failed_at"] = value
        elif key == "traceback":
            self.entry_trace = value.startswith("Traceback")
            if (m := _SIGNAL.search(value)) is not None:
                ev["signal"] = m["name"]
            ev["message"] = f"torchrun child process failed: {value}"
        elif key == "error_file" and value not in ("<N/A>", ""):
            ev["error_file"] = value

    def _full_time(self, text: str) -> float | None:  # the console's, which knows the year
        raise NotImplementedError


# a log dict's first key with its opening brace lost in a paste ("'loss': -0.0, 'grad_norm': ...}")
_HEADLESS_DICT = re.compile(r"""^(?P<q>['"])[\w/().-]+(?P=q): """)


# where a log dict's next key begins: the pair before it is whole
_NEXT_KEY = re.compile(r"""(?<=[^\s,]),\s*(?P<q>['"])[\w/().%-]+(?P=q)\s*:""")
_LOG_KEYS = ("'loss'", '"loss"', "'eval_", '"eval_', "'train_runtime'", '"train_runtime"')


def log_dict_text(text: str) -> str | None:
    """A printed log dict's text as a Python dict literal, or None where ``text`` is none: the Trainer's
    ``{'loss': ...}``; the same record in JSON (``{"loss": ...}``, as ms-swift's logging.jsonl and a
    ``json.dumps`` print write it: its numbers and strings are Python literals too); and either with its
    opening brace lost (a paste that starts at the first key)."""
    text = text.strip()
    if not text.endswith("}"):
        return _torn_dict(text)
    if text.startswith("{'"):
        return text
    # the other shapes only with a Trainer log's own key: other JSON (a tool's record) is no log dict
    if not any(k in text for k in _LOG_KEYS):
        return None
    if text.startswith('{"'):
        return text
    if _HEADLESS_DICT.match(text) is not None and "{" not in text:
        return "{" + text
    return None


def _torn_dict(text: str) -> str | None:
    """A log dict cut short (a paste or the file ends inside it: ``{"train_runtime": 633.3, ..., "total_flos": 566``)
    as a dict of its pairs that a comma ends, which are whole (the last one may be cut inside its value); None
    where ``text`` is no log dict's head or holds no whole pair. A dict closed with text after it (a bar's) is
    whole, not cut: no brace is in a log dict's values."""
    if not text.startswith(("{'", '{"')) or "}" in text or not any(k in text for k in _LOG_KEYS):
        return None
    ends = [m.start() for m in _NEXT_KEY.finditer(text)]
    return text[:ends[-1]] + "}" if ends else None


def is_torn(text: str) -> bool:
    """Whether a log dict's text (one ``log_dict_text`` read) was cut short: what it read is what it holds."""
    return not text.rstrip().endswith("}")


def hf_dict(read: Read, number: int, text: str, rank: int | None, t: float | None, index: int) -> int | None:
    """transformers' Trainer prints each log as a Python dict (train, eval, final summary): the
    rows and meta it gives; the count of train logs so far, or None where ``text`` is no dict."""
    try:
        # Python prints a NaN or Inf loss as a bare nan / inf, which is no literal: quote, then restore
        values = ast.literal_eval(_NONFINITE.sub(r"'\1\2__nonfinite'", text))
    except (ValueError, SyntaxError, MemoryError, RecursionError, TypeError):
        return None
    if not isinstance(values, dict):
        return None
    # transformers 4.5x prints the values as text ({'loss': '2.449', ...}): read where they are numbers
    values = {k: float(v[: -len("__nonfinite")]) if isinstance(v, str) and v.endswith("__nonfinite")
              else to_float(v) if isinstance(v, str) and to_float(v) is not None else v
              for k, v in values.items()}
    step = _swift_progress(read, number, values)
    if "loss" in values:
        index += 1
        read.step(number, {"rank": rank if rank is not None else 0, "step": step, "time_s": t,
                           "loss": as_float(values.get("loss")), "learning_rate": as_float(values.get("learning_rate")),
                           "grad_norm": as_float(values.get("grad_norm")), "epoch": as_float(values.get("epoch")),
                           "log_index": index})
    elif any(str(k).startswith("eval_") for k in values):
        for k, v in values.items():
            if str(k).startswith("eval_"):  # at the step ms-swift's progress names (the Trainer's dict names none)
                read.rows["evals"].append({"step": step, "name": str(k), "value": as_float(v), "rank": rank,
                                           "time_s": t, "epoch": as_float(values.get("epoch"))})
    elif "train_runtime" in values:
        if read.meta.duration_s is None and as_float(values.get("train_runtime")) is not None:
            read.meta.duration_from = f"stated: train_runtime ({read.label}:{number})"
        read.meta.fill(duration_s=as_float(values.get("train_runtime")),
                       samples_per_second=as_float(values.get("train_samples_per_second")),
                       steps_per_second=as_float(values.get("train_steps_per_second")),
                       train_loss=as_float(values.get("train_loss")))
    return index


def _swift_progress(read: Read, number: int, values: dict) -> int | None:
    """ms-swift adds its progress to every log dict, ``'global_step/max_steps': '310/4491'``: the step the
    dict was logged at (the Trainer's own dict names none), and the run's progress (meta)."""
    said = values.get("global_step/max_steps")
    step, _, total = str(said).partition("/") if said is not None else ("", "", "")
    if not (step.strip().isdigit() and total.strip().isdigit()):
        return None
    read.meta.progress = {"step": int(step), "total": int(total), "line": number}
    return int(step)


def epoch_rows(read: Read, number: int, e: dict, rank: int, t: float | None) -> None:
    """A script's own epoch summary: its training loss a steps row of the epoch (no step: the line names
    none), its evaluation loss an ``eval_loss`` evals row."""
    read.step(number, {"rank": rank, "step": None, "time_s": t, "loss": e["loss"], "epoch": e["epoch"]})
    if e["eval_loss"] is not None:
        read.rows["evals"].append({"step": None, "name": "eval_loss", "value": e["eval_loss"], "rank": rank,
                                   "time_s": t, "epoch": e["epoch"]})

def signal_causes(read: Read, causes: set) -> None:
    """A worker a launcher says a signal ended (``exitcode: -9``, ``died from signal 6``) and no line
    of which said why: the signal is its cause (``causes``: the (rank, cause, line) already said)."""
    for ev in [e for e in read.rows["events"] if e["kind"] == EventKind.CHILD_FAILED and e.get("signal")]:
        if (ev["rank"], FailureCause.SIGNAL, None) in causes or (ev["signal"] == "SIGTERM" and not ev.get("root_cause")):
            continue  # said already; or a worker the launcher tore down after another failed
        causes.add((ev["rank"], FailureCause.SIGNAL, None))
        at = re.search(r":(\d+)$", ev["source"])
        line = int(at[1]) if at else None
        read.event(EventKind.FAILURE_CAUSE, line, rank=ev["rank"], level="ERROR", time_s=ev.get("time_s"),
                   cause=FailureCause.SIGNAL, message=ev["message"], error=ev["signal"],
                   local_rank=ev.get("local_rank"), pid=ev.get("pid"))


class BarRows:
    """A training progress bar's own loss (its description or postfix) and its s/it as a steps row of its
    line (of no rank where no prefix names one: a bar names none, and any process may draw it). A bar with a
    rate and no loss is kept only where nothing else logs the steps: a Trainer's bar redrawn at every step
    is no record of its own."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.rows = 0  # the steps rows of bars that stated a loss
        self.times: list[tuple] = []  # (line, row) of the bars stating a rate and no loss

    def see(self, number: int, text: str, rank: int | None, t: float | None) -> None:
        if (bar := parse_bar(text)) is None:
            return
        row = {"rank": rank, "step": bar["step"], "time_s": t, "loss": bar["loss"], "step_time_s": bar["step_time_s"]}
        if bar["loss"] is not None:
            self.read.step(number, row)
            self.rows += 1
        else:
            self.times.append((number, row))

    def finish(self) -> None:
        if len(self.read.rows["steps"]) == self.rows:
            for number, row in self.times:
                self.read.step(number, row)
