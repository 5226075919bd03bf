"""The ledger: where a session's wall-clock went, from the first process start to the last session end
(``wall_s``), split by ``vocab.LedgerCategory``.

A rank's own time, on its clock (``time_s``: seconds since its logger started; its process started
``startup``'s ``duration_s`` before that), is cut into windows by its step records (a step ends at its
``time_s``; it began ``step_time_s`` earlier, its data wait first, ``data_time_s`` long):

- the start-up window: the process's start to the first step's body (the first batch's wait included:
  it is the time before the first step);
- the data windows (between steps) and the bodies of the steps; a step's body is compute, less the
  exposed gradient sync and the wait for other ranks where every rank timed its phases
  (``breakdown.synced_steps``; the breakdown's other_s, the optimizer and host work, is compute);
- the tail (the last step's end to ``session_end``) and any stretch no step covers (steps not
  logged): the rest.

Then each ``timed_phase`` stretch (evaluation, saving, the logger's start and end, a phase of the
training code's own) moves its time out of the windows it overlaps into its category (a phase of
another name into the rest, said in the notes); the logger's summed short calls come out of the data
windows (``between_steps``) or the bodies (``within_steps``). So each rank's categories add up to
its own span exactly, and what no record explains is left in the rest.

Over ranks: each rank's span is set on the job clock (``clock_s`` of its timed phases, the job clock
at its ``time_s``); the time from the session's first process start to the rank's own start is its
start-up, and from its own end to the last rank's end its wait for the other ranks; the session's
categories are the mean over ranks of those (so they add up to ``wall_s``, and times the rank count
they are rank-hours: GPU-hours on a GPU per rank).

Logs of other formats give what they state: ``train_runtime`` is the wall (the Trainer's ``train()``:
start-up before it is not in it), the evaluations' ``eval_runtime`` in trainer_state.json's
log_history the evaluation; the rest of the wall is not split, said in ``unknown`` (a checkpoint's
trainer_state.json has no ``train_runtime``: its evaluations are given, the wall is None).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from logkit.analysis.kernels.breakdown import synced_steps
from logkit.analysis.results.ledger import LedgerRow
from logkit.ingest.readers.formats import FileFormat
from logkit.schema.records import EventType
from logkit.schema.vocab import LedgerCategory

C = LedgerCategory
CATEGORIES: tuple[str, ...] = tuple(c.value for c in C)
# a timed phase's name -> its category (any other name: the rest, named in the notes)
PHASE_CATEGORY = {"eval": C.EVALUATION, "evaluate": C.EVALUATION, "evaluation": C.EVALUATION,
                  "save": C.CHECKPOINT_SAVING, "checkpoint": C.CHECKPOINT_SAVING, "logging": C.LOGGING,
                  "waiting_for_ranks": C.WAITING_FOR_RANKS}
# the logging records that sum many short calls: where in the steps those calls lie
SPREAD = {"between_steps": C.DATA_WAIT, "within_steps": C.COMPUTE}
STARTUP_PHASE = "startup"
_TRAIN_RUNTIME = "stated: train_runtime"


def _covered(starts: np.ndarray, ends: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """How much of each ``[a, b)`` the sorted, disjoint windows ``[starts, ends)`` cover."""
    if not len(starts):
        return np.zeros(len(a))
    lengths = ends - starts
    before = np.concatenate([[0.0], np.cumsum(lengths)])

    def upto(x):  # window length below x
        k = np.searchsorted(starts, x, side="right") - 1
        kk = np.clip(k, 0, len(starts) - 1)
        return np.where(k >= 0, before[kk] + np.clip(x - starts[kk], 0, lengths[kk]), 0.0)

    return upto(b) - upto(a)


class _Rank:
    """One rank's split of its own span ``[begin, end]`` (``time_s``; begin <= 0 is its process start)."""

    def __init__(self, rank, steps: pd.DataFrame, events: pd.DataFrame, synced: pd.DataFrame) -> None:
        """``steps``, ``events``, ``synced``: the rank's own rows."""
        self.rank = rank
        self.notes: list[str] = []
        self.others: dict[str, float] = {}
        phases = events[events["kind"] == EventType.TIMED_PHASE] if len(events) else events
        start = phases[phases["phase"] == STARTUP_PHASE] if len(phases) else phases
        self.has_start = bool(len(start))
        self.begin = -float(start["duration_s"].iloc[0]) if self.has_start else 0.0
        clocks = (phases["clock_s"] - phases["time_s"]).dropna() if len(phases) else pd.Series(dtype=float)
        self.origin = float(clocks.median()) if len(clocks) else None  # the job clock at time_s 0
        ended = events[events["kind"] == EventType.SESSION_END]["time_s"].dropna() if len(events) else []
        last = float(np.nanmax([events["time_s"].max(), steps["time_s"].max(), 0.0]))
        self.has_end = bool(len(ended))
        self.end = float(ended.iloc[-1]) if self.has_end else last
        self.seconds = dict.fromkeys(CATEGORIES, 0.0)
        self._split(steps, synced)
        self._phases(phases)

    def _split(self, steps: pd.DataFrame, synced: pd.DataFrame) -> None:
        s = steps.dropna(subset=["time_s", "step_time_s"])
        s = s[(s["step_time_s"] >= 0) & (s["time_s"] <= self.end)].drop_duplicates("step").sort_values("time_s")
        end = s["time_s"].to_numpy(float)
        took = s["step_time_s"].to_numpy(float)
        waited = s["data_time_s"].fillna(0.0).clip(lower=0).to_numpy(float)
        prev = np.concatenate([[self.begin], end[:-1]])
        opened = np.clip(end - took, prev, end)  # a step never reaches back over the one before it
        body = np.clip(end - took + waited, opened, end)
        first = body[0] if len(body) else self.end
        self.windows = {  # category -> sorted disjoint windows (starts, ends)
            C.STARTUP: (np.array([self.begin]), np.array([first])),
            C.DATA_WAIT: (opened[1:], body[1:]),
            C.COMPUTE: (body, end),
            C.REST: (end[-1:], np.array([self.end]) if len(end) else np.array([])),
        }
        sec = self.seconds
        for cat, (a, b) in self.windows.items():
            sec[cat] = float(np.sum(b - a))
        # the stretches no window covers (steps not logged) are the rest too
        self.gap = max(0.0, (self.end - self.begin) - sum(sec.values()))
        sec[C.REST] += self.gap
        mine = synced  # the rank's own synced steps
        if len(mine):
            mine = mine[mine["step"].isin(s["step"])]
            comm, wait = float(mine["comm_exposed_s"].sum()), float(mine["wait_s"].sum())
            share = min(1.0, sec[C.COMPUTE] / (comm + wait)) if comm + wait > 0 else 0.0
            sec[C.EXPOSED_COMMUNICATION], sec[C.WAITING_FOR_RANKS] = comm * share, wait * share
            sec[C.COMPUTE] -= (comm + wait) * share
        if not self.has_start:
            self.notes.append(f"rank {self.rank}: its process start is not recorded: start-up counts from its logger's "
                              "start")
        if not self.has_end:
            self.notes.append(f"rank {self.rank}: no session_end: its span ends at its last record")

    def _phases(self, phases: pd.DataFrame) -> None:
        if not len(phases):
            return
        sec = self.seconds
        rows = phases[phases["phase"] != STARTUP_PHASE]
        spread = rows["phase_detail"].isin(list(SPREAD)) & (rows["phase"] == "logging")
        for detail, group in rows[spread].groupby("phase_detail"):
            took = float(group["duration_s"].fillna(0).sum())
            source = SPREAD[detail]
            moved = min(took, max(0.0, sec[source]))
            sec[source] -= moved
            rest = min(took - moved, max(0.0, sec[C.REST]))  # more than its windows hold: the rest held it
            sec[C.REST] -= rest
            sec[C.LOGGING] += moved + rest
        timed = rows[~spread].dropna(subset=["time_s", "duration_s"])
        if not len(timed):
            return
        b = np.clip(timed["time_s"].to_numpy(float), self.begin, self.end)
        a = np.clip(b - timed["duration_s"].to_numpy(float).clip(min=0), self.begin, self.end)
        names = timed["phase"].fillna("unnamed").astype(str).to_numpy()
        taken = np.zeros(len(a))
        for cat, (starts, ends) in self.windows.items():
            part = _covered(starts, ends, a, b)
            taken += part
            self._move(cat, names, part)
        self._move(C.REST, names, np.clip((b - a) - taken, 0, None))  # in a stretch no step covers

    def _move(self, source: str, names: np.ndarray, amounts: np.ndarray) -> None:
        for name, amount in zip(names, amounts, strict=True):
            if amount <= 0:
                continue
            target = PHASE_CATEGORY.get(name.lower(), C.REST)
            self.seconds[source] -= amount
            self.seconds[target] += amount
            if target == C.REST:
                self.others[name] = self.others.get(name, 0.0) + amount


def _own(session, synced: pd.DataFrame | None = None) -> LedgerRow | None:
    ev = session.events
    if not len(ev) or not (ev["kind"] == EventType.SESSION_START).any():
        return None
    ranks = sorted(int(r) for r in ev.loc[ev["kind"] == EventType.SESSION_START, "rank"].dropna().unique())
    if not ranks:
        return None
    synced = synced_steps(session) if synced is None else synced
    steps = dict(tuple(session.steps.groupby("rank", sort=False)))
    events = dict(tuple(ev.groupby("rank", sort=False)))
    by_rank = dict(tuple(synced.groupby("rank", sort=False))) if len(synced) else {}
    none = session.steps.iloc[:0]
    per = [_Rank(r, steps.get(r, none), events.get(r, ev.iloc[:0]), by_rank.get(r, synced.iloc[:0]))
           for r in ranks]
    notes = [n for p in per for n in p.notes]
    aligned = all(p.origin is not None for p in per)
    shift = {p.rank: p.origin if aligned else 0.0 for p in per}
    if not aligned and len(per) > 1:
        notes.append("the ranks' job clocks are not recorded: their spans are set side by side from each logger's start")
    first = min(shift[p.rank] + p.begin for p in per)
    last = max(shift[p.rank] + p.end for p in per)
    wall = last - first
    for p in per:  # the session's span: before the rank's start, its start-up; after its end, waiting
        p.seconds[C.STARTUP] += shift[p.rank] + p.begin - first
        p.seconds[C.WAITING_FOR_RANKS] += last - (shift[p.rank] + p.end)
    seconds = {c: float(np.mean([p.seconds[c] for p in per])) for c in CATEGORIES}
    notes += _rest_notes(per, len(per))
    basis = ("one rank" if len(per) == 1 else f"the mean over {len(per)} ranks") + \
        ": logkit's records (steps, timed phases, session start and end)"
    return LedgerRow(session.session_id, wall, seconds, _shares(seconds, wall), len(per), basis, (), tuple(notes))


def _rest_notes(per: list[_Rank], n: int) -> list[str]:
    """What the rest holds, where the records say: the tail after the last step, the steps not logged,
    the phases of other names (means over ranks)."""
    gap = sum(p.gap for p in per) / n
    others: dict[str, float] = {}
    for p in per:
        for name, took in p.others.items():
            others[name] = others.get(name, 0.0) + took / n
    tail = sum(p.seconds[C.REST] for p in per) / n - gap - sum(others.values())
    parts = [f"{tail:.3g}s after the last step, before the session's end, that no timed phase took"] \
        if tail > 0.0005 else []
    if gap > 0.0005:
        parts.append(f"{gap:.3g}s no step record covers")
    parts += [f"{took:.3g}s in phase '{name}'" for name, took in sorted(others.items())]
    return [f"the rest holds {'; '.join(parts)}"] if parts else []


def _foreign(session) -> LedgerRow | None:
    """A log of another format: the wall from ``train_runtime``, evaluation from the ``eval_runtime`` of the
    evaluations during training (those with a step); a row where either is known."""
    m = session.meta
    wall, basis = None, "no train_runtime in these logs: the wall is unknown"
    if m.duration_s is not None and str(m.duration_from or "").startswith(_TRAIN_RUNTIME):
        wall, basis = m.duration_s, m.duration_from
    elif m.training_time_s is not None and FileFormat.TRAINER_STATE in (m.formats or []):
        wall, basis = m.training_time_s, "stated: train_runtime (trainer_state.json's log_history)"
    wall = wall if wall is not None and wall > 0 else None
    ev = session.evals
    # an evaluation the training loop logged has its step or epoch (a results file's final one has neither)
    during = ev["step"].notna() | (ev["epoch"].notna() if "epoch" in ev else False) if len(ev) else None
    runs = ev[(ev["name"] == "eval_runtime") & during]["value"].dropna() if len(ev) else []
    if wall is None and not len(runs):
        return None
    seconds: dict = dict.fromkeys(CATEGORIES)
    if len(runs):
        seconds[C.EVALUATION] = float(runs.sum())
    notes = [f"evaluation: the eval_runtime of the {len(runs)} evaluation(s) logged with a step or epoch (an "
             "evaluate() after training logged the same way counts too)"] if len(runs) else \
        ["evaluation: no eval_runtime during training in these logs"]
    if wall is not None:
        seconds[C.REST] = max(0.0, wall - (seconds[C.EVALUATION] or 0.0))
        if (seconds[C.EVALUATION] or 0.0) > wall:
            notes.append("the evaluations logged took longer than train_runtime: some ran outside train()")
    unknown = tuple(c for c in CATEGORIES if seconds[c] is None)
    if wall is not None:
        notes += ["train_runtime is the Trainer's train() call: the start-up before it (imports, model load) is not "
                  "in it", "the rest is not split by these logs: it holds " + ", ".join(
                      c for c in unknown if c != C.STARTUP) + " (and the evaluations that were not timed)"]
    return LedgerRow(session.session_id, None if wall is None else float(wall), seconds, _shares(seconds, wall),
                     int(m.world_size or 1), basis, unknown, tuple(notes))


def _shares(seconds: dict, wall: float | None) -> dict:
    return {c: (v / wall if v is not None and wall else None) for c, v in seconds.items()}


def ledger(sessions: list, synced: dict | None = None) -> tuple[LedgerRow, ...]:
    """A ``LedgerRow`` per session whose logs give its wall-clock or a part of it (module doc); ``synced``:
    each session's ``breakdown.synced_steps`` by id where already made."""
    rows = []
    for s in sessions:
        row = _own(s, (synced or {}).get(s.session_id))
        row = row if row is not None else _foreign(s)
        if row is not None and (row.wall_s is None or row.wall_s > 0):
            rows.append(row)
    return tuple(rows)
