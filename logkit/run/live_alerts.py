"""The live view's alerts, gathered from the live state (``run.live_state``) at each snapshot: each
rank's progress as the rules of ``analysis.alerts`` read it (when its step last advanced and its stream
last grew, on the follower's clock; its window's step times; its last stall and NaN/Inf records), and
the session's ``AlertBook`` updated with it. The rules decide; this module only reads the state.
"""

from __future__ import annotations

from datetime import datetime

from logkit.analysis.alerts import AlertBook, RankProgress
from logkit.analysis.thresholds import SLOWDOWN_RECENT
from logkit.run.live_end import RUNNING
from logkit.schema.records import COMMON

CLEARED_SHOWN_S = 60.0  # a cleared alert stays in the view (and the snapshot's alerts) this long
_TIMESTAMP = next(f for f in COMMON if f.name == "timestamp")
_STEP = next(f for f in COMMON if f.name == "step")


def progress(state, now: float, running: bool) -> RankProgress:
    """A rank's progress (``live_state._Rank``) at ``now``, as the rules read it."""
    where = state.path.name
    last = state.steps[-1] if state.steps else None
    first = state.steps[-SLOWDOWN_RECENT] if len(state.steps) >= SLOWDOWN_RECENT else None
    position, position_at = state.position if state.position else (None, None)
    return RankProgress(
        rank=state.rank, step=state.step, still_s=max(0.0, now - state.advanced_at),
        idle_s=max(0.0, now - state.last_seen), running=running,
        position=position if _current(position, state.step) else None,
        evidence=f"{where}:{last[0]}" if last else None, position_evidence=position_at,
        last_step_at=_TIMESTAMP.read(last[1]) if last else None, step_times=state.step_times,
        recent_from=(_TIMESTAMP.read(first[1]), f"{where}:{first[0]}") if first else (None, None),
        nonfinite=state.nonfinite, finite_step=state.finite_step, max_steps=state.max_steps,
        step_stride=_stride(state.steps))


def _stride(steps) -> float:
    """The mean number of steps between two of the window's step records (1 when it has fewer than two)."""
    if len(steps) < 2:
        return 1.0
    first, last = _STEP.read(steps[0][1]), _STEP.read(steps[-1][1])
    return (last - first) / (len(steps) - 1) if first is not None and last is not None else 1.0


def _current(position, step: int | None) -> bool:
    """A stall record's (step, phase) says where the rank is now: a step it has not finished (not an old stall)."""
    return bool(position and position[0] is not None and position[1]) and (step is None or position[0] > step)


def session_alerts(session, ranked: dict, now: float, wall: datetime, ended: bool, events: list) -> tuple:
    """The alerts of ``session`` (``live_state._Session``) to show at ``now``; those raised and cleared
    now are added to ``events``. ``ranked``: each expected rank's status (a rank not seen yet counts as
    one with no step since the session was first seen)."""
    if session.alerts is None:
        session.alerts = AlertBook(session.session_id, session.folder)
    ranks = []
    for rank, status in ranked.items():
        state = session.ranks.get(rank)
        if state is None:
            quiet = max(0.0, now - session.first_seen)
            ranks.append(RankProgress(rank, still_s=quiet, idle_s=quiet, running=status == RUNNING))
        else:
            ranks.append(progress(state, now, status == RUNNING))
    events.extend(session.alerts.update(ranks, session.window, session.analyses, now, wall, ended))
    return session.alerts.shown(now, CLEARED_SHOWN_S)
