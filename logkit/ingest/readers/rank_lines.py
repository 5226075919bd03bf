"""Lines in which a training process says, as it joins the distributed run, which rank it is (foreign
grammar: written by training code, read here one wording per pattern):

- fairseq and metaseq (``distributed/utils.py``, ``distributed_init``): ``initialized host <hostname> as
  rank <rank>`` through their logger (``2022-08-05 08:44:41 | INFO | metaseq.distributed.utils | ...``; forks
  print ``Initialized Host <hostname> as Rank <rank>``);
- the facebookresearch vision codebases' ``init_distributed_mode`` (DeiT, DETR, MAE, ConvNeXt ``util/misc.py``):
  ``| distributed init (rank 3): env://`` (MAE adds ``, gpu 3``), printed by every process;
- torch's own store-based barrier as a process group is set up (``distributed_c10d._store_based_barrier``,
  through the ``torch.distributed.distributed_c10d`` logger, at INFO): ``Added key: store_based_barrier_key:1 to
  store for rank: 0``, ``Waiting in store based barrier to initialize process group for rank: 0, key: ...
  (world_size=8, worker_count=1, ...)`` (every 10 s while it waits) and ``Rank 3: Completed store-based barrier
  for key:store_based_barrier_key:2 with 4 nodes.``: each the rank of the process writing it, which is
  there even where the others never join; one event per rank (the lines repeat per key and while waiting).

Each such line is a rank the run has (and a host it runs on, where the line names one): a ``rank_joined``
event; the hosts they name are stated, their count a lower bound of the nodes (``Joined``).
"""

from __future__ import annotations

import re

from logkit.ingest.readers.base import Read
from logkit.schema.vocab import EventKind

_FAIRSEQ = re.compile(r"\b[Ii]nitialized [Hh]ost (?P<host>[\w.-]+) as [Rr]ank (?P<rank>\d+)\b")
_INIT_MODE = re.compile(r"^\|?\s*distributed init \(rank (?P<rank>\d+)\)")
_BARRIER = re.compile(r"\b(?:Added key: \S+ to store for rank: (?P<added>\d+)\b"
                      r"|Waiting in store based barrier to initialize process group for rank: (?P<waiting>\d+)\b"
                      r"|Rank (?P<done>\d+): Completed store-based barrier for key)")
# the words one of those lines holds: a line without any is not tried
HINTS = ("nitialized host", "nitialized Host", "distributed init (rank", "to store for rank", "store based barrier",
         "store-based barrier")


def parse_rank_line(text: str) -> dict | None:
    """``rank`` and ``host`` (None where the line names none) a process announced, or None."""
    if (m := _FAIRSEQ.search(text)) is not None:
        return {"rank": int(m["rank"]), "host": m["host"]}
    if (m := _INIT_MODE.match(text.strip())) is not None:
        return {"rank": int(m["rank"]), "host": None}
    if (m := _BARRIER.search(text)) is not None:
        return {"rank": int(m["added"] or m["waiting"] or m["done"]), "host": None, "barrier": True}
    return None


class Joined:
    """The processes of one capture that said which rank they are, and the hosts they named."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.hosts: dict[str, set] = {}  # host -> the ranks its processes said they are
        self.first: int | None = None  # the first line that named a host
        self.barrier_ranks: set[int] = set()  # the ranks a store-based barrier line gave an event already

    def line(self, number: int, text: str, joined: dict, t: float | None) -> None:
        if joined.get("barrier"):
            if joined["rank"] in self.barrier_ranks:
                return  # the same process again: another key, or still waiting
            self.barrier_ranks.add(joined["rank"])
        self.read.event(EventKind.RANK_JOINED, number, rank=joined["rank"], host=joined["host"], level="INFO",
                        time_s=t, message=text.strip()[:300])
        if joined["host"] is not None:
            self.hosts.setdefault(joined["host"], set()).add(joined["rank"])
            self.first = self.first or number

    def write(self) -> None:
        """The hosts ``initialized host H as rank R`` lines name: stated; their count a lower bound of the nodes
        (a host with no line of its own may run ranks too); the ranks each runs, where no other line said."""
        if not self.hosts:
            return
        meta, where = self.read.meta, f"{self.read.label}:{self.first}"
        hosts = sorted(self.hosts)
        meta.state("hosts", hosts, "stated", "the hosts the processes' 'initialized host H as rank R' lines name", where)
        meta.state("nodes", len(hosts), "inferred (lower bound)",
                   "the distinct hosts the processes' 'initialized host' lines name", where)
        if meta.ranks_by_host is None:
            meta.ranks_by_host = {h: sorted(r) for h, r in sorted(self.hosts.items())}
