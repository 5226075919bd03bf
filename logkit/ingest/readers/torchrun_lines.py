"""torchrun's elastic agent in a console log (``torch/distributed/elastic/agent/server/api.py``), in its
Python logging form (``INFO:torch.distributed.elastic.agent.server.api:[default] ...``, the dump's lines
bare) or, torch 2.4 on, behind a glog header on every line (``I0129 19:30:00.934000 8689
torch/distributed/elastic/agent/server/api.py:525]   group_rank=1``; both headers are taken off before).

- the worker group's dump after a rendezvous (``_rendezvous``: ``[default] Rendezvous complete for workers.
  Result:``, then a ``  key=value`` line each): ``group_world_size`` (the agents that met: one a node, so
  the nodes), ``local_ranks`` (this node's processes), ``global_ranks``, ``global_world_sizes`` (each
  worker's world size: the job's), ``group_rank``, ``restart_count``, ``master_addr`` / ``master_port``,
  ``role_ranks``, ``role_world_sizes``. A dump printed again after a restart says what the run went on with.
- its other lines: ``[default] Starting worker group``, ``Rendezvous'ing worker group``, ``worker group
  successfully finished``, ``Setting worker0 reply file to: ...``, ``use_agent_store: True``.
"""

from __future__ import annotations

import ast
import re

from logkit.ingest.readers.stated_facts import Facts

_DUMP = re.compile(r"^\s*(?P<key>restart_count|master_addr|master_port|group_rank|group_world_size|local_ranks"
                   r"|role_ranks|global_ranks|role_world_sizes|global_world_sizes)=(?P<value>\S.*?)\s*$")
# (after Python's default format, "INFO:torch.distributed.elastic.agent.server.api:", its level or all of it left on)
_AGENT = re.compile(r"^(?:(?:[A-Z]+:)?torch\.distributed\.elastic[\w.]*:)?\[[\w-]*\] (?:Rendezvous complete for workers\. Result:|Starting worker group|Stopping worker group"
                    r"|Rendezvous'ing worker group|worker group successfully finished|Local worker group finished)"
                    r"|^(?:(?:[A-Z]+:)?torch\.distributed\.elastic[\w.]*:)?(?:Setting worker\d+ reply file to: |use_agent_store: )")


def _ints(value: str) -> list[int] | None:
    """``[8, 9, 10]`` as printed: its whole numbers; else None."""
    try:
        found = ast.literal_eval(value) if len(value) < 100_000 else None
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if isinstance(found, list) and found and all(isinstance(i, int) and not isinstance(i, bool) for i in found):
        return found
    return None


def line(facts: Facts, number: int, text: str) -> bool:
    """Whether ``text`` (a message without its log header) is torchrun's agent's (its facts noted)."""
    if (d := _DUMP.match(text)) is not None:
        facts.saw("torchrun", number)
        key, value = d["key"], d["value"]
        if key == "group_world_size" and value.isdigit():
            facts.restate("nodes", int(value), f"group_world_size={value} (torchrun's agents that met)", number)
        elif key == "local_ranks" and (ranks := _ints(value)) is not None:
            facts.restate("nproc_per_node", len(ranks), f"local_ranks lists {len(ranks)} (torchrun's agent)", number)
        elif key == "global_ranks" and (ranks := _ints(value)) is not None:
            facts.rank_seen(max(ranks), f"global_ranks {value} (torchrun's agent)", number)
        elif key == "global_world_sizes" and (sizes := _ints(value)) is not None and len(set(sizes)) == 1:
            facts.restate("world_size", sizes[0], f"global_world_sizes={sizes[0]} (torchrun's agent)", number)
        return True
    if _AGENT.match(text) is not None:
        facts.saw("torchrun", number)
        return True
    return False
