"""The prefixes logkit always knows, taken off a line wherever they are found: those it cannot learn
from the file because they say something (a launcher's rank, a stream, a host), or are noise.

Always known: launcher rank prefixes (``[rank3]:``, torchrun's ``[default3]:`` and any role and template
of it (``[trainer0|0]:``), mpirun's
``[1,3]<stdout>:``, a per-GPU logger's ``GPU3:``, a script's own ``[RANK 3] ``, ``stdout:``/``stderr:``),
which give the line its rank; Ray's actor prefix ``(RayWorkerWrapper pid=4009)`` (its ``ip=`` kept as the host); a host and stream tag ``<host> [stderr]``
(its host kept); a Kubernetes (CRI) container-log prefix ``<RFC 3339 time> stdout F``; Open MPI's and PMIx's ``[host:pid]`` (its host kept); colour codes
whose ESC byte a paste lost (``[36m``, ``[0m``). A timestamp (ISO 8601, syslog ``Jan 12 10:00:01
host prog[pid]:``, a clock ``18:19:06.687``) or indentation is taken off only where another prefix or
a glog/NCCL header follows it: elsewhere it is the line's own (a Python logging line keeps its date).

What a file repeats in front of its lines (a log service's columns, pasted line numbers, pdsh hosts,
``srun -l`` task numbers, a quote marker, indentation) is learned per file by ``normalise``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from logkit.ingest.readers.formats import NCCL_HEADER

# a training script's own "[RANK 1] " / "[rank 1] " (a space, no colon: torch's "[rank1]:" has none, and its
# watchdog's "[Rank 1]" / "[PG 0 Rank 1]" tag, mixed case, is the line's own and stays)
# torch elastic's prefix is a template: its default ``[${role_name}${local_rank}]:`` ("[default3]:", torchx's
# "[trainer0]:"), and any a launcher sets (TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE: "[trainer0|0]:" for
# "[${role_name}${rank}|${local_rank}]:", "[group/3|0]:"): a word, the rank, a "|local rank" where it has one
ELASTIC = r"\[[A-Za-z][\w.-]*?/?(?P<r1>\d+)(?:\|\d+)?\]:"
MPI = r"\[\d+,(?P<r2>\d+)\]<(?:stdout|stderr)>:"
_LAUNCHER = re.compile(ELASTIC + "|" + MPI +
                       r"|GPU(?P<r3>\d+):(?=[A-Z])|(?:stdout|stderr):|\[(?:RANK|rank) (?P<r4>\d+)\](?= )")
_RAY = re.compile(r"\((?:\w+ )?pid=\d+(?:, ip=(?P<ip>[\d.]+))?\)(?: |$)")  # alone on a line: an empty one
_CRI = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) [FP] ")
_COLOUR = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
_STAMP = re.compile(r"(?P<stamp>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
                    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?: [\w.-]+ [\w./-]+(?:\[\d+\])?:)?"
                    r"|\d\d:\d\d:\d\d(?:\.\d+)?)\s+")
# what may follow a timestamp or indentation that is not the line's own
_AFTER = re.compile(r"\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std|[IWEF]\d{3,4} \d\d:\d\d:\d\d|\[[IWEF] \S+\.cpp:\d+\]"
                    r"|" + NCCL_HEADER + r"(?:NCCL |(?:INFO|WARN) )")  # NCCL's header (2.0-2.2: no word NCCL)
_HOST_STREAM_TAG = re.compile(r"(?P<host>[\w.-]+) \[(?:stdout|stderr)\] ")
# Open MPI's and PMIx's own messages, "[host:pid] PMIX ERROR: ...", "[host:pid] *** Process received signal ***",
# "[host:pid] [[43105,1],0] ORTE_ERROR_LOG: ...", a signal report's "[host:pid] [ 0] /lib64/libc.so.6(...)",
# "[host:pid] Signal: ...", "[host:pid] mca_base_component_repository_open: ...", "[host:pid] 3 more processes
# have sent help message ...": the prefix (its host kept) only where such text follows it, since any
# "[word:digits] " is also a Python logger's "[train:45] ", a source file's "[socket.cpp:436] ", axolotl's "[PID:1] "
_HOST_PID = re.compile(r"\[(?P<host>[A-Za-z][\w-]*(?:\.[\w-]+)*):\d+\] (?=PMIX |PMIx|\*\*\*|\[\[\d|\[ *\d+\] "
                       r"|ORTE_|OPAL_|(?:mca|MCA)[_ ]|Signal(?: code)?: |Failing at address|Set MCA parameter"
                       r"|\d+ more process(?:es)? ha(?:s|ve) sent (?:help|error) message)")


@dataclass(frozen=True)
class Stripped:
    """A line without its prefixes: ``text``, the first ``rank`` a launcher prefix named, a ``stamp``
    taken off it (the text of the timestamp, or None) and the ``host`` a host tag named."""

    text: str
    rank: int | None = None
    stamp: str | None = None
    host: str | None = None


def _once(line: str) -> tuple[str, int | None, str | None, str | None] | None:
    """``line`` without one leading prefix (and the rank, stamp, host it named), or None. The first
    character picks the rules to try: most lines have no prefix, and cost one look."""
    first = line[:1]
    if first == "[" and (m := _COLOUR.match(line)) is not None:
        return line[m.end():].lstrip(" "), None, None, None
    if first == "[" and (m := _HOST_PID.match(line)) is not None:
        return line[m.end():], None, None, m["host"]
    if first == "(" and (m := _RAY.match(line)) is not None:
        return line[m.end():], None, None, m["ip"]  # the actor's node, where Ray names it
    if first in "[Gs" and (m := _LAUNCHER.match(line)) is not None:
        r = m["r1"] or m["r2"] or m["r3"] or m["r4"]
        rest = line[m.end():]
        return rest[1:] if rest.startswith(" ") else rest, int(r) if r is not None else None, None, None
    if first.isdigit() and (m := _CRI.match(line)) is not None:
        return line[m.end():], None, None, None
    if first.isspace():
        return (line.lstrip(), None, None, None) if _AFTER.match(line.lstrip()) else None
    if (first.isdigit() or first.isupper()) and (m := _STAMP.match(line)) is not None \
            and _AFTER.match(line, m.end()):
        return line[m.end():], None, m["stamp"], None
    if " [std" in line[:200] and (m := _HOST_STREAM_TAG.match(line)) is not None:
        return line[m.end():], None, None, m["host"]
    return None


def peel(line: str) -> Stripped:
    """``line`` without every leading prefix logkit always knows (they nest: ``[default0]:[rank0]:``)."""
    rank = stamp = host = None
    for _ in range(8):  # prefixes nest a few deep; a bound keeps odd input cheap
        step = _once(line)
        if step is None:
            break
        line, r, s, h = step
        rank = r if rank is None else rank
        stamp = s if stamp is None else stamp
        host = h if host is None else host
    if line.endswith("[0m"):
        line = line[:-3]  # a colour reset at the end of a line, its ESC byte lost
    return Stripped(line, rank, stamp, host)


def has_prefix(line: str) -> bool:
    """Whether ``line`` begins with a prefix logkit always knows (a continuation line has none)."""
    return _once(line) is not None
