"""axolotl's logger lines in a console log: ``[2024-04-29 13:28:50,547] [DEBUG] [axolotl.log:61] [PID:343]
[RANK:0] total_num_steps: 10116`` (the time and level are taken off as Python logging's; the logger's
name and line, the process and its rank are taken off here; ``[RANK:N]`` since mid 2023).

Facts: ``total_num_steps: N`` and ``Maximum number of steps set at N`` (the steps it set the run to),
the ranks the lines name (a lower bound of the world size), and the lists it gathers from every rank
(``gather_len_batches: [270304, ...]``, ``sample_packing_eff_est across ranks: [0.93, ...]``: one
entry per rank, so their length is the world size).
"""

from __future__ import annotations

import re

from logkit.ingest.readers.stated_facts import Facts

_PREFIX = re.compile(r"^\[(?P<logger>axolotl[\w.]*):\d+\] \[PID:\d+\](?: \[RANK:(?P<rank>\d+)\])? ?")
_STEPS = re.compile(r"^(?:total_num_steps: |Maximum number of steps set at )(?P<n>\d+)\s*$")
_PER_RANK = re.compile(r"^(?P<what>gather_len_batches|sample_packing_eff_est across ranks): \[(?P<items>[^\]]*)\]")


def line(facts: Facts, number: int, text: str) -> tuple[bool, int | None]:
    """(whether ``text`` is axolotl's, the rank it names)."""
    m = _PREFIX.match(text) if text.startswith("[axolotl") else None
    if m is None:
        return False, None
    facts.saw("axolotl", number)
    rank = int(m["rank"]) if m["rank"] is not None else None
    facts.rank_seen(rank, f"[RANK:{rank}]", number)
    body = text[m.end():]
    if (s := _STEPS.match(body)) is not None:
        facts.state("max_steps", int(s["n"]), f"{body.strip()} (axolotl)", number)
    elif (p := _PER_RANK.match(body)) is not None:
        items = [x for x in p["items"].split(",") if x.strip()]
        if items:
            facts.derive("world_size", len(items), f"{p['what']} lists {len(items)} ranks (axolotl)", number)
    return True, rank
