"""How a console line looks: the patterns the console reader (``console.py``) matches, where a console line
begins (``STARTS``, ``GRAMMAR``: what a learned prefix must leave, which records run on), and the year a
capture's glog stamps belong to."""

from __future__ import annotations

import re
from datetime import datetime
from pathlib import Path

from logkit.ingest.readers import torch_lines as tl
from logkit.ingest.readers.base import Lines, Read
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.normalise import Grammar
from logkit.schema.meta import META_KEYS, Key
from logkit.schema.values import RANKS

# what the stated facts may be (the meta keys', and the parts a world size is made of)
FACT_KEYS = {**META_KEYS, "nnodes": Key(int, "torchrun's --nnodes", domain=RANKS),
              "world_size_stated": Key(int, "worker N of M", domain=RANKS),
              **{name: Key(int, name, domain=RANKS) for name in (
                  "world_size_said", "num_processes_said", "num_processes", "num_machines", "num_gpus", "num_nodes",
                  "gpus_said")}}
GLOG = re.compile(r"^\[?(?P<lvl>[IWEF])(?:(?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?))?\s*(?:\d+ )?"
                   r"(?P<where>[\w./-]+:\d+)\]\s?(?P<msg>.*)$")
# (the logger's name after the date, "name - LEVEL" or torch 2.1-2.2's "[date] torch.distributed.run: [WARNING]";
# a date in UTC or with its offset too: "%Y-%m-%dT%H:%M:%SZ", as Kubeflow's and Katib's examples log)
PYLOG = re.compile(r"^\[?(?P<date>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
                   r"|\d\d/\d\d/\d{4} \d\d:\d\d:\d\d)\]?"
                   r"\s*(?:[-|]\s*)?(?:(?P<name>[\w.]+)(?:\s*-|:)\s*)?\[?(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\]?"
                   r"\s*[-|:]?\s*(?P<msg>.*)$")
# a level before the message: "INFO | ...", "WARNING: ...", or padded to a width ("%(levelname)-8s %(message)s")
LEVEL_BAR = re.compile(r"^(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)(?:\s*[|:]|\s)\s*(?P<msg>.*)$")
NAN_HEAD = re.compile(r"^(?P<what>NaN|Inf|NaN/Inf)[ \w]* DETECTED \[GPU (?P<gpu>\d+)\]")
EXCEPTION = re.compile(r"^(?P<type>(?:[A-Za-z_][\w]*\.)*[A-Za-z_]\w*(?:Error|Exception|Interrupt|Exit|Failure|Warning))"
                        r"(?::\s*(?P<msg>.*))?$")
# a record logged again by another program's logger, its name left before the record's own header (the
# wrapper's date and level taken off as PYLOG's): "[__main__] [2023-04-15 22:25:47,140] [INFO] [launch.py:229:main] ..."
RELOGGED = re.compile(r"^\[[\w.<>-]+\] (?=\[?\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)")
GLOG_STAMP = re.compile(r"\[?[IWEF](?P<md>\d{3,4}) (?P<hms>\d\d:\d\d:\d\d(?:\.\d+)?)\s")
YEAR = re.compile(r"\b((?:19|20)\d\d)-\d\d-\d\d[ _T]\d\d:")
NCCL_VERSION = re.compile(r"^NCCL version (?P<version>\S+)")
# the head of torchrun's ChildFailedError block: the script (a path or a dotted module: "BUILD FAILED" is
# no script), then FAILED
FAILED_HEAD = re.compile(r"^(?P<script>[^\s:]*[./][^\s:]*) FAILED\s*$")
PROGRESS = re.compile(r"\d+%\|.*\|\s*\d+/\d+|\d+/\d+ \[\d+:\d+(?::\d+)?<")
# a rule a script prints between its records ("-------------------------"): read, it says nothing
RULE = re.compile(r"^\s*([-=*_~#])\1{4,}\s*$")
DIST_CALL = re.compile(r"\b(?:dist|torch\.distributed)\.(?P<op>all_reduce|all_gather\w*|reduce_scatter\w*|broadcast"
                        r"|barrier|all_to_all\w*|gather|scatter|reduce|send|recv)\(")
# How a console line begins (what a learned prefix must leave): a glog or NCCL header, a traceback's
# lines, an exception, a Python logging date or level, torch's and the launchers' own lines, a log dict
# (printed, or a JSON record: ms-swift's, one a line, often all of one width, which is no terminal's wrap).
STARTS = re.compile(
    r"\[?[IWEF]\d{3,4} \d\d:\d\d:\d\d|\[[IWEF] \S+:\d+\]|[^\s:]+:\d+:\d+ \[\d+\] |NCCL version\b"
    r"|Traceback \(|\s+File \"|\s*what\(\):|terminate called|frame #\d+:|Exception raised from"
    r"|(?:[A-Za-z_][\w.]*)?(?:Error|Exception|Interrupt|Exit|Failure|Warning)\b"
    r"|\[?(?:\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?|\d\d/\d\d/\d{4} \d\d:\d\d:\d\d)\]?\s*(?:[-|]\s*)?"
    r"(?:[\w.]+\s*-\s*)?\[?(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)|(?:DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)\b"
    r"|\[GPU \d+\]|Train Epoch: \d+ \[|\{'|\{\x22[^\x22\n]{1,80}\x22\s*:|\s*\d+%\||\[(?:PG [^\]]*?)?Rank \d+\]|\[\d+\]:\s*$|Root Cause|\s+(?:time|host|rank|exitcode"
    r"|error_file|traceback)\s*:|\s*\*{5}|={5}|-{5}|\s*iteration\s+\d+/|Sending process \d+|\w[\w ]* = [\d,]+\s*$"
    r"|[Ii]nitialized [Hh]ost \S+ as|\|? ?distributed init \(rank \d+\)|[Ee]poch\s*[:=]?\s*\d+\s*[,|]"
    # a printed table's aligned "key:   value" rows (DeepSpeed's flops profiler pads each to one width: no wrap)
    r"|-+ DeepSpeed Flops Profiler|[a-z][\w ()=*/.-]*:\s{2,}\S"
    r"|(?:initializing ddp|Initializing distributed): GLOBAL_RANK: \d"
    # torchrun's elastic agent's worker group dump (torchrun_lines), a "  key=value" line each
    r"|\s*(?:restart_count|master_addr|master_port|group_rank|group_world_size|local_ranks|role_ranks|global_ranks"
    r"|role_world_sizes|global_world_sizes)="
    # a framework's own step line (iteration_lines): lines of one width that are no terminal's wrap
    r"|(?:\w+ [Ee]poch \d+, )?(?:[Ss]tep|[Ii]ter(?:ation)?):?[ \t]*\d+(?:[ \t]*/[ \t]*\d+)?(?:[ \t]+\d{1,3}%)?[ \t]*[|:,]")


def cut(text: str) -> bool:
    """A watchdog record begun and not ended (a terminal or a paste put its tail on the next line)."""
    if "Watchdog caught" in text and (w := tl.parse_watchdog(text)) is not None:
        return not w["complete"]
    return "Rank" in text and tl.WORK_START.search(text) is not None and tl.parse_work(text) is None


GRAMMAR = Grammar(STARTS, cut)
YEAR_SCAN_BYTES = 8 << 20  # how far to look for a full date (a capture without one is read twice otherwise)
GLOG_FIRST = frozenset("[IWEF")
LEVEL_FIRST = frozenset("DIWEC")
EXCEPTION_WORDS = ("Error", "Exception", "Interrupt", "Exit", "Failure", "Warning")
AGENT_HINT = ("closing signal", "exitcode", "Killing subprocess", "return code")


def year(path: Path, lines: Lines) -> int:
    """glog stamps carry no year: the first full date in the file's first ``YEAR_SCAN_BYTES``,
    else the year the file was last written."""
    scratch = Read(path, FileFormat.CONSOLE)  # a second pass: its notes are the first pass's
    seen = 0
    for _, line in lines(scratch):
        if "-" in line and (m := YEAR.search(line)) is not None:
            return int(m[1])
        seen += len(line) + 1
        if seen > YEAR_SCAN_BYTES:
            break
    try:
        return datetime.fromtimestamp(path.stat().st_mtime).year
    except (OSError, ValueError, OverflowError):
        return 1970
