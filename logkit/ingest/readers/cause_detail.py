"""A failure cause's record put together across what interleaved processes and NCCL split apart.

Several processes writing one console interleave their tracebacks: one's exception line may lose its head to
another's frame (``torch.distributed  File "..."`` then ``.DistBackendError: NCCL error in: ...``). The cause
read off such a torn line is held and cites the first whole line of the same error (same rank and cause)
once one comes. NCCL's ``Last error:`` detail is added to its cause's message, and the ranks it names
(``Duplicate GPU detected : rank 3 and rank 0 both on CUDA device f000``) go to the event's ``ranks``: ranks
of the run, so the world size is above them (``ingest.ranks_seen``).
"""

from __future__ import annotations

import re

# an exception line whose head (``torch.distributed``) another process's interleaved output took: ``.DistBackendError:``
_TORN_EXCEPTION = re.compile(r"^\.[A-Z]\w*(?:Error|Exception|Interrupt)\b")


def hold_torn(held: dict, key: tuple, event: dict) -> None:
    """Keep a cause read off a torn exception line (processes' tracebacks interleaved) to be mended."""
    if _TORN_EXCEPTION.match(event["message"]):
        held[key] = (event, len(event["message"]))


def mend_torn(held: dict, key: tuple, source: str, message: str) -> None:
    """A cause held off a torn line cites the first whole line of the same error (rank and cause) instead,
    keeping the ``Last error:`` detail added after its own line."""
    if key in held and _TORN_EXCEPTION.match(message) is None:
        event, head = held.pop(key)
        event["source"], event["message"] = source, (message + event["message"][head:])[:600]


# NCCL's detail naming two ranks of the run (ncclInvalidUsage: several ranks given one GPU)
_DUPLICATE_GPU = re.compile(r"Duplicate GPU detected\s*:\s*rank (?P<a>\d+) and rank (?P<b>\d+)")


def add_detail(event: dict, text: str) -> None:
    """NCCL's ``Last error:`` detail added to its cause's message; the ranks it names (``Duplicate GPU detected :
    rank 3 and rank 0 ...``) to the event's ``ranks`` (ranks of the run: the world size is above them)."""
    event["message"] = f"{event['message']} Last error: {text.strip()}"[:500]
    if (m := _DUPLICATE_GPU.search(text)) is not None:
        held = {int(r) for r in str(event.get("ranks") or "").split(",") if r.isdigit()}
        event["ranks"] = ",".join(str(r) for r in sorted(held | {int(m["a"]), int(m["b"])}))
