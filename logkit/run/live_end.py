"""How the ranks of a followed session stand and how it ended: what the live view knows that a file
read once does not (when a stream stopped growing, on the follower's clock).

- a rank is ``running`` until its ``session_end`` says how it ended; once one rank has ended, a rank
  that wrote nothing for ``SILENT_END_S`` is ``lost``;
- a session has ended when no rank is running: ``failed`` when a rank failed or was lost,
  ``interrupted`` when one was interrupted, else ``completed``; its detail says at which step, why
  (the failed rank's reason, else any) and which ranks ended how.
"""

from __future__ import annotations

from logkit.analysis.results.live import LiveEnd
from logkit.schema.vocab import Status

SILENT_END_S = 30.0  # one rank ended, the others silent this long: the session has ended
LOST = Status.LOST
RUNNING = Status.RUNNING


def statuses(world_size: int | None, ranks: dict[int, tuple[str, float]], first_seen: float,
             now: float) -> dict[int, str]:
    """Each expected rank's status (0 .. world_size - 1 and every rank seen); ``ranks``: rank -> (its
    status, when its stream was last written); ``lost`` for the silent ones once the others have ended."""
    expected = set(range(world_size)) if world_size else set()
    order = sorted(expected | set(ranks))
    out = {r: ranks[r][0] if r in ranks else RUNNING for r in order}
    if any(s != RUNNING for s in out.values()):
        for r, s in out.items():
            last = ranks[r][1] if r in ranks else first_seen
            if s == RUNNING and now - last >= SILENT_END_S:
                out[r] = LOST
    return out


def end_of(ranked: dict[int, str], facts: dict[int, tuple[int | None, str | None]]) -> LiveEnd | None:
    """How the session ended (None while a rank runs); ``facts``: rank -> (its latest step, its reason)."""
    if not ranked or RUNNING in ranked.values():
        return None
    values = set(ranked.values())
    status = (Status.FAILED if values & {Status.FAILED, LOST} else
              Status.INTERRUPTED if Status.INTERRUPTED in values else Status.COMPLETED)
    ranks = tuple((r, s, facts[r][1] if r in facts else None) for r, s in ranked.items())
    return LiveEnd(status, _detail(status, ranks, facts), ranks)


def _detail(status: str, ranks: tuple, facts: dict) -> str:
    steps = [facts[r][0] for r, _, _ in ranks if r in facts and facts[r][0] is not None]
    at = f" at step {max(steps)}" if steps else ""
    if status == Status.COMPLETED:
        return f"completed{at}"
    groups: dict[str, list[int]] = {}
    for r, s, _ in ranks:
        groups.setdefault(s, []).append(r)
    why = next((reason for _, s, reason in ranks if s == status and reason), None)
    if why is None and status == Status.FAILED:
        why = next((reason for _, s, reason in ranks if reason), None)
    parts = [f"{'rank' if len(rs) == 1 else 'ranks'} {', '.join(map(str, rs))} {s}"
             for s, rs in sorted(groups.items(), key=lambda kv: kv[1][0])]
    head = f"{status}{at}" + (f": {why}" if why else "")
    return head + " (" + "; ".join(parts) + ")"
