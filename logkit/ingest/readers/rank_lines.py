"""Lines in which a training process says, as it joins the distributed run, which rank it is (foreign
grammar: written by training code, read here one wording per pattern):

- fairseq and metaseq (``distributed/utils.py``, ``distributed_init``): ``initialized host <hostname> as
  rank <rank>`` through their logger (``2022-08-05 08:44:41 | INFO | metaseq.distributed.utils | ...``; forks
  print ``Initialized Host <hostname> as Rank <rank>``);
- the facebookresearch vision codebases' ``init_distributed_mode`` (DeiT, DETR, MAE, ConvNeXt ``util/misc.py``):
  ``| distributed init (rank 3): env://`` (MAE adds ``, gpu 3``), printed by every process.

Each such line is a rank the run has (and a host it runs on, where the line names one).
"""

from __future__ import annotations

import re

_FAIRSEQ = re.compile(r"\b[Ii]nitialized [Hh]ost (?P<host>[\w.-]+) as [Rr]ank (?P<rank>\d+)\b")
_INIT_MODE = re.compile(r"^\|?\s*distributed init \(rank (?P<rank>\d+)\)")
# the words one of those lines holds: a line without any is not tried
HINTS = ("nitialized host", "nitialized Host", "distributed init (rank")


def parse_rank_line(text: str) -> dict | None:
    """``rank`` and ``host`` (None where the line names none) a process announced, or None."""
    if (m := _FAIRSEQ.search(text)) is not None:
        return {"rank": int(m["rank"]), "host": m["host"]}
    if (m := _INIT_MODE.match(text.strip())) is not None:
        return {"rank": int(m["rank"]), "host": None}
    return None
