"""The verdict: two or three plain sentences that open every report. Did multi-GPU pay off, where
the time went, what to do. Made from the other analyses' results only (no figure of its own):

1. pay-off: the headline comparison of the largest rank count against its baseline (``paid off``
   at a scaling efficiency of at least ``LOW_EFFICIENCY``, ``partly`` above a speedup of 1, else
   ``did not``);
2. where the time went: the step breakdown of the multi-rank session with timed phases, told
   for the rank that waits most (its median shares of the step);
   The sentence names the run's strategy where the logs give one (``kernels.strategy``: "A step of this
   FSDP2 (fully_shard) run takes ..."), and a sharded run's exposed communication by its collectives;
   without a timed breakdown, a sentence says how the model was spread where a multi-rank session states it;
3. what to do: a hang's culprit, else the straggler's cause and its remedy, else the largest
   phase's remedy (exposed communication, data loading), else the comparison's own causes.
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis.kernels.breakdown import CAUSE_ADVICE, CAUSE_WORDS
from logkit.analysis.kernels.shares import comm_bound, data_heavy, of_step
from logkit.analysis.kernels.strategy import comm_advice, exposed_words, strategy_name
from logkit.analysis.results import Comparison, Finding, Scaling, SessionSummary
from logkit.analysis.thresholds import LOW_EFFICIENCY
from logkit.schema.findings import FindingKind


def _headline(scaling: Scaling) -> Comparison | None:
    scaling_runs = [c for c in scaling.comparisons if c.is_scaling and c.speedup is not None]
    return max(scaling_runs, key=lambda c: c.rank_ratio or 0) if scaling_runs else None


def _payoff(c: Comparison, scaling: Scaling) -> str:
    cand, base = scaling.session_summary(c.candidate), scaling.session_summary(c.baseline)
    n, m = (cand.world_size if cand else None) or "?", (base.world_size if base else None) or "?"
    eff = c.scaling_efficiency
    figures = f"{n} ranks ran {c.speedup:.2f}x the samples/s of {m}" + (
        f" ({eff:.0%} scaling efficiency, {c.basis})" if eff is not None else "")
    if eff is not None and eff >= LOW_EFFICIENCY:
        return f"Multi-GPU paid off: {figures}."
    if c.speedup > 1:
        return f"Multi-GPU paid off only in part: {figures}."
    return f"Multi-GPU did not pay off: {figures}."


def _time_sentence(rows: pd.DataFrame, s: SessionSummary | None) -> tuple[str, pd.Series] | None:
    """Where a step's time goes, for the rank that waits most (in a run of ``s``'s strategy)."""
    if rows.empty:
        return None
    row = rows.loc[rows["wait_s"].idxmax()] if rows["wait_s"].notna().any() else rows.iloc[0]
    step = row["step_s"]
    if not step or pd.isna(step):
        return None
    parts = [(row["data_s"], "loading data"), (row["compute_s"], "in forward and backward"),
             (row["comm_exposed_s"], exposed_words(*_strategy(s))),
             (row["wait_s"], "waiting for the last rank"), (row["other_s"], "in the optimizer and host work")]
    said = ", ".join(f"{v / step:.0%} {words}" for v, words in parts if pd.notna(v))
    name = strategy_name(*_strategy(s))
    run = f"A step of this {name} run takes" if name else "A step takes"
    return f"{run} {step * 1e3:.3g} ms (median); rank {int(row['rank'])} spends {said}.", row


def _strategy(s: SessionSummary | None) -> tuple:
    return (s.strategy, s.zero_stage) if s is not None else (None, None)


def _strategy_sentence(scaling: Scaling, sid) -> str | None:
    """How the model was spread over the ranks, and who said so, for the session ``sid`` or else the one
    multi-rank session that states a strategy."""
    s = scaling.session_summary(sid) if sid is not None else None
    if s is None or strategy_name(s.strategy, s.zero_stage) is None:
        stated = [x for x in scaling.sessions if x.is_multi and strategy_name(x.strategy, x.zero_stage)]
        s = stated[0] if len(stated) == 1 else None
    if s is None:
        return None
    said = f" ({s.strategy_from})" if s.strategy_from else ""
    return f"The model was spread over the ranks with {s.strategy_words or strategy_name(s.strategy, s.zero_stage)}{said}."


def _advice(findings: tuple[Finding, ...], strag: pd.DataFrame, row: pd.Series | None,
            c: Comparison | None, s: SessionSummary | None = None) -> str | None:
    hang = next((f for f in findings if f.kind == FindingKind.HANG), None)
    if hang is not None:
        return f"{hang.title}: see where it was in --diagnose ({hang.evidence[0]})." if hang.evidence \
            else f"{hang.title}."
    flagged = strag[strag["is_straggler"].astype(bool)] if len(strag) else strag
    if len(flagged):
        s = flagged.iloc[0]
        rank, cause = int(s["rank"]), s.get("cause")
        if cause in CAUSE_ADVICE:
            return f"Rank {rank} holds the others back ({CAUSE_WORDS[cause]}): {CAUSE_ADVICE[cause].format(rank=rank)}."
        return f"Rank {rank} holds the others back; its data, compute and host times do not say why."
    if row is not None and row["step_s"]:
        if comm_bound(of_step(row["comm_exposed_s"], row["step_s"])):
            return comm_advice(*_strategy(s))
        if data_heavy(of_step(row["data_s"], row["step_s"])):
            gathered = next((f for f in findings if f.kind == FindingKind.DATA_WAIT_IN_TOKEN_GATHER), None)
            if gathered is not None:
                return f"{gathered.title}: {gathered.detail}"
            return "Data loading is a large share of every step: more DataLoader workers, pin_memory, prefetching."
    if c is not None and c.flags:
        return f"The {c.flags[0].kind}: {c.flags[0].cause}."
    return None


def verdict(scaling: Scaling, breakdown: pd.DataFrame, strag: pd.DataFrame,
            findings: tuple[Finding, ...]) -> tuple[str, ...]:
    """Two or three sentences (see module doc); empty when there is nothing to say."""
    c = _headline(scaling)
    out = [_payoff(c, scaling)] if c is not None else []
    sid = c.candidate if c is not None and len(breakdown) and (breakdown["session_id"] == c.candidate).any() else (
        breakdown["session_id"].iloc[-1] if len(breakdown) else None)
    rows = breakdown[breakdown["session_id"] == sid] if sid is not None else breakdown
    summary = scaling.session_summary(sid) if sid is not None else None
    timed = _time_sentence(rows, summary)
    if timed is not None:
        out.append(timed[0])
    else:
        told = _strategy_sentence(scaling, c.candidate if c is not None else None)
        out += [told] if told else []
    st = strag[strag["session_id"] == sid] if sid is not None and len(strag) else strag
    advice = _advice(findings, st, timed[1] if timed else None, c, summary)
    if advice:
        out.append(advice)
    # the network between nodes, in plain words, where the collectives cross hosts (issue 26)
    out += [f.detail for f in findings if f.kind == FindingKind.FABRIC and (sid is None or f.session_id == sid)][:1]
    return tuple(out)
