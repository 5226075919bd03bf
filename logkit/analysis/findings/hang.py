"""Who hung: a post-mortem of a run whose ranks stopped in a collective, from whatever exists.

Sources, all optional: each rank's stream (its last completed step; the step and phase its last
``stall``, ``error`` or ``session_end`` record says it was in, with the stall's Python stack),
the watchdog's timeout lines of a console capture (``nccl_timeout`` events: the collective's
sequence number, each rank's last enqueued and completed work), the launcher's failure lines
(``child_failed``), and Flight Recorder dumps (``flight_recorder`` events: the last collective
each rank enqueued).

Definitions (``definitions.HANG``):

- a rank's position: (step, phase) of its last phase record, phases ordered setup < data <
  forward_backward < gradient_sync < optimizer; without one, the step after its last completed
  step, phase unknown. A phase outside the steps (``eval``, ``save``, a name of the code's own) comes
  before the next step's phases: from its ``phase_begin`` record when no ``timed_phase`` ended it and no
  later record places the rank, or from a record's phase; a rank placed between steps (``data``) whose
  stall of the same step (not an earlier step's) has a stack in saving or evaluation code
  (``solo_phases.phase_of_stack``: the Trainer, accelerate, DeepSpeed, Lightning) is in that phase. A culprit in such a phase was doing work alone while the others
  waited: the finding says which, and since when (its begin against the waiting ranks' last record).
- waiting ranks: ranks whose last position is in a gradient sync, or in a sharded model's collective
  (phase ``collective``: an FSDP or DeepSpeed all-gather or reduce-scatter launched and not done, its
  op and phase first in the detail), or that the watchdog saw time out in a collective. The
  collective they waited in: the latest such (step, phase).
- culprits: ranks whose position is before that collective (they never reached it); by the
  watchdog: ranks whose last enqueued work is below the sequence number the others timed out
  at; by the Flight Recorder: per process group, ranks whose last collective is below the
  group's last (the ranks at the last one waited in it).
- a ``hang`` finding is made when culprits are named (critical), or, naming none, when a stall
  record is there or a rank's stream ends waiting in a sync of a run that did not complete
  (error). A watchdog timeout alone that names no one is left to the timeout finding.
"""

from __future__ import annotations

from dataclasses import dataclass

import pandas as pd

from logkit.analysis.findings.solo_phases import ALONE_ADVICE, phase_of_stack, phase_words
from logkit.analysis.results import Finding
from logkit.schema.findings import FindingKind, Severity
from logkit.schema.records import EventType
from logkit.schema.values import to_int
from logkit.schema.vocab import EventKind, Status

PHASES = ("setup", "data", "forward_backward", "collective", "gradient_sync", "optimizer")
WAITING = ("collective", "gradient_sync")  # a rank in one of these waits for the others
_ORDER = {p: i for i, p in enumerate(PHASES)}
_PHASE_KINDS = (EventType.STALL, EventType.ERROR, EventType.SESSION_END)


@dataclass(frozen=True)
class RankState:
    """Where one rank was last seen."""

    rank: int
    step: int | None  # the step it was in
    phase: str | None
    detail: str | None
    source: str | None  # file:line of the record that says so
    stack_top: str | None  # the innermost frame of its last stall record's stack
    status: str | None  # its session_end's status, None when its stream just stops
    began_clock: float | None = None  # a phase outside the steps: when it began (job clock)

    def position(self) -> tuple[int, int]:
        return (self.step if self.step is not None else -1, _ORDER.get(self.phase, -1))

    @property
    def outside_steps(self) -> bool:
        """In a phase outside the steps (eval, save, a name of the code's own): work it may do alone."""
        return self.phase is not None and self.phase not in _ORDER

    def words(self) -> str:
        if self.phase is None:
            return between_steps(self.step)
        if self.outside_steps:
            out = f"{phase_words(self.phase)[1]} ({self.phase}) {between_steps(self.step)}"
            return out + (f", at {self.stack_top}" if self.stack_top else "")
        out = f"in {self.phase} of step {self.step}" + (f" ({self.detail})" if self.detail else "")
        return out + (f", at {self.stack_top}" if self.stack_top else "")


def between_steps(step: int | None) -> str:
    """Where a rank placed at ``step`` (the step it was in) is when outside the steps: 'after step N' (the
    one before), or 'before its first step'."""
    return f"after step {step - 1}" if step and step > 1 else "before its first step"


def innermost(stack) -> str | None:
    """The innermost frame of a Python stack as ``traceback.format_stack`` prints it: 'file:line (code)'."""
    if not isinstance(stack, str):
        return None
    lines = stack.rstrip().splitlines()
    for i in range(len(lines) - 1, -1, -1):
        text = lines[i].strip()
        if text.startswith('File "'):
            path, _, rest = text[6:].partition('", line ')
            number = rest.split(",")[0]
            code = lines[i + 1].strip() if i + 1 < len(lines) else ""
            return f"{path.rsplit('/', 1)[-1]}:{number}" + (f" ({code})" if code else "")
    return None


def _last_of_each_rank(rows: pd.DataFrame) -> dict[int, dict]:
    """Each rank's last row of ``rows`` (in record order), as a dict (a Series per row costs ~0.1 ms:
    thousands of ranks)."""
    if not len(rows):
        return {}
    last = rows.dropna(subset=["rank"]).groupby("rank", sort=False).tail(1)
    return {int(row["rank"]): row for row in last.to_dict("records")}


def rank_states(session) -> dict[int, RankState]:
    """Each rank's last known position, from its stream's steps and phase records."""
    steps, ev = session.steps, session.events
    done = steps.dropna(subset=["rank", "step"]).groupby("rank")["step"].max() if len(steps) else pd.Series(dtype=float)
    ranks = set(int(r) for r in done.index)
    if not len(ev):
        return {r: RankState(r, to_int(done.get(r)) + 1, None, None, None, None, None) for r in sorted(ranks)}
    marks = ev[ev["kind"].isin(_PHASE_KINDS)]
    ranks |= set(int(r) for r in marks["rank"].dropna())
    # one pass per kind of mark, not a mask per rank (ranks x records: minutes at 1024 ranks)
    ends = _last_of_each_rank(marks[(marks["kind"] == EventType.SESSION_END) & marks["status"].notna()])
    placed = _last_of_each_rank(marks[marks["phase"].notna()])
    stalls = _last_of_each_rank(marks[marks["kind"] == EventType.STALL])
    opened = _open_phases(ev)
    ranks |= set(opened)
    out = {}
    for rank in sorted(ranks):
        status = ends[rank]["status"] if rank in ends else None
        began = opened.get(rank)
        if began is not None and (rank not in placed or _later(began, placed[rank])):
            step = to_int(began["step"])
            out[rank] = RankState(rank, (step or 0) + 1, began["phase"], None, began.get("source"),
                                  innermost(stalls[rank]["stack"]) if rank in stalls else None, status,
                                  began.get("clock_s"))
        elif rank in placed:
            row = placed[rank]
            # its last stall's stack says where it was only when no later step placed it (a save stall at step
            # 101 says nothing of an error at step 501)
            stall = stalls.get(rank)
            stall = stall if stall is not None and to_int(stall["step"]) == to_int(row["step"]) else None
            stack = innermost(stall["stack"]) if stall is not None else None
            phase = row["phase"]
            if phase in ("data", "setup") and stall is not None:  # between steps: in a framework's save or eval?
                phase = phase_of_stack(stall["stack"]) or phase
            clock = began.get("clock_s") if began is not None and began["phase"] == phase else None
            out[rank] = RankState(rank, to_int(row["step"]), phase, row.get("phase_detail"), row.get("source"),
                                  stack, status, clock)
        else:
            last_done = to_int(done.get(rank)) if rank in done.index else None
            out[rank] = RankState(rank, last_done + 1 if last_done is not None else None, None, None, None, None,
                                  status)
    return out


def _open_phases(ev: pd.DataFrame) -> dict[int, dict]:
    """Each rank's last ``phase_begin`` record that no ``timed_phase`` of the same phase ended after it."""
    begins = _last_of_each_rank(ev[ev["kind"] == EventType.PHASE_BEGIN])
    if not begins:
        return {}
    done = ev[ev["kind"] == EventType.TIMED_PHASE]
    out = {}
    for rank, row in begins.items():
        ended = done[(done["rank"] == rank) & (done["phase"] == row["phase"]) & (done["time_s"] >= row["time_s"])]
        if not len(ended):
            out[rank] = row
    return out


def _later(a: dict, b: dict) -> bool:
    """Record ``a`` was written after record ``b`` (the rank's own clock)."""
    ta, tb = a.get("time_s"), b.get("time_s")
    return pd.notna(ta) and (pd.isna(tb) or ta >= tb)


def by_streams(states: dict[int, RankState]) -> tuple[list[int], list[int], tuple[int, int] | None]:
    """(waiting ranks, culprit ranks, the (step, phase) of the collective waited in) from positions."""
    waiting = [s for s in states.values() if s.phase in WAITING]
    if not waiting:
        return [], [], None
    target = max(s.position() for s in waiting)
    # a rank whose phase is unknown is behind only when it had not finished the step before
    culprits = [s.rank for s in states.values() if s.phase not in WAITING
                and (s.position() < target if s.phase is not None else (s.step or 0) < target[0])]
    return [s.rank for s in waiting if s.position() == target], culprits, target


def collective_of(states: dict[int, RankState], waiting: list[int]) -> str | None:
    """The sharded collective the waiting ranks are in, as their phase detail begins ("all_gather (forward)",
    ``FsdpCommTimer.where``), or None."""
    for rank in waiting:
        state = states.get(rank)
        if state is not None and state.phase == "collective" and state.detail:
            head = state.detail.split(" of FSDP unit")[0].split(" in flight")[0]
            return head or None
    return None


def _by_watchdog(events: pd.DataFrame) -> tuple[list[int], list[int], int | None]:
    """(ranks that timed out, ranks whose last enqueued work is below that collective, its seq)."""
    t = events[events["kind"] == EventKind.NCCL_TIMEOUT] if len(events) else events
    if not len(t) or not t["seq"].notna().any():
        return [], [], None
    seq = int(t["seq"].max())
    timed_out = sorted({int(r) for r in t.loc[t["seq"] == seq, "rank"].dropna()})
    enq = t.dropna(subset=["rank", "last_enqueued"])
    behind = sorted({int(r) for r, e in zip(enq["rank"], enq["last_enqueued"], strict=True) if e < seq})
    return timed_out, behind, seq


def _by_flight_recorder(events: pd.DataFrame) -> tuple[list[int], list[int], str | None]:
    """(ranks behind, ranks at the last collective, where) by the dumps: per process group, the
    ranks whose last collective is below the group's last, and those that reached it."""
    fr = events[events["kind"] == EventKind.FLIGHT_RECORDER] if len(events) else events
    fr = fr.dropna(subset=["rank", "seq"]) if len(fr) else fr
    if not len(fr):
        return [], [], None
    behind, ahead, where = set(), set(), None
    for pg, rows in fr.groupby(fr["pg"].fillna("?"), sort=True):
        last = rows.groupby("rank")["seq"].max()
        if last.nunique() < 2:
            continue
        top = int(last.max())
        behind |= {int(r) for r, s in last.items() if s < top}
        ahead |= {int(r) for r, s in last.items() if s == top}
        if where is None:
            op = rows.loc[rows["seq"] == top, "op"].dropna()
            where = f"collective #{top}{f' ({op.iloc[0]})' if len(op) else ''} of process group {pg}"
    return sorted(behind), sorted(ahead - behind), where


def _flight_detail(events: pd.DataFrame, behind: list[int]) -> tuple[str, list[str]]:
    """What the culprits' Flight Recorder dumps say (their last collective, and the line of the run
    that enqueued it), and the dumps as evidence, the culprits' first."""
    fr = events[events["kind"] == EventKind.FLIGHT_RECORDER] if len(events) and behind else events.iloc[:0]
    if not len(fr):
        return "", []
    mine = fr[fr["rank"].isin(behind)].sort_values("seq", ascending=False)
    said = []
    for _, row in mine.drop_duplicates("rank").iterrows():
        stack = str(row["stack"]).splitlines()[0] if isinstance(row.get("stack"), str) else None
        said.append(f"rank {int(row['rank'])}'s last was #{int(row['seq'])} ({row['op']}, {row['status']})"
                    + (f", enqueued at {stack}" if stack else ""))
    sources = list(mine["source"].dropna()) + list(fr["source"].dropna())
    return (" The Flight Recorder: " + "; ".join(said) + "." if said else ""), sources


def hang_findings(session) -> list[Finding]:
    """The ``hang`` finding of ``session``, if it hung (see module doc)."""
    sid, ev = session.session_id, session.events
    states = rank_states(session)
    waiting, culprits, target = by_streams(states)
    timed_out, behind, seq = _by_watchdog(ev)
    fr_behind, fr_waiting, fr_where = _by_flight_recorder(ev)
    stalls = ev[ev["kind"] == EventType.STALL] if len(ev) else ev
    completed = bool(states) and all(s.status == Status.COMPLETED for s in states.values())
    named = sorted(set(culprits) | set(behind) | set(fr_behind))
    # a watchdog timeout that names no one is the timeout finding's (log_findings); a hang is more
    if not named and not len(stalls) and not (waiting and not completed):
        return []
    what = collective_of(states, waiting) if target and target[1] == _ORDER["collective"] else None
    where = (f"the {what or 'collective'} of step {target[0]}" if target and target[1] == _ORDER["collective"] else
             f"the gradient sync of step {target[0]}" if target else
             f"collective SeqNum {seq}" if seq is not None else fr_where or "a collective")
    waiters = sorted(set(waiting) | set(timed_out) | set(fr_waiting))
    lines = [f"rank {r} {states[r].words()}" for r in sorted(states) if states[r].step is not None]
    detail = (f"Rank(s) {', '.join(map(str, waiters)) or '?'} waited in {where}"
              + (f"; rank(s) {', '.join(map(str, named))} never reached it" if named else
                 "; the rank that never reached it is not in the logs")
              + (". Last seen: " + "; ".join(lines) if lines else "") + ".")
    if seq is not None and behind:
        detail += f" The watchdog: the last work rank(s) {', '.join(map(str, behind))} enqueued is below SeqNum {seq}."
    fr_text, fr_sources = _flight_detail(ev, fr_behind)
    detail += fr_text
    alone = [states[r] for r in named if r in states and states[r].outside_steps]
    detail += "".join(_alone_words(a, ev, waiters, where) for a in alone)
    # the culprits' own records first: their last stall record (its stack) says where they were
    first = stalls[stalls["rank"].isin(named)] if len(stalls) else stalls
    evidence = (list(first["source"].dropna())[::-1] + fr_sources
                + [states[r].source for r in named if r in states and states[r].source]
                + [s.source for s in states.values() if s.source] + list(stalls["source"].dropna()))
    if seq is not None:
        evidence += list(ev.loc[ev["kind"] == EventKind.NCCL_TIMEOUT, "source"].dropna())
    title = (f"Hang: rank(s) {', '.join(map(str, named))} never reached {where}" if named
             else f"Hang in {where}")
    if len(alone) == 1 and len(named) == 1:
        title = f"Hang: rank {alone[0].rank} was {phase_words(alone[0].phase)[1]} and never reached {where}"
    extra = {"culprit_phases": {a.rank: a.phase for a in alone}} if alone else {}
    return [Finding.make(Severity.CRITICAL if named else Severity.ERROR, FindingKind.HANG, sid, title, detail,
                         list(dict.fromkeys(evidence)), named or waiters, culprit_ranks=named,
                         waiting_ranks=waiters, **extra)]


def _alone_words(state: RankState, ev: pd.DataFrame, waiters: list[int], where: str) -> str:
    """' Rank 0 was saving a checkpoint (save) after step 5, begun 640 s before the waiting ranks' last record,
    while rank(s) 1 waited in ...': the culprit's work alone, and what to do about it."""
    since = ""
    if state.began_clock is not None and pd.notna(state.began_clock) and "clock_s" in ev.columns:
        theirs = ev.loc[ev["rank"].isin(waiters), "clock_s"].dropna()
        if len(theirs) and float(theirs.max()) >= state.began_clock:
            since = f", begun {float(theirs.max()) - state.began_clock:.0f} s before the waiting ranks' last record"
    return (f" Rank {state.rank} was {phase_words(state.phase)[1]} ({state.phase}) {between_steps(state.step)}"
            f"{since}, while rank(s) {', '.join(map(str, waiters)) or '?'} waited in {where}. {ALONE_ADVICE}")
