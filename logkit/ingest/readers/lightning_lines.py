"""PyTorch Lightning's start-up lines in a console log, as Lightning 1.x and 2.x (and lightning_fabric) write
them when a strategy of the DDP family sets up torch.distributed:

- every process: ``initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/8`` (1.x) or ``Initializing distributed:
  GLOBAL_RANK: 1, MEMBER: 2/8`` (2.x): the process' global rank and, after the slash, the world size;
- rank 0, between two rules of 100 dashes: ``distributed_backend=nccl``, then ``All DDP processes
  registered. Starting ddp with 2 processes`` (1.x) or ``All distributed processes registered. Starting
  with 2 processes`` (2.x): the backend and the world size;
- the accelerator summary (``GPU available: True (cuda), used: True``, ``TPU available: False, using: 0
  TPU cores``, ``IPU``/``HPU available``) and each process' ``LOCAL_RANK: 0 - CUDA_VISIBLE_DEVICES:
  [0,1]``: Lightning's, nothing kept (a local rank is no global rank).

The strategy: these lines come from the DDP strategy and from those built on it (DeepSpeed's, FSDP's in
2.x), so "ddp" is inferred from them, never stated: a line that states another strategy wins.
"""

from __future__ import annotations

import re

from logkit.ingest.readers.stated_facts import Facts

_MEMBER = re.compile(r"^(?:initializing ddp|Initializing distributed): GLOBAL_RANK: (?P<rank>\d+), "
                     r"MEMBER: (?P<member>\d+)/(?P<world>\d+)\s*$")
_BACKEND = re.compile(r"^distributed_backend=(?P<backend>\w+)\s*$")
_STARTING = re.compile(r"^All (?:DDP|distributed) processes registered\. Starting (?:ddp )?with (?P<world>\d+) processes\s*$")
_NOTHING = re.compile(r"^(?:[GTIH]PU available: (?:True|False)\b|LOCAL_RANK: \d+ - CUDA_VISIBLE_DEVICES: )")


def line(facts: Facts, number: int, text: str) -> tuple[bool, int | None]:
    """(whether ``text`` is Lightning's, the global rank a process announces)."""
    stripped = text.strip()
    if (m := _MEMBER.match(stripped)) is not None:
        rank, world = int(m["rank"]), int(m["world"])
        facts.saw("lightning", number)
        facts.state("world_size", world, f"MEMBER: {m['member']}/{world} (Lightning)", number)
        facts.rank_seen(rank, f"GLOBAL_RANK: {rank} (Lightning)", number)
        facts.infer("strategy", "ddp", "Lightning's DDP start-up line", number)
        return True, rank
    if (m := _STARTING.match(stripped)) is not None:
        facts.saw("lightning", number)
        facts.state("world_size", int(m["world"]), f"Starting with {m['world']} processes (Lightning)", number)
        facts.infer("strategy", "ddp", "Lightning's DDP start-up line", number)
        return True, None
    if (m := _BACKEND.match(stripped)) is not None:
        facts.saw("lightning", number)
        facts.state("backend", m["backend"], f"distributed_backend={m['backend']} (Lightning)", number)
        return True, None
    if _NOTHING.match(stripped) is not None:
        facts.saw("lightning", number)
        return True, None
    return False, None
