"""Console captures of training jobs: whatever a launcher printed, from every rank.

Reads, after stripping launcher prefixes (``[rank3]:``, ``[default3]:``, mpirun's
``[1,3]<stdout>:``, a per-GPU capture's ``GPU3:``, ``stdout:``/``stderr:``) and log prefixes
(glog ``E1122 10:00:00.123 ...cpp:616]``, Python logging, ``LEVEL |``):

- per-GPU step lines (``[GPU 0] Step [3/10] | Loss: ...``) -> ``steps``; their NaN report
  blocks -> ``nan_detected`` events;
- transformers' printed log dicts (``{'loss': ...}``) -> ``steps`` / ``evals`` / meta;
- NCCL INFO/WARN -> ``nccl_init`` / ``nccl_warn`` events (a WARN's ``file:line -> N``
  chain folded into it), watchdog timeouts -> ``nccl_timeout``, collective mismatches,
  CUDA OOM -> ``cuda_oom``, torchrun's ChildFailedError block -> ``child_failed``,
  other exceptions -> ``error``.

Progress bars, tracebacks and C++ frames are used (and dropped); other lines are diagnostics.
"""

from __future__ import annotations

import ast
import re
from datetime import datetime
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult, epoch, read_bytes, text_lines
from logkit.ingest.readers.nccl import (
    mismatches_from_timeouts,
    parse_mismatch,
    parse_nccl_debug,
    parse_watchdog,
)
from logkit.schema.values import as_float, to_float

_F = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|NaN|inf|-inf|Infinity"
_RANK_PREFIX = re.compile(r"^(?:\[(?:rank|default)(?P<r1>\d+)\]:|\[\d+,(?P<r2>\d+)\]<(?:stdout|stderr)>:"
                          r"|GPU(?P<r3>\d+):(?=[A-Z])|(?:stdout|stderr):)\s?")
_GLOG = re.compile(r"^\[?(?P<lvl>[IWEF])(?:(?P<md>\d{4}) (?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?))?\s*(?:\d+ )?"
                   r"(?P<where>[\w./-]+:\d+)\]\s?(?P<msg>.*)$")
_PYLOG = re.compile(r"^\[?(?P<date>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?|\d\d/\d\d/\d{4} \d\d:\d\d:\d\d)\]?"
                    r"\s*(?:[-|]\s*)?(?:(?P<name>[\w.]+)\s*-\s*)?\[?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]?"
                    r"\s*[-|:]?\s*(?P<msg>.*)$")
_LEVEL_BAR = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\s*(?:\||:)\s*(?P<msg>.*)$")
_NONFINITE = re.compile(r"(?<![\w'\"])(-?)(nan|inf)(?![\w'\"])")
_GPU_STEP = re.compile(rf"^\[GPU (?P<gpu>\d+)\] Step \[(?P<step>\d+)/(?P<max>\d+)\] \| Loss: (?P<loss>{_F})"
                         rf" \| LR: (?P<lr>{_F})(?: \| Grad Norm: (?P<gn>{_F}))?(?: \| ETA: (?P<eta>\S+))?\s*$")
_NAN_HEAD = re.compile(r"^(?P<what>NaN|Inf|NaN/Inf)[ \w]* DETECTED \[GPU (?P<gpu>\d+)\]")
_NAN_LINES = re.compile(r"^(?:={3,}|-{3,}|Step: \d+|Loss: .*|Gradient Norm: .*|PROBLEMATIC TENSORS:|.*with NaN.*"
                        r"|\s*• .*|\s+Grad values: .*|\s+(?:Param|Tensor) values: .*|\s+NaN count: .*|\s+Inf count: .*"
                        r"|Total layers with .*|Affected layers: .*|Checkpoint saved: .*|Debug tensors saved: .*)$")
_OOM = re.compile(rf"CUDA out of memory\. Tried to allocate (?P<req>{_F}) ?(?P<ru>[KMGT]?i?B)")
_OOM_NEW = re.compile(rf"GPU (?P<gpu>\d+) has a total capacity of (?P<cap>{_F}) ?(?P<cu>[KMGT]?i?B) of which "
                      rf"(?P<free>{_F}) ?(?P<fu>[KMGT]?i?B) is free")
_OOM_OLD = re.compile(rf"\(GPU (?P<gpu>\d+); (?P<cap>{_F}) ?(?P<cu>[KMGT]?i?B) total capacity;.*?"
                      rf"(?P<free>{_F}) ?(?P<fu>[KMGT]?i?B) free")
_EXCEPTION = re.compile(r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure|Warning))"
                        r"(?::\s*(?P<msg>.*))?$")
_TRACE_NOISE = re.compile(r"^(?:Traceback \(most recent call last\):|\s+File \".*\", line \d+.*|\s{2,}\S.*|\s*\^+\s*"
                          r"|During handling of the above exception.*|The above exception was the direct cause.*"
                          r"|frame #\d+: .*|Exception raised from .*|terminate called .*|\s*what\(\):.*"
                          r"|To enable traceback see: .*|\[W \S+\] .*)$")
_GLOG_STAMP = re.compile(r"\[?[IWEF](?P<md>\d{4}) (?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?)\s")
_YEAR = re.compile(r"\b((?:19|20)\d\d)-\d\d-\d\d[ _T]\d\d:")
_NCCL_VERSION = re.compile(r"^NCCL version (?P<version>\S+)")
_PROGRESS = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\d+/\d+ \[\d+:\d+(?::\d+)?<")
_CHILD_FIELD = re.compile(r"^\s+(?P<key>time|host|rank|exitcode|error_file|traceback)\s*:\s?(?P<value>.*)$")
_CHILD_ENTRY = re.compile(r"^\[(?P<i>\d+)\]:\s*$")
_CHILD_TEXT = re.compile(r"^(?:={3,}|-{3,}|\S+ FAILED|Failures:|Root Cause \(first observed failure\):"
                         r"|\s*<NO_OTHER_FAILURES>)\s*$")
_RANK_FIELD = re.compile(r"(?P<rank>-?\d+) \(local_rank: (?P<local>-?\d+)\)")
_EXIT_FIELD = re.compile(r"(?P<code>-?\d+) \(pid: (?P<pid>\d+)\)")
_SIGNAL = re.compile(r"Signal (?P<num>\d+) \((?P<name>SIG\w+)\)")
_UNITS = {"B": 1 / 2**30, "KB": 1e3 / 2**30, "KiB": 1 / 2**20, "MB": 1e6 / 2**30, "MiB": 1 / 2**10,
          "GB": 1e9 / 2**30, "GiB": 1.0, "TB": 1e12 / 2**30, "TiB": 2.0**10}


def _gib(value: str, unit: str) -> float | None:
    try:
        return float(value) * _UNITS[unit]
    except (KeyError, ValueError):
        return None


def strip_prefixes(line: str) -> tuple[str, int | None]:
    """``line`` without launcher prefixes (they may nest), and the first rank they named."""
    rank = None
    while (m := _RANK_PREFIX.match(line)) is not None and m.end() > 0:
        r = m["r1"] or m["r2"] or m["r3"]
        if rank is None and r is not None:
            rank = int(r)
        line = line[m.end():]
    return line, rank


class _Console:
    """Parser state across the lines of one capture."""

    def __init__(self, read: Read, rank: int | None) -> None:
        self.read, self.default_rank = read, rank
        self.block: str | None = None  # "nan", "child", "trace"
        self.current: dict | None = None  # the event a block is filling
        self.timeouts: list[dict] = []
        self.seen_timeouts: set[tuple] = set()
        self.warns: dict[tuple, dict] = {}  # (host, pid) -> last WARN event, for its chain
        self.network: dict[tuple, str] = {}  # (host, pid) -> network in use
        self.channels: dict[tuple, int] = {}
        self.year = 1970
        self.hf_step = 0
        self.root_cause = False

    # -- helpers ---------------------------------------------------------------------------
    def _time(self, md: str | None, hms: str | None) -> float | None:
        if not md or not hms:
            return None
        try:
            return epoch(datetime.strptime(f"{self.year}{md} {hms.split('.')[0]}", "%Y%m%d %H:%M:%S")) + (
                float("0." + hms.split(".")[1]) if "." in hms else 0.0)
        except ValueError:
            return None

    def _full_time(self, text: str) -> float | None:
        for fmt in ("%Y-%m-%d %H:%M:%S", "%Y-%m-%dT%H:%M:%S", "%m/%d/%Y %H:%M:%S", "%Y-%m-%d_%H:%M:%S"):
            try:
                stamp = datetime.strptime(text.replace(",", ".").split(".")[0], fmt)
            except ValueError:
                continue
            self.year = stamp.year
            return epoch(stamp)
        return None

    # -- blocks ----------------------------------------------------------------------------
    def _in_block(self, number: int, text: str) -> bool:
        read = self.read
        if self.block == "nan":
            if _NAN_LINES.match(text):
                ev = self.current
                if text.startswith("Step: ") and ev is not None:
                    ev["step"] = int(text[6:])
                elif text.startswith("Loss: ") and ev is not None:
                    ev["value"] = to_float(text[6:])
                elif "NaN count:" in text and ev is not None:
                    ev["nan_tensors"] = (ev.get("nan_tensors") or 0) + 1
                elif text.startswith(("Checkpoint saved: ", "Debug tensors saved: ")) and ev is not None:
                    ev["dump_path"] = text.split(": ", 1)[1]
                return True
            self.block = None
        elif self.block == "child":
            if (m := _CHILD_ENTRY.match(text)) is not None:
                self.current = read.event("child_failed", number, rank=None, level="ERROR",
                                          message="torchrun child process failed", root_cause=self.root_cause)
                return True
            if text.startswith("Root Cause"):
                self.root_cause = True
                return True
            if _CHILD_TEXT.match(text):
                return True
            if (m := _CHILD_FIELD.match(text)) is not None and self.current is not None:
                self._child_field(m["key"], m["value"].strip())
                return True
            self.block = None
        elif self.block == "trace":
            if _TRACE_NOISE.match(text):
                return True
            self.block = None
        return False

    def _child_field(self, key: str, value: str) -> None:
        ev = self.current
        if key == "rank" and (m := _RANK_FIELD.match(value)):
            ev["rank"], ev["local_rank"] = int(m["rank"]), int(m["local"])
        elif key == "exitcode" and (m := _EXIT_FIELD.match(value)):
            ev["exitcode"], ev["pid"] = int(m["code"]), int(m["pid"])
        elif key == "host":
            ev["host"] = value
        elif key == "time":
            ev["time_s"] = self._full_time(value)
            ev["failed_at"] = value
        elif key == "traceback":
            if (m := _SIGNAL.search(value)) is not None:
                ev["signal"] = m["name"]
            ev["message"] = f"torchrun child process failed: {value}"
        elif key == "error_file" and value not in ("<N/A>", ""):
            ev["error_file"] = value

    # -- one line --------------------------------------------------------------------------
    def line(self, number: int, raw: str) -> bool:
        used = False
        for segment in raw.split("\r") if "\r" in raw else (raw,):
            if segment.strip():
                used = self.segment(number, segment) or used
        return used

    def segment(self, number: int, raw: str) -> bool:
        read = self.read
        text, rank = strip_prefixes(raw)
        rank = rank if rank is not None else self.default_rank
        if self.block is not None and self._in_block(number, text):
            return True
        if "Watchdog caught" in raw and (w := parse_watchdog(raw)) is not None:
            key = (w["rank"], w["seq"], w["op"])
            if key not in self.seen_timeouts:  # torch repeats it in "what():" lines
                self.seen_timeouts.add(key)
                m = _GLOG_STAMP.search(raw)
                self.timeouts.append({**w, "line": number})
                read.event("nccl_timeout", number, level="ERROR", message=raw.strip()[-300:],
                           time_s=self._time(m["md"], m["hms"]) if m else None, **w)
            return True
        if "NCCL " in text and (n := parse_nccl_debug(text)) is not None:
            self._nccl(number, n, rank)
            return True
        if (v := _NCCL_VERSION.match(text)) is not None:
            read.meta.setdefault("nccl_version", v["version"])
            return True
        if "mismatch between collectives" in text and (mm := parse_mismatch(text)) is not None:
            read.event("collective_mismatch", number, rank=rank, level="ERROR", message=text.strip()[:300], **mm)
            return True
        if "CUDA out of memory" in text and (o := _OOM.search(text)) is not None:
            cap = _OOM_NEW.search(text) or _OOM_OLD.search(text)
            read.event("cuda_oom", number, rank=rank, level="ERROR", message=text.strip()[:300],
                       requested_gib=_gib(o["req"], o["ru"]),
                       capacity_gib=_gib(cap["cap"], cap["cu"]) if cap else None,
                       free_gib=_gib(cap["free"], cap["fu"]) if cap else None,
                       gpu=int(cap["gpu"]) if cap else None)
            self.block = "trace"
            return True
        t = None
        level = None
        if (m := _GLOG.match(text)) is not None:
            level = {"I": "INFO", "W": "WARNING", "E": "ERROR", "F": "CRITICAL"}[m["lvl"]]
            t, text = self._time(m["md"], m["hms"]), m["msg"]
        elif (m := _PYLOG.match(text)) is not None:
            level, t, text = m["level"], self._full_time(m["date"]), m["msg"]
        elif (m := _LEVEL_BAR.match(text)) is not None:
            level, text = m["level"], m["msg"]
        return self._message(number, text, level, rank, t)

    def _message(self, number: int, text: str, level: str | None, rank: int | None, t: float | None) -> bool:
        read = self.read
        if (m := _GPU_STEP.match(text)) is not None:
            read.step(number, {"rank": rank if rank is not None else int(m["gpu"]), "step": int(m["step"]),
                               "time_s": t, "loss": to_float(m["loss"]), "learning_rate": to_float(m["lr"]),
                               "grad_norm": to_float(m["gn"]), "max_steps": int(m["max"]), "eta": m["eta"]})
            return True
        if (m := _NAN_HEAD.match(text)) is not None:
            self.block = "nan"
            self.current = read.event("nan_detected", number, rank=rank if rank is not None else int(m["gpu"]),
                                      level="ERROR", message=text.strip(), gpu=int(m["gpu"]), time_s=t)
            return True
        if text.startswith("{'") and text.endswith("}"):
            return self._hf_dict(number, text, rank, t)
        if (m := _EXCEPTION.match(text)) is not None:
            if m["type"].endswith("ChildFailedError"):
                self.block, self.current, self.root_cause = "child", None, False
            else:
                self.block = "trace"
                read.event("error", number, rank=rank, level="ERROR", time_s=t, message=text.strip()[:300],
                           exception=m["type"])
            return True
        if _TRACE_NOISE.match(text):
            if text.startswith("Traceback"):
                self.block = "trace"
            return True
        if _PROGRESS.search(text):
            return True
        if level is not None:
            if level in ("WARNING", "WARN") and not text.strip(" *"):
                return True  # banner rules of torchrun's warnings
            if level in ("WARNING", "WARN", "ERROR", "CRITICAL"):
                read.event("error" if level in ("ERROR", "CRITICAL") else "warning", number, rank=rank,
                           level=level, time_s=t, message=text.strip()[:300])
            return True
        if _NAN_LINES.match(text) and text.startswith("="):
            return True  # the rule that opens a NaN report
        return False

    def _hf_dict(self, number: int, text: str, rank: int | None, t: float | None) -> bool:
        """transformers' Trainer prints each log as a Python dict (train, eval, final summary)."""
        try:
            # Python prints a NaN or Inf loss as a bare nan / inf, which is no literal: quote, then restore
            values = ast.literal_eval(_NONFINITE.sub(r"'\1\2__nonfinite'", text))
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return False
        if not isinstance(values, dict):
            return False
        values = {k: float(v[: -len("__nonfinite")]) if isinstance(v, str) and v.endswith("__nonfinite") else v
                  for k, v in values.items()}
        read = self.read
        if "loss" in values:
            self.hf_step += 1
            read.step(number, {"rank": rank if rank is not None else 0, "step": None, "time_s": t,
                               "loss": as_float(values.get("loss")),
                               "learning_rate": as_float(values.get("learning_rate")),
                               "grad_norm": as_float(values.get("grad_norm")), "epoch": as_float(values.get("epoch")),
                               "log_index": self.hf_step})
        elif any(str(k).startswith("eval_") for k in values):
            for k, v in values.items():
                if str(k).startswith("eval_"):
                    read.rows["evals"].append({"step": None, "name": str(k), "value": as_float(v), "rank": rank,
                                               "time_s": t, "epoch": as_float(values.get("epoch"))})
        elif "train_runtime" in values:
            read.meta.setdefault("duration_s", as_float(values.get("train_runtime")))
            read.meta.setdefault("samples_per_second", as_float(values.get("train_samples_per_second")))
            read.meta.setdefault("steps_per_second", as_float(values.get("train_steps_per_second")))
        return True

    def _nccl(self, number: int, n: dict, rank: int | None) -> None:
        read, key = self.read, (n["host"], n["pid"])
        if n["what"] == "network":
            if n.get("network"):
                self.network[key] = n["network"]
        elif n["what"] == "channel":
            self.channels[key] = max(self.channels.get(key, 0), n["channels"])
        elif n["what"] == "version":
            read.meta.setdefault("nccl_version", n["version"])
        elif n["what"] == "init":
            read.event("nccl_init", number, host=n["host"], rank=n["rank"], nranks=n["nranks"],
                       comm_id=n["comm_id"], network=self.network.get(key), level="INFO",
                       message=n["message"].strip(), device=int(n["dev"]), pid=int(n["pid"]),
                       channels=self.channels.get(key))
        elif n["what"] == "warn":
            self.warns[key] = read.event("nccl_warn", number, host=n["host"], rank=rank, level="WARNING",
                                         message=n["message"].strip(), device=int(n["dev"]), pid=int(n["pid"]),
                                         where=n["where"], chain=None)
        elif n["what"] == "chain" and key in self.warns:
            ev = self.warns[key]
            link = f"{n['where']} -> {n['code']}"
            ev["chain"] = link if ev["chain"] is None else f"{ev['chain']}; {link}"

    def finish(self) -> None:
        for mm in mismatches_from_timeouts(self.timeouts):
            line = max(t["line"] for t in self.timeouts if t["seq"] == mm["seq"])
            self.read.event("collective_mismatch", line, level="ERROR", rank=None,
                            message=f"collective {mm['seq']} timed out as different operations on ranks {mm['ranks']}"
                                    f": {mm['ops']}", derived_from="nccl_timeout", **mm)


def read_console(path: Path, rank: int | None = None) -> ReadResult:
    """Events, steps and meta from a console capture; ``rank`` is used where a line names none."""
    read = Read(Path(path), "console")
    parser = _Console(read, rank)
    lines = text_lines(read_bytes(read.path, read), read)
    # glog stamps carry no year: take it from the first full date in the file, else the file's
    if (year := next((m for m in map(_YEAR.search, lines) if m), None)) is not None:
        parser.year = int(year[1])
    else:
        try:
            parser.year = datetime.fromtimestamp(read.path.stat().st_mtime).year
        except (OSError, ValueError, OverflowError):
            pass
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        read.lines += 1
        if parser.line(number, line):
            read.used += 1
        else:
            read.unmatched(number, line)
    parser.finish()
    return read.result()
