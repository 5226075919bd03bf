"""What launchers, log shippers and pastes put in front of a log's own lines, taken off before
any grammar runs.

Always recognised (they cannot be mistaken for a line's own text): launcher rank prefixes
(``[rank3]:``, torchrun's ``[default3]:``, mpirun's ``[1,3]<stdout>:``, a per-GPU logger's
``GPU3:``, ``stdout:``/``stderr:``), Ray's actor prefix ``(RayWorkerWrapper pid=4009)``, a
host and stream tag ``<host> [stderr]``, a Kubernetes (CRI) container-log prefix
``<RFC 3339 time> stdout F``, and colour codes whose ESC byte a paste lost (``[36m``, ``[0m``).
A timestamp (ISO 8601, syslog ``Jan 12 10:00:01 host prog[pid]:``, a clock ``18:19:06.687``) or
indentation is taken off only where another prefix or a glog/NCCL header follows it: elsewhere
it is the line's own (a Python logging line keeps its date).

Recognised per file, from its first lines (``Prefixes.of``): pasted line numbers (``[80746] ``
or ``451 ``, consecutive from line to line) and pdsh/clush ``host: `` prefixes (most lines,
a few hosts).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_LAUNCHER = re.compile(r"\[(?:rank|default)(?P<r1>\d+)\]:|\[\d+,(?P<r2>\d+)\]<(?:stdout|stderr)>:"
                       r"|GPU(?P<r3>\d+):(?=[A-Z])|(?:stdout|stderr):")
_RAY = re.compile(r"\((?:\w+ )?pid=\d+(?:, ip=[\d.]+)?\) ")
_HOST_STREAM = re.compile(r"[\w.-]+ \[(?:stdout|stderr)\] ")
_CRI = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:?\d\d) (?:stdout|stderr) [FP] ")
_COLOUR = re.compile(r"\[\d{1,3}(?:;\d{1,3})*m")
_STAMP = re.compile(r"(?P<stamp>\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"
                    r"|[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d(?: [\w.-]+ [\w./-]+(?:\[\d+\])?:)?"
                    r"|\d\d:\d\d:\d\d(?:\.\d+)?)\s+")
# what may follow a timestamp or indentation that is not the line's own
_AFTER = re.compile(r"\[(?:rank|default)\d+\]:|\[\d+,\d+\]<std|[IWEF]\d{3,4} \d\d:\d\d:\d\d|\[[IWEF] \S+\.cpp:\d+\]"
                    r"|[^\s:]+:\d+:\d+ \[\d+\] (?:\S+:\d+ )?NCCL ")
_NUMBERED = (re.compile(r"\[(\d{1,9})\](?: |$)"), re.compile(r"(\d{1,9})(?: (?=\S)|$)"))
_HOST = re.compile(r"(?P<host>[A-Za-z0-9][\w.-]*): (?=\S)")
_NOT_HOST = re.compile(r"(?:Error|Exception|Warning|Interrupt|Exit|Failure)$|^(?:stdout|stderr)$")
SAMPLE_LINES = 200


@dataclass(frozen=True)
class Stripped:
    """A line without its prefixes: ``text``, the first ``rank`` a launcher prefix named, and a
    ``stamp`` taken off it (the text of the timestamp, or None)."""

    text: str
    rank: int | None = None
    stamp: str | None = None


def _numbers(lines: list[str]) -> re.Pattern | None:
    """The pattern of pasted line numbers, where (almost) every line has one, counting up by one."""
    for pattern in _NUMBERED:
        found = [int(m[1]) for m in map(pattern.match, lines) if m]
        if len(found) < 2 or len(found) < 0.8 * len(lines):
            continue
        steps = sum(b == a + 1 for a, b in zip(found, found[1:], strict=False))
        if steps >= 0.8 * (len(found) - 1):
            return pattern
    return None


def _hosts(lines: list[str]) -> re.Pattern | None:
    """pdsh/clush ``host: `` prefixes: most lines have one, from a few hosts that look like hosts."""
    hosts = []
    for line in lines:
        m = _HOST.match(line)
        host = m["host"] if m else ""
        if m and not _NOT_HOST.search(host) and re.search(r"[\d.-]", host):
            hosts.append(host)
    if len(hosts) < 2 or len(hosts) < 0.6 * len(lines) or len(set(hosts)) > max(1, len(hosts) // 2):
        return None
    return re.compile("(?:" + "|".join(map(re.escape, sorted(set(hosts), key=len, reverse=True))) + "): ")


class Prefixes:
    """The prefix rules of one file: those always recognised, plus the per-file ones its first
    lines show (``of``)."""

    def __init__(self, numbers: re.Pattern | None = None, hosts: re.Pattern | None = None) -> None:
        self.numbers, self.hosts = numbers, hosts

    @classmethod
    def of(cls, sample: list[str]) -> Prefixes:
        lines = [ln for ln in sample if ln.strip()][:SAMPLE_LINES]
        return cls(_numbers(lines), _hosts(lines))

    def _once(self, line: str) -> tuple[str, int | None, str | None] | None:
        """``line`` without one leading prefix (the rank or stamp it named), or None. The first
        character picks the rules to try: most lines have no prefix, and cost one look."""
        if self.numbers is not None and (m := self.numbers.match(line)):
            return line[m.end():], None, None
        if self.hosts is not None and (m := self.hosts.match(line)):
            return line[m.end():], None, None
        first = line[:1]
        if first == "[" and (m := _COLOUR.match(line)) is not None:
            return line[m.end():].lstrip(" "), None, None
        if first == "(" and (m := _RAY.match(line)) is not None:
            return line[m.end():], None, None
        if first in "[Gs" and (m := _LAUNCHER.match(line)) is not None:
            r = m["r1"] or m["r2"] or m["r3"]
            rest = line[m.end():]
            return rest[1:] if rest.startswith(" ") else rest, int(r) if r is not None else None, None
        if first.isdigit() and (m := _CRI.match(line)) is not None:
            return line[m.end():], None, None
        if first.isspace():
            return (line.lstrip(), None, None) if _AFTER.match(line.lstrip()) else None
        if (first.isdigit() or first.isupper()) and (m := _STAMP.match(line)) is not None \
                and _AFTER.match(line, m.end()):
            return line[m.end():], None, m["stamp"]
        if " [std" in line[:200] and (m := _HOST_STREAM.match(line)) is not None:
            return line[m.end():], None, None
        return None

    def peel(self, line: str) -> Stripped:
        """``line`` without every leading prefix (they nest: ``[default0]:[rank0]:``)."""
        rank = stamp = None
        for _ in range(8):  # prefixes nest a few deep; a bound keeps odd input cheap
            step = self._once(line)
            if step is None:
                break
            line, r, s = step
            rank = r if rank is None else rank
            stamp = s if stamp is None else stamp
        if line.endswith("[0m"):
            line = line[:-3]  # a colour reset at the end of a line, its ESC byte lost
        return Stripped(line, rank, stamp)
