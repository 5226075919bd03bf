"""The facade: every analysis of a set of sessions in one ``Analysis`` (pure; no printing, no files).

    >>> import logkit                                     # doctest: +SKIP
    >>> a = logkit.analyze(logkit.load_sessions("logs"))
    >>> a.scaling.comparisons[0].speedup, a.communication.head(), a.findings[:3]
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from logkit.analysis.definitions import DEFINITIONS
from logkit.analysis.findings.diagnose import diagnose
from logkit.analysis.findings.verdict import verdict
from logkit.analysis.kernels.breakdown import (
    BREAKDOWN_COLUMNS,
    arrival_stragglers,
    step_breakdown,
    straggler_calls,
    synced_steps,
    with_arrivals,
)
from logkit.analysis.kernels.comm_reduce import reduce_session
from logkit.analysis.kernels.communication import (
    COMM_COLUMNS,
    SYNC_OPS,
    communication_peaks,
    communication_table,
    run_links,
)
from logkit.analysis.kernels.counterfactual import counterfactual_table, with_counterfactual
from logkit.analysis.kernels.curves import curves
from logkit.analysis.kernels.diagnostics import diagnostics_table
from logkit.analysis.kernels.forecast import forecast_table
from logkit.analysis.kernels.health import loss_parity, session_health
from logkit.analysis.kernels.ledger import ledger
from logkit.analysis.kernels.mfu import mfu
from logkit.analysis.kernels.nccl_sweep import NCCL_TESTS_COLUMNS, nccl_tests_table
from logkit.analysis.kernels.performance import (
    GPU_COLUMNS,
    SAMPLE_COLUMNS,
    STEP_COLUMNS,
    busy_gpu,
    gpu_table,
    slow_step_list,
    step_samples,
    step_stats,
    stragglers,
)
from logkit.analysis.kernels.scaling import scaling_analysis, with_averages
from logkit.analysis.kernels.shares import of_step
from logkit.analysis.results import Analysis, Scaling
from logkit.schema.vocab import Basis


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)


def _context(sessions, gpus, comm, strag, breakdown) -> tuple[dict, dict]:
    """What the scaling flags' causes draw on, per session: one busy GPU, the largest gradient-sync
    share of step time (its exposed part where the phases were timed), the straggler; and the
    busy-GPU facts themselves."""
    busy, context = {}, {}
    for s in sessions:
        sid = s.session_id
        b = busy_gpu(gpus[gpus["session_id"] == sid]) if len(gpus) else None
        if b:
            busy[sid] = b
        sync = comm[(comm["session_id"] == sid) & comm["op"].isin(SYNC_OPS)] if len(comm) else comm
        share = sync["sync_share_of_step_time"].max() if len(sync) else None
        phased = breakdown[breakdown["session_id"] == sid] if len(breakdown) else breakdown
        if len(phased):
            share = np.nanmax(of_step(phased["comm_exposed_s"], phased["step_s"]), initial=np.nan)
        st = strag[(strag["session_id"] == sid) & strag["is_straggler"].astype(bool)] if len(strag) else strag
        context[sid] = {"busy_gpu": bool(b), "sync_share": None if share is None or pd.isna(share) else float(share),
                        "straggler": int(st["rank"].iloc[0]) if len(st) else None}
    return busy, context


def _parity(sessions, scaling: Scaling) -> tuple:
    by_id = {s.session_id: s for s in sessions}
    rows = {r.session_id: r for r in scaling.sessions}

    def final(sid):  # the run's own final loss where its step lines are sampled
        r = rows[sid]
        return r.final_loss if r.basis == Basis.RUN_TOTALS and r.logged_steps else None

    return tuple(loss_parity(by_id[c.baseline], by_id[c.candidate], rows[c.baseline].total_batch_size,
                             rows[c.candidate].total_batch_size, final(c.baseline), final(c.candidate))
                 for c in scaling.comparisons)


@dataclass(frozen=True)
class SessionFigures:
    """The figures of each session on its own, before any comparison between sessions: what ``analyze``
    and the live view's window (``window.analyze_window``) both compute, by the same kernels."""

    performance: pd.DataFrame
    stragglers: pd.DataFrame
    step_breakdown: pd.DataFrame
    gpus: pd.DataFrame
    communication: pd.DataFrame
    busy_gpu: dict
    context: dict
    slow_steps: dict
    synced: dict = field(default_factory=dict)  # each session's synced steps (breakdown.synced_steps), by id

    def parts(self, **more) -> dict:
        """The results ``diagnose`` reads."""
        return {"communication": self.communication, "performance": self.performance, "stragglers": self.stragglers,
                "step_breakdown": self.step_breakdown, "gpus": self.gpus, "busy_gpu": self.busy_gpu,
                "slow_steps": self.slow_steps, **more}


def session_figures(sessions: list, comm_parts: list) -> SessionFigures:
    """Every session's own figures; ``comm_parts`` beside each session: its ranks' ``CommPart``s, or None
    to reduce its comm records here."""
    parts = [reduce_session(s) if p is None else p for s, p in zip(sessions, comm_parts, strict=True)]
    perf = _concat([step_stats(s) for s in sessions], STEP_COLUMNS)
    synced = {s.session_id: synced_steps(s) for s in sessions}
    breakdown = _concat([step_breakdown(s, synced[s.session_id]) for s in sessions], BREAKDOWN_COLUMNS)
    samples = _concat([step_samples(s) for s in sessions], SAMPLE_COLUMNS)
    strag = with_arrivals(stragglers(samples), [arrival_stragglers(s, synced[s.session_id]) for s in sessions])
    gpus = _concat([gpu_table(s) for s in sessions], GPU_COLUMNS)
    comm = _concat([communication_table(s, p) for s, p in zip(sessions, parts, strict=True)], COMM_COLUMNS)
    busy, context = _context(sessions, gpus, comm, strag, breakdown)
    return SessionFigures(perf, strag, breakdown, gpus, comm, busy, context,
                          {s.session_id: slow_step_list(s) for s in sessions}, synced)


def _headline_run(scaling: Scaling) -> str | None:
    """The candidate of the comparison the verdict's pay-off sentence tells (the most ranks)."""
    runs = [c for c in scaling.comparisons if c.is_scaling and c.speedup is not None]
    return max(runs, key=lambda c: c.rank_ratio or 0).candidate if runs else None


def analyze(sessions: list, comm_parts: list | None = None, forecast_sizes: tuple[int, ...] | None = None,
            gpu_hour_price: float | None = None) -> Analysis:
    """Every analysis of ``sessions`` (in the order given; each comparison group's baseline is its
    run with the fewest ranks). ``comm_parts``: beside each session, its ranks' comm reductions (the
    engine's ``CommPart``s, ``run.load.load_for_analysis``), or None where ``session.comm`` holds
    every record (the default for all). ``forecast_sizes``: the world sizes to forecast (default 2x and
    4x the largest measured of each group); ``gpu_hour_price``: the counterfactual in money too."""
    sessions = list(sessions)
    given = list(comm_parts) if comm_parts is not None else [None] * len(sessions)
    if len(given) != len(sessions):
        raise ValueError(f"comm_parts: {len(given)} entries for {len(sessions)} sessions")
    parts = [reduce_session(s) if p is None else p for s, p in zip(sessions, given, strict=True)]
    figs = session_figures(sessions, parts)
    scaling = with_averages(scaling_analysis(sessions, figs.context), figs.gpus)
    summaries = {r.session_id: r for r in scaling.sessions}
    health = {s.session_id: session_health(s, summaries[s.session_id].final_loss,
                                            summaries[s.session_id].final_loss_from) for s in sessions}
    findings = diagnose(sessions, figs.parts(scaling=scaling, health=health))
    perf, strag, breakdown = figs.performance, figs.stragglers, figs.step_breakdown
    nccl = _concat([nccl_tests_table(s, sessions) for s in sessions], NCCL_TESTS_COLUMNS)
    judged = {*figs.communication["session_id"], *nccl["session_id"]}
    forecast = forecast_table(sessions, scaling, breakdown, figs.communication, forecast_sizes)
    counterfactual = counterfactual_table(scaling, forecast, gpu_hour_price)
    told = with_counterfactual(verdict(scaling, breakdown, strag, findings), counterfactual, _headline_run(scaling))
    return Analysis(
        scaling=scaling, communication=figs.communication, nccl_tests=nccl,
        communication_peaks=communication_peaks(), run_links=run_links(sessions, judged), performance=perf, stragglers=strag, step_breakdown=breakdown,
        gpus=figs.gpus,
        mfu={s.session_id: mfu(s) for s in sessions}, health=health, loss_parity=_parity(sessions, scaling),
        findings=findings, definitions=dict(DEFINITIONS), curves=curves(sessions, scaling, parts),
        verdict=told, diagnostics=diagnostics_table(sessions), straggler_calls=straggler_calls(strag),
        ledger=ledger(sessions, figs.synced), forecast=forecast, counterfactual=counterfactual)
