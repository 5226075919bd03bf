"""Work one rank does alone while the others wait for it in the next collective: rank 0 evaluating or
saving a checkpoint by itself, the other ranks already in the next step's gradient sync (or all-gather).
Harmless when short; longer than the process group's timeout it ends the run with a watchdog timeout,
which is how many reported NCCL timeouts begin.

From the synchronised steps (``kernels.breakdown.synced_steps``: each rank's wait at a step's
collectives for the last arrival) and the ranks' ``timed_phase`` records (eval, save, a phase of the
code's own; each carries the step completed before it). Definitions (``definitions.SOLO_WORK``):

- a step's last arrival ``r`` (largest lateness); the waiters: every other rank, each waiting its
  ``wait_s`` less its own median ``wait_s`` (a chronic straggler's usual lateness is the straggler
  finding's, not this one's); ``waited`` = the least of those (every other rank waited at least that).
- ``waited`` must exceed ``thresholds.SOLO_WORK_STEP_SHARE`` of the median step,
  ``SOLO_WORK_NOISE`` x the robust SD of all lateness values, and ``SOLO_WORK_MIN_S``.
- what ``r`` did: its timed phases after the step before (by name, each less the median of the other
  ranks' time in the same phase after the same step: a phase every rank runs together is no one's
  alone), when their sum explains ``SOLO_WORK_EXPLAINED`` of ``waited``; else an unrecorded gap: its
  data time of the step (the gap since its previous step, phases included) and host time of the step
  before (after the sync), each above its median, less its phases, and less the median of the other
  ranks' same gap at that step (a pause every rank takes, a data loader's epoch boundary, is no one's
  alone: the phases' rule), when that explains as much and is at least ``SOLO_GAP_MIN_S``. Nothing explains it: no finding (a one-off slow step is the slow
  steps finding's).
- one finding per rank that worked alone, every occurrence listed, the longest wait in the title.
"""

from __future__ import annotations

import math

import pandas as pd

from logkit.analysis import thresholds as th
from logkit.analysis.findings.solo_phases import ALONE_ADVICE, phase_words
from logkit.analysis.kernels.breakdown import synced_steps
from logkit.analysis.kernels.straggler import robust_sd
from logkit.analysis.kernels.strategy import first_collective
from logkit.analysis.results import Finding
from logkit.schema.findings import FindingKind
from logkit.schema.records import EventType
from logkit.schema.values import to_int

_KIND = FindingKind.SOLO_WORK
# the logger's own stretches: not the training code's work
_NOT_WORK = ("logging", "startup", "waiting_for_ranks")
SHOWN = 5  # occurrences spelled out in the detail


def _ranks(ranks) -> str:
    ranks = sorted(int(r) for r in ranks)
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    return ("rank " if len(ranks) == 1 else "ranks ") + ", ".join(map(str, ranks))


def _phases(session) -> pd.DataFrame:
    """The training code's timed phases: rank, step (completed before it), phase, duration_s, source."""
    ev = session.events
    if not len(ev) or "phase" not in ev.columns:
        return pd.DataFrame(columns=["rank", "step", "phase", "duration_s", "source"])
    ph = ev[(ev["kind"] == EventType.TIMED_PHASE) & ~ev["phase"].isin(_NOT_WORK)]
    ph = ph.dropna(subset=["rank", "phase", "duration_s"])
    return ph.reindex(columns=["rank", "step", "phase", "duration_s", "source"])


def excess(mine: float, others) -> float:
    """``mine`` less what the others also spent at the same point: the median of ``others`` (none: 0). A pause
    every rank takes together (an evaluation on all ranks, a data loader's epoch boundary) is no one's alone."""
    others = [float(x) for x in others]
    return mine - (float(pd.Series(others).median()) if others else 0.0)


def _alone(phases: pd.DataFrame, rank: int, after: int | None) -> list[tuple[str, float, float, list]]:
    """(phase, seconds, seconds alone, sources) of ``rank``'s phases after step ``after`` (None: before its
    first step): alone, less the median of the other ranks' time in the same phase after the same step (none: 0)."""
    here = _after(phases, after)
    out = []
    for name, rows in here.groupby("phase", sort=False):
        mine = rows[rows["rank"] == rank]
        if not len(mine):
            continue
        others = rows[rows["rank"] != rank].groupby("rank")["duration_s"].sum()
        spent = float(mine["duration_s"].sum())
        out.append((str(name), spent, excess(spent, others), list(mine["source"].dropna())))
    return out


def _after(phases: pd.DataFrame, after: int | None) -> pd.DataFrame:
    """The phases after step ``after`` (None: before the first step)."""
    return phases[phases["step"].isna()] if after is None else phases[phases["step"] == after]


def _gap(at: pd.DataFrame, indexed: pd.DataFrame, usual: tuple, spent: pd.Series, rank: int,
         prev: int | None) -> float:
    """``rank``'s unrecorded gap at this step: its data time (the gap since its previous step, phases included)
    and the host time after the previous step's sync, each above its median, less its phases' time ``spent``."""
    usual_data, usual_other = usual
    data = at.at[rank, "data_s"]
    gap = float(data - usual_data[rank]) if pd.notna(data) else 0.0
    if prev is not None and (rank, prev) in indexed.index:
        host = indexed.at[(rank, prev), "other_s"]
        gap += max(0.0, float(host - usual_other[rank])) if pd.notna(host) else 0.0
    return gap - float(spent.get(rank, 0.0))  # the data time holds its phases whole


def solo_events(session, rows: pd.DataFrame | None = None) -> list[dict]:
    """Every occurrence of work one rank did alone while the others waited (see module doc): dicts of rank,
    step (of the collectives waited in), after_step, what (its phases' names; empty: an unrecorded gap),
    solo_s, waited_s, waiting_ranks, sources."""
    rows = synced_steps(session) if rows is None else rows
    if rows is None or rows.empty or rows["rank"].nunique() < 2:
        return []
    median_step = float(rows["step_s"].median())
    noise = robust_sd(rows["lateness_s"])
    bar = max(th.SOLO_WORK_STEP_SHARE * median_step, th.SOLO_WORK_NOISE * (noise if math.isfinite(noise) else 0.0),
              th.SOLO_WORK_MIN_S)
    by_rank = rows.groupby("rank")
    usual_wait = by_rank["wait_s"].median()
    # a cheap cut before the per-step work: a step where no rank waited that long cannot pass
    extra = rows["wait_s"] - rows["rank"].map(usual_wait)
    most = extra.groupby(rows["step"]).transform("max")
    candidates = rows.loc[most >= bar, "step"].unique()
    if not len(candidates):
        return []
    phases = _phases(session)
    indexed = rows.set_index(["rank", "step"])
    out = []
    usual = (by_rank["data_s"].median(), by_rank["other_s"].median())
    for step in sorted(candidates):
        event = _event(rows, phases, indexed, usual, usual_wait, int(step), bar)
        if event is not None:
            out.append(event)
    return out


def _event(rows, phases, indexed, usual, usual_wait, step: int, bar: float) -> dict | None:
    """The occurrence at ``step`` when its last arrival's work alone explains the others' wait, else None."""
    at = rows[rows["step"] == step].set_index("rank")
    last = int(at["lateness_s"].idxmax())
    others = at.drop(index=last)
    waits = others["wait_s"] - others.index.map(usual_wait).to_numpy()
    waited = float(waits.min())
    if waited < bar:
        return None
    prev = step - 1 if step > 1 else None  # the phases' step: the one completed before them
    alone = _alone(phases, last, prev)
    solo = sum(s for _, _, s, _ in alone if s > 0)
    event = dict(rank=last, step=step, after_step=prev, waited_s=waited,
                 waiting_ranks=list(map(int, others.index)), waited_max_s=float(waits.max()))
    if solo >= th.SOLO_WORK_EXPLAINED * waited:
        named = [(n, s, src) for n, _, s, src in alone if s > 0]
        event.update(what=[n for n, _, _ in named], solo_s=solo, sources=[x for *_, src in named for x in src])
        return event
    # unrecorded: its gap less the median of the other ranks' gaps at the same step (what they also spent:
    # a data loader's epoch boundary pauses every rank), a pause below a rank's usual counting as none
    spent = _after(phases, prev).groupby("rank")["duration_s"].sum()
    gaps = {r: _gap(at, indexed, usual, spent, int(r), prev) for r in at.index}
    gap = excess(gaps.pop(last), [max(0.0, g) for g in gaps.values()])
    if gap >= max(th.SOLO_WORK_EXPLAINED * waited, th.SOLO_GAP_MIN_S):
        event.update(what=[], solo_s=gap, sources=[])
        return event
    return None


def _when(e: dict) -> str:
    """'after step N' (the step its work followed), or 'before step N' (work before the first step)."""
    return f"after step {e['after_step']}" if e["after_step"] else f"before step {e['step']}"


def _said(e: dict) -> tuple[str, str]:
    """(what rank e['rank'] did, as a verb phrase; and its activity) for one occurrence."""
    if not e["what"]:
        after = f"between steps {e['after_step']} and {e['step']}" if e["after_step"] else _when(e)
        return f"spent {e['solo_s']:.1f} s {after} on work no phase records", "in time no phase records"
    verbs = [phase_words(n)[0] for n in e["what"]]
    return " and ".join(verbs), " and ".join(phase_words(n)[1] for n in e["what"])


def _sentence(e: dict) -> str:
    """'rank 0 spent 1.5 s saving a checkpoint after step 5 while rank 1 waited 1.5 s in step 6's collectives'."""
    waited = (f"{e['waited_s']:.1f} s" if e["waited_max_s"] - e["waited_s"] < 0.05
              else f"{e['waited_s']:.1f}-{e['waited_max_s']:.1f} s")
    if e["what"]:
        doing = f"spent {e['solo_s']:.1f} s {_said(e)[1]} ({', '.join(e['what'])}) {_when(e)}"
    else:
        doing = _said(e)[0]
    where = f"the {' / '.join(e['ops'])} of step {e['step']}" if e.get("ops") else f"the collectives of step {e['step']}"
    return f"rank {e['rank']} {doing} while {_ranks(e['waiting_ranks'])} waited {waited} in {where}"


def _ops(session) -> list[str]:
    """The collective the waiting ranks waited in: the first of a step in the session's strategy
    (``strategy.first_collective``: from the strategy alone, the same in the CLI and the Python API)."""
    meta = session.meta
    first = first_collective(getattr(meta, "strategy", None), to_int(getattr(meta, "zero_stage", None)))
    return [first] if first else []


def solo_work_findings(session, rows: pd.DataFrame | None = None) -> list[Finding]:
    """One ``solo_work`` finding per rank that worked alone while the others waited (see module doc)."""
    events = solo_events(session, rows)
    for e in events:
        e["ops"] = _ops(session)
    out = []
    for rank in sorted({e["rank"] for e in events}):
        mine = [e for e in events if e["rank"] == rank]
        top = max(mine, key=lambda e: e["waited_s"])
        total = sum(e["waited_s"] for e in mine)
        shown = sorted(mine, key=lambda e: -e["waited_s"])[:SHOWN]
        lines = "; ".join(_sentence(e) for e in sorted(shown, key=lambda e: e["step"]))
        more = f" (and {len(mine) - SHOWN} more)" if len(mine) > SHOWN else ""
        if len(mine) == 1:
            title = (f"Rank {rank} {_said(top)[0]} alone {_when(top)} ({top['solo_s']:.1f} s) while "
                     f"{_ranks(top['waiting_ranks'])} waited {top['waited_s']:.1f} s in the next collective"
                     if top["what"] else
                     f"Rank {rank} {_said(top)[0]} while {_ranks(top['waiting_ranks'])} waited "
                     f"{top['waited_s']:.1f} s in the next collective")
        else:
            title = (f"Rank {rank} worked alone {len(mine)} times while the others waited in the next collective "
                     f"(up to {top['waited_s']:.1f} s, {total:.1f} s in all)")
        detail = (lines[0].upper() + lines[1:] + more + ". " + ALONE_ADVICE
                  + (" Time no phase records: wrap that work in `tlog.phase(\"save\")` (or a name of your own) "
                     "to have it named." if any(not e["what"] for e in mine) else ""))
        sources = [s for e in mine for s in e["sources"]] or [
            f for f in (session.meta.files or []) if str(f).endswith(f"_rank{rank}.jsonl")]
        out.append(Finding.make(_KIND.severity, _KIND, session.meta.session_id, title, detail, sources,
                                [rank, *top["waiting_ranks"]], solo_rank=rank,
                                occurrences=[{k: (round(v, 3) if isinstance(v, float) else v)
                                              for k, v in e.items() if k != "sources"} for e in mine],
                                waited_s=round(total, 3)))
    return out
