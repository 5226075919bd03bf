"""Live alerts (``analyze_logs --follow``): what should interrupt a person while a run trains, decided
from each rank's progress and the figures of its session's window. Pure: the follower's clock is given
(``now``, its seconds, and the wall time it is then), never read, so every rule is tested with a fake
clock; ``run/live_alerts.py`` gathers what the rules read, ``run/alert_cmd.py`` runs the user's command.

The rules (their thresholds in ``thresholds.py``):

- ``stall``: no running rank has finished a step for ``STALL_EARLY`` x the limit, max(``STALL_MIN_S``,
  ``STALL_FACTOR`` x the median step; x the steps between two step records where a run logs every
  Nth step), and the logs name the rank the others wait for; or for
  ``STALL_LATE`` x the limit, named or not. The rank named (never every rank): one whose step is behind
  the others'; else, by the ranks' stall records, one whose position is before the gradient sync the
  others wait in (``findings.hang.by_streams``); else, at ``STALL_LATE``, one whose stream stopped
  while the others' still grow (or the only rank). From a session's first step on, while every rank
  runs (once one has ended, how the session ends says it) and until every rank has reached its max
  steps (saving the model after the last step is no stall). A pause that long with every rank idle
  (a long evaluation or checkpoint) is one. Cleared when a rank finishes a step after it.
- ``slowdown``: the median of a rank's last ``SLOWDOWN_RECENT`` step times at least ``SLOWDOWN_RATIO`` x
  the median of its window's steps before them (``kernels.performance.recent_slowdown``), at
  ``SLOWDOWN_CHECKS`` checks in a row (a check: a refresh that brought the rank new steps). Cleared when
  every rank's recent median is back under ``SLOWDOWN_CLEAR`` x the median it was compared with then.
- ``nonfinite``: a rank's NaN/Inf record (the emitter's ``anomaly`` / ``nan_detected`` of a non-finite
  kind: loss, gradients), at once. Cleared when each rank that had one logs a finite loss after it.
- ``straggler``: the window's stragglers table names a rank (``is_straggler``) in ``STRAGGLER_CHECKS``
  analyses in a row that it did not name before. Cleared when it names it in none of ``STRAGGLER_CLEAR``
  analyses in a row.

``AlertBook`` keeps one session's alerts between refreshes: each raised at the refresh its condition
starts and cleared at the one it ends (or when its session ends), each said once.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta

import numpy as np

from logkit.analysis.findings.hang import RankState, by_streams
from logkit.analysis.kernels.performance import recent_slowdown
from logkit.analysis.results.live import LiveAlert, WindowFigures
from logkit.analysis.thresholds import (
    SLOWDOWN_CHECKS,
    SLOWDOWN_CLEAR,
    SLOWDOWN_RATIO,
    SLOWDOWN_RECENT,
    STALL_EARLY,
    STALL_FACTOR,
    STALL_LATE,
    STALL_MIN_S,
    STRAGGLER_CHECKS,
    STRAGGLER_CLEAR,
)
from logkit.schema.findings import FindingKind
from logkit.schema.vocab import AlertKind, AlertState

__all__ = ["RankProgress", "Call", "AlertBook", "stall_limit", "stall_call", "nonfinite_call", "recovered"]


@dataclass(frozen=True)
class RankProgress:
    """What the follower knows of one rank at a refresh (seconds on the follower's clock).

    ``still_s``: since its step last advanced (since it was first seen, before any step); ``idle_s``:
    since its stream last grew; ``position``: (step, phase) its last stall record says it is in;
    ``evidence`` / ``position_evidence``: ``file:line`` of its last step record and of that stall
    record; ``last_step_at``: its last step record's timestamp; ``step_times``: its window's step
    times, oldest first; ``recent_from``: (timestamp, ``file:line``) of the first of its last
    ``SLOWDOWN_RECENT`` steps; ``nonfinite``: (step, kind, timestamp, ``file:line``) of its first
    NaN/Inf record since its last finite loss, None when there is none; ``finite_step``: its last
    step that logged a finite loss; ``max_steps``: the steps it is to run; ``step_stride``: the steps
    between two of its step records (its window's mean: 50 at verbosity ``low``, else 1)."""

    rank: int
    step: int | None = None
    still_s: float = 0.0
    idle_s: float = 0.0
    running: bool = True
    position: tuple[int, str] | None = None
    evidence: str | None = None
    position_evidence: str | None = None
    last_step_at: str | None = None
    step_times: tuple[float, ...] = ()
    recent_from: tuple[str | None, str | None] = (None, None)
    nonfinite: tuple[int | None, str, str | None, str | None] | None = None
    finite_step: int | None = None
    max_steps: int | None = None
    step_stride: float = 1.0


@dataclass(frozen=True)
class Call:
    """What a rule finds wrong now: its kind, the rank it is about (None: the session's), when it
    started (a timestamp, or None: ``ago_s`` seconds before now), its evidence and what it says."""

    kind: str
    rank: int | None
    detail: str
    evidence: tuple[str, ...] = ()
    since: str | None = None
    ago_s: float = 0.0


def _ranks(ranks) -> str:
    ranks = sorted(ranks)
    return f"rank {ranks[0]}" if len(ranks) == 1 else "ranks " + ", ".join(map(str, ranks))


def _they(ranks, singular: str, plural: str) -> str:
    """``rank 0 waits`` / ``ranks 0, 2 wait``."""
    ranks = list(ranks)
    return f"{_ranks(ranks)} {singular if len(ranks) == 1 else plural}"


def _s(seconds: float) -> str:
    return f"{seconds:.0f} s"


def stall_limit(median_step_s: float | None) -> float:
    """max(``STALL_MIN_S``, ``STALL_FACTOR`` x the median step); ``STALL_MIN_S`` when it is not known."""
    if median_step_s is None or not np.isfinite(median_step_s) or median_step_s <= 0:
        return STALL_MIN_S
    return max(STALL_MIN_S, STALL_FACTOR * median_step_s)


def _behind(ranks: list[RankProgress]) -> tuple[list[RankProgress], str] | None:
    top = max(r.step for r in ranks if r.step is not None)
    behind = [r for r in ranks if r.step is None or r.step < top]
    if not behind or len(behind) == len(ranks):
        return None
    ahead = [r.rank for r in ranks if r.step == top]
    at = ", ".join(f"step {r.step}" if r.step is not None else "no step" for r in behind)
    return behind, (f"{_ranks(r.rank for r in behind)} stopped at {at} while {_ranks(ahead)} reached step {top} "
                    f"and {'waits' if len(ahead) == 1 else 'wait'}")


def _by_position(ranks: list[RankProgress]) -> tuple[list[RankProgress], str] | None:
    if not any(r.position for r in ranks):
        return None
    states = {r.rank: RankState(r.rank, r.position[0] if r.position else (r.step or 0) + 1,
                                r.position[1] if r.position else None, None, r.position_evidence, None, None)
              for r in ranks}
    waiting, culprits, target = by_streams(states)
    if not culprits or not waiting:
        return None
    named = [r for r in ranks if r.rank in culprits]
    where = ", ".join(states[r.rank].words() for r in named)
    return named, (f"{_ranks(culprits)} never reached the gradient sync of step {target[0]} ({where}) while "
                   f"{_they(waiting, 'waits', 'wait')} in it")


def _silent(ranks: list[RankProgress], quiet_limit: float) -> tuple[list[RankProgress], str] | None:
    silent = [r for r in ranks if r.idle_s >= quiet_limit]
    writing = [r for r in ranks if r.idle_s < quiet_limit]
    if not silent or not writing or len(silent) > len(writing):
        return None
    return silent, (f"{_ranks(r.rank for r in silent)}'s stream stopped {_s(min(r.idle_s for r in silent))} ago "
                    f"while {_they((r.rank for r in writing), 'still writes', 'still write')}")


def stall_call(ranks: list[RankProgress], median_step_s: float | None) -> Call | None:
    """The ``stall`` rule (see the module doc) over a session's ranks."""
    if not ranks or not all(r.running for r in ranks) or all(r.step is None for r in ranks):
        return None
    if all(r.step is not None and r.max_steps and r.step >= r.max_steps for r in ranks):
        return None  # training is over: saving the model before the end is no stall
    stride = max(max(r.step_stride for r in ranks), 1.0)  # a rank that logs every 50th step advances by 50
    limit = stall_limit(median_step_s * stride if median_step_s is not None else None)
    quiet = min(r.still_s for r in ranks)  # since any rank last finished a step
    if quiet < STALL_EARLY * limit:
        return None
    late = quiet >= STALL_LATE * limit
    named = _behind(ranks) or _by_position(ranks) or (_silent(ranks, STALL_EARLY * limit) if late else None)
    if named is None and late and len(ranks) == 1:
        named = ranks, f"rank {ranks[0].rank}, the only rank, stopped after step {ranks[0].step}"
    if named is None and not late:
        return None
    head = f"no step finished for {_s(quiet)} (limit {_s(limit)})"
    if named is None:
        steps = sorted({r.step for r in ranks if r.step is not None})
        at = f"step {steps[0]}" if len(steps) == 1 else f"steps {steps[0]}-{steps[-1]}"
        return Call(AlertKind.STALL, None, f"{head}: every rank stopped after {at}; the logs do not say yet which "
                    "rank the others wait for (the run's stall records will, after its stall_min_s)",
                    tuple(r.evidence for r in ranks if r.evidence), ago_s=quiet)
    culprits, why = named
    first = max(culprits, key=lambda r: r.still_s)
    evidence = [e for r in culprits for e in (r.position_evidence, r.evidence) if e]
    return Call(AlertKind.STALL, first.rank if len(culprits) == 1 else None, f"{head}: {why}",
                tuple(dict.fromkeys(evidence)), since=first.last_step_at, ago_s=first.still_s)


def recovered(nonfinite: tuple | None, finite_step: int | None) -> bool:
    """A rank's NaN/Inf record (``RankProgress.nonfinite``) has a finite loss logged after it (or there is none)."""
    if nonfinite is None:
        return True
    return finite_step is not None and nonfinite[0] is not None and finite_step > nonfinite[0]


def nonfinite_call(ranks: list[RankProgress]) -> Call | None:
    """The ``nonfinite`` rule: the ranks whose first NaN/Inf record since their last finite loss has no finite
    loss logged after it."""
    bad = [r for r in ranks if not recovered(r.nonfinite, r.finite_step)]
    if not bad:
        return None
    first = min(bad, key=lambda r: (r.nonfinite[0] if r.nonfinite[0] is not None else -1, r.rank))
    step, kind, at, where = first.nonfinite
    title = FindingKind(kind).meaning if kind in FindingKind.words() else kind
    detail = (f"{title} at step {step}" if step is not None else title) + f" on {_ranks(r.rank for r in bad)}"
    return Call(AlertKind.NONFINITE, first.rank if len(bad) == 1 else None, detail,
                tuple(r.nonfinite[3] for r in bad if r.nonfinite[3]), since=at)


@dataclass
class _Slow:
    """The slowdown rule's memory of one rank."""

    checked_step: int | None = None
    in_a_row: int = 0
    recent: float | None = None
    earlier: float | None = None
    reference: float | None = None  # the earlier median a raised slowdown is compared with


@dataclass
class AlertBook:
    """One session's alerts between refreshes: ``update`` says which were raised and cleared."""

    session_id: str
    folder: str = "."
    active: dict = field(default_factory=dict)  # (kind, rank) -> LiveAlert
    cleared: list = field(default_factory=list)  # (follower time, LiveAlert): the cleared ones, newest last
    _slow: dict = field(default_factory=dict)  # rank -> _Slow
    _named: dict = field(default_factory=dict)  # rank -> analyses in a row that named it a straggler
    _unnamed: dict = field(default_factory=dict)  # rank -> analyses in a row that did not (while raised)
    _analysis: int = -1
    _stall_steps: dict = field(default_factory=dict)  # rank -> its step when the stall was raised

    def update(self, ranks: list[RankProgress], window: WindowFigures, analysis: int, now: float,
               wall: datetime, ended: bool = False) -> list[LiveAlert]:
        """The alerts raised and cleared at this refresh. ``analysis``: the serial of the window's
        analysis (a new one: the straggler rule counts it); ``wall``: the wall time at ``now``;
        ``ended``: the session has ended (every alert still raised is cleared)."""
        clock = _Clock(now, wall)
        if ended:
            return [self._clear(key, "the session ended", clock) for key in list(self.active)]
        events = []
        stall = stall_call(ranks, _median_step(window))
        events += self._stall(stall, ranks, clock)
        events += self._set((AlertKind.NONFINITE, None), nonfinite_call(ranks), clock, "a finite loss was logged after it")
        events += self._slowdown(ranks, clock)
        if analysis != self._analysis:
            self._analysis = analysis
            events += self._stragglers(window, clock)
        return events

    def shown(self, now: float, keep_s: float) -> tuple[LiveAlert, ...]:
        """The alerts to show: those raised (oldest first), then those cleared in the last ``keep_s``."""
        self.cleared = [(t, a) for t, a in self.cleared if now - t <= keep_s]
        return tuple(self.active.values()) + tuple(a for _, a in self.cleared)

    # -- raising and clearing ---------------------------------------------------------------------
    def _raise(self, call: Call, clock: _Clock) -> LiveAlert:
        since = call.since or clock.at(clock.now - call.ago_s)
        alert = LiveAlert(call.kind, self.session_id, call.detail, since, clock.at(clock.now), call.rank,
                          tuple(call.evidence), folder=self.folder)
        self.active[(call.kind, call.rank if call.kind == AlertKind.STRAGGLER else None)] = alert
        return alert

    def _clear(self, key, why: str, clock: _Clock) -> LiveAlert:
        alert = replace(self.active.pop(key), state=AlertState.CLEARED, cleared_at=clock.at(clock.now), cleared=why)
        self.cleared.append((clock.now, alert))
        return alert

    def _set(self, key, call: Call | None, clock: _Clock, why: str) -> list[LiveAlert]:
        if call is not None and key not in self.active:
            return [self._raise(call, clock)]
        if call is None and key in self.active:
            return [self._clear(key, why, clock)]
        return []

    # -- the rules that remember --------------------------------------------------------------------
    def _stall(self, call: Call | None, ranks: list[RankProgress], clock: _Clock) -> list[LiveAlert]:
        key = (AlertKind.STALL, None)
        if key not in self.active:
            if call is None:
                return []
            self._stall_steps = {r.rank: r.step for r in ranks}
            return [self._raise(call, clock)]
        moved = [r for r in ranks if r.step is not None and r.step != self._stall_steps.get(r.rank)]
        if not moved:
            return []
        return [self._clear(key, f"{_ranks(r.rank for r in moved)} finished step "
                                 f"{max(r.step for r in moved)}", clock)]

    def _slowdown(self, ranks: list[RankProgress], clock: _Clock) -> list[LiveAlert]:
        key = (AlertKind.SLOWDOWN, None)
        raised = key in self.active
        for r in ranks:
            memo = self._slow.setdefault(r.rank, _Slow())
            if r.step is None or r.step == memo.checked_step:
                continue  # no new step: no check
            memo.checked_step = r.step
            figure = recent_slowdown(r.step_times)
            if figure is None:
                memo.in_a_row, memo.recent = 0, None
                continue
            memo.recent, memo.earlier = figure
            slow = memo.recent >= SLOWDOWN_RATIO * memo.earlier
            memo.in_a_row = memo.in_a_row + 1 if slow else 0
        if raised:
            return self._slowdown_over(key, clock)
        slow = [r for r in ranks if self._slow[r.rank].in_a_row >= SLOWDOWN_CHECKS]
        if not slow:
            return []
        for memo in self._slow.values():
            memo.reference = memo.earlier if memo.recent is not None else None
        return [self._raise(self._slowdown_call(ranks, slow), clock)]

    def _slowdown_call(self, ranks: list[RankProgress], slow: list[RankProgress]) -> Call:
        worst = max(slow, key=lambda r: self._slow[r.rank].recent / self._slow[r.rank].earlier)
        m = self._slow[worst.rank]
        on = "every rank" if len(slow) == len(ranks) and len(ranks) > 1 else _ranks(r.rank for r in slow)
        detail = (f"median step time of the last {SLOWDOWN_RECENT} steps {m.recent:.4g} s, {m.recent / m.earlier:.2f}x "
                  f"the {m.earlier:.4g} s of the window's steps before them (threshold {SLOWDOWN_RATIO:g}x), on {on}")
        at, where = worst.recent_from
        return Call(AlertKind.SLOWDOWN, worst.rank if on != "every rank" else None, detail,
                    (where,) if where else (), since=at)

    def _slowdown_over(self, key, clock: _Clock) -> list[LiveAlert]:
        compared = [m for m in self._slow.values() if m.reference and m.recent is not None]
        if not compared or any(m.recent >= SLOWDOWN_CLEAR * m.reference for m in compared):
            return []
        worst = max(m.recent / m.reference for m in compared)
        for memo in self._slow.values():
            memo.reference, memo.in_a_row = None, 0
        return [self._clear(key, f"median step time back to {worst:.2f}x the median before the slowdown "
                                 f"(under {SLOWDOWN_CLEAR:g}x)", clock)]

    def _stragglers(self, window: WindowFigures, clock: _Clock) -> list[LiveAlert]:
        named = {r.rank: r for r in window.stragglers if r.is_straggler}
        events = []
        for rank in sorted(set(named) | set(self._named) | {k[1] for k in self.active if k[0] == AlertKind.STRAGGLER}):
            key = (AlertKind.STRAGGLER, rank)
            self._named[rank] = self._named.get(rank, 0) + 1 if rank in named else 0
            self._unnamed[rank] = 0 if rank in named else self._unnamed.get(rank, 0) + 1
            if key not in self.active and self._named[rank] >= STRAGGLER_CHECKS:
                events.append(self._raise(_straggler_call(rank, named[rank], window), clock))
            elif key in self.active and self._unnamed[rank] >= STRAGGLER_CLEAR:
                events.append(self._clear(key, f"the stragglers table has not named rank {rank} in "
                                               f"{STRAGGLER_CLEAR} analyses", clock))
        return events


def _straggler_call(rank: int, row, window: WindowFigures) -> Call:
    finding = next((f for f in window.findings if f.kind == FindingKind.STRAGGLER and rank in f.ranks), None)
    if finding is not None:
        return Call(AlertKind.STRAGGLER, rank, f"{finding.title}: {finding.detail}", finding.evidence)
    return Call(AlertKind.STRAGGLER, rank, f"rank {rank} is a straggler: median step {row.median_step_s:.4g} s, "
                f"{row.vs_fastest:.2f}x the fastest rank's")


def _median_step(window: WindowFigures) -> float | None:
    p50 = [r.step_p50_s for r in window.performance if r.step_p50_s is not None and np.isfinite(r.step_p50_s)]
    return float(np.median(p50)) if p50 else None


@dataclass(frozen=True)
class _Clock:
    """The follower's time ``now`` and the wall time then: a time of the follower's clock as ISO 8601."""

    now: float
    wall: datetime

    def at(self, t: float) -> str:
        return (self.wall - timedelta(seconds=self.now - t)).isoformat(timespec="milliseconds")
