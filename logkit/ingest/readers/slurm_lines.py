"""What a Slurm job's output says of its allocation: the node list a batch script prints, and the
processes a program says it runs as.

- The nodes a batch script lists under a header of its own (``Allocated nodes:`` / ``Nodes:`` /
  ``Node list:`` alone on its line, then one host name a line, as ``scontrol show hostnames`` prints them; or
  with Slurm's compressed list after it, ``Nodelist: gpu[01-02,05]``, an echo of ``$SLURM_JOB_NODELIST``):
  the job's hosts and their count, stated (the list is the allocation, not the hosts that happened to print).
- ``SLURM_JOB_NODELIST=gpu[01-02,05]`` / ``SLURM_NODELIST`` (Slurm's compressed host list, expanded here) and
  ``SLURM_NNODES=2`` / ``SLURM_JOB_NUM_NODES=2``, as a script that echoes its environment prints them.
- A program's own count of its processes, ``NumProcess::4`` (llm.c's multi-GPU set-up line, ``ProcessID:%d,
  NumProcess::%d, DeviceId:%d``): the world size, stated.
"""

from __future__ import annotations

import re

from logkit.ingest.readers.stated_facts import Facts

# the header alone (a list on the lines after it), or with the list after it ("Nodelist: gpu[01-02,05]", an echo of
# $SLURM_JOB_NODELIST): host names, beginning with a letter (a count, "Nodes: 2", is none)
_HEADER = re.compile(r"^\s*(?:Allocated |Assigned |Slurm |Job )?nodes?(?: ?list)?\s*:\s*"
                     r"(?P<list>[A-Za-z][\w.\-\[\],]*)?\s*$", re.I)
_HOST = re.compile(r"^\s*(?P<host>[A-Za-z][\w-]*(?:\.[\w-]+)*)\s*$")
_NODELIST = re.compile(r"\bSLURM_(?:JOB_)?NODELIST\s*[=:]\s*(?P<list>[\w.\-\[\],]+)")
_NNODES = re.compile(r"\bSLURM_(?:JOB_NUM_NODES|NNODES)\s*[=:]\s*(?P<n>\d+)\b")
_NUM_PROCESS = re.compile(r"\bProcessID:\s*(?P<rank>\d+), NumProcess::?\s*(?P<n>\d+)\b")
# a hostlist's item: a prefix and an optional bracketed set of numbers and ranges ("gpu[01-02,05]")
_ITEM = re.compile(r"(?P<prefix>[^\[,]+)(?:\[(?P<set>[\d,\-]+)\])?(?P<suffix>[^\[,]*)(?:,|$)")
MAX_LISTED = 4096  # hosts a header may list: a run of lines beyond it is no node list


def expand_hostlist(text: str) -> list[str] | None:
    """Slurm's compressed host list as host names (``gpu[01-02],cpu7`` -> gpu01, gpu02, cpu7), or None
    where it is not one."""
    hosts: list[str] = []
    pos = 0
    while pos < len(text):
        m = _ITEM.match(text, pos)
        if m is None or m.end() == pos:
            return None
        pos = m.end()
        if m["set"] is None:
            hosts.append(m["prefix"] + m["suffix"])
            continue
        for part in m["set"].split(","):
            lo, _, hi = part.partition("-")
            if not lo.isdigit() or (hi and not hi.isdigit()) or (hi and int(hi) - int(lo) > MAX_LISTED):
                return None
            hosts += [f"{m['prefix']}{n:0{len(lo)}d}{m['suffix']}" for n in range(int(lo), int(hi or lo) + 1)]
    return hosts or None


class SlurmLines:
    """The Slurm facts of one file's lines, noted in ``facts`` as they are read."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.listing: tuple[int, list[str]] | None = None  # an open node list: its header's line, its hosts
        self.last = 0  # the line the open list's last host (or its header) was on: a list runs line after line

    def line(self, number: int, text: str) -> bool:
        """Whether ``text`` is a line of the job's allocation (its facts noted)."""
        if self.listing is not None:
            if number == self.last + 1 and (h := _HOST.match(text)) is not None and len(self.listing[1]) < MAX_LISTED:
                self.listing[1].append(h["host"])
                self.last = number
                return True
            self._close()
        if (h := _HEADER.match(text)) is not None:
            if h["list"] is None:
                self.listing, self.last = (number, []), number
                return True
            if (hosts := expand_hostlist(h["list"])) is not None:
                self._hosts(hosts, f"the node list {h['list']}", number)
                return True
        if "NumProcess:" in text and (p := _NUM_PROCESS.search(text)) is not None:
            self.facts.state("world_size", int(p["n"]), f"NumProcess::{p['n']} (the program's own set-up line)", number)
            self.facts.rank_seen(int(p["rank"]), f"ProcessID:{p['rank']}", number)
            return True
        if "SLURM_" not in text:
            return False
        return self._environment(number, text)

    def _environment(self, number: int, text: str) -> bool:
        found = False
        if (m := _NODELIST.search(text)) is not None and (hosts := expand_hostlist(m["list"])) is not None:
            self._hosts(hosts, f"SLURM_JOB_NODELIST={m['list']}", number)
            found = True
        if (m := _NNODES.search(text)) is not None:
            self.facts.state("nodes", int(m["n"]), f"{m[0].split('=')[0].strip()}={m['n']}", number)
            found = True
        return found

    def _close(self) -> None:
        number, hosts = self.listing
        self.listing = None
        if hosts:
            self._hosts(hosts, "the node list the job printed", number)

    def _hosts(self, hosts: list[str], what: str, number: int) -> None:
        unique = sorted(set(hosts))
        self.facts.state("hosts", unique, what, number)
        self.facts.state("nodes", len(unique), f"{len(unique)} host(s) in {what}", number)

    def finish(self) -> None:
        """The file's end: a node list open at it is complete."""
        if self.listing is not None:
            self._close()
