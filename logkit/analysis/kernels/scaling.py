"""Scaling: who is compared with whom, speedup and efficiency of each run against its baseline, on
the steady state with a bootstrap interval, flags with their likely causes, and an Amdahl fit.

Definitions (``definitions.SCALING``):

- ``speedup``: candidate samples/s / baseline samples/s (a throughput ratio; never a ratio of
  step rates, which mislead when the global batch grows with ranks); ``scaling_efficiency`` =
  speedup / (candidate world_size / baseline world_size); ``step_rate_ratio`` = candidate
  steps/s / baseline steps/s.
- headline figures: on the steady state when both runs have step times (warm-up steps of each
  run left out; ``throughput.py`` says how), else over the whole run (the only figures a run's
  totals give); ``basis`` says which, and the whole-run figures are kept beside.
- ``speedup_ci``: 95% block-bootstrap interval of the steady speedup (1000 draws of each run's
  steady throughput, seeded 1000 + the run's position among the sessions: independent and
  reproducible; the ratio's 2.5th and 97.5th percentiles).
- ``regime``: "strong" when the global batch is the same, "weak" when the per-rank batch
  (total_batch_size / world_size) is the same, "mixed" otherwise, "unknown" without batch sizes.
- Only runs of one comparison group are compared (``groups``: same model, same sequence length
  and configuration where logged); each group has its own baseline: the fewest ranks, ties
  broken by the earliest start; runs with a throughput first.
- flags: a headline speedup below 1 (slowdown) or above the rank ratio (superlinear), for
  candidates with more ranks than the baseline, with the likely causes the other analyses found.
- ``per_rank_batch``: the baseline's total_batch_size / its world_size (what the weak regime keeps).
- ``averages`` (``group_average``): per comparison group, its baseline and the candidates compared
  with it, split into single-rank and multi-rank runs; of each side the arithmetic mean of the
  runs' steps/s and samples/s (whole-run figures, runs without one left out) and the mean of
  ``avg_util`` over all the GPUs of its runs (``gpus`` table).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pandas as pd

from logkit.analysis.kernels.amdahl import amdahl_fit
from logkit.analysis.kernels.groups import group_sessions
from logkit.analysis.kernels.headline import samples_seen, session_summary
from logkit.analysis.kernels.shares import comm_bound
from logkit.analysis.kernels.throughput import SteadyState, bootstrap_throughput, steady_state
from logkit.analysis.results import (
    Comparison,
    Flag,
    Group,
    GroupAverage,
    NotCompared,
    Ratios,
    Scaling,
    SessionSummary,
)
from logkit.analysis.thresholds import CI_LEVEL, SAMPLES_RATIO_TOLERANCE
from logkit.schema.values import to_float
from logkit.schema.vocab import Basis, ComparisonBasis, FlagKind, Regime, SessionKind

_KIND_REASONS = {SessionKind.GPU_CAPTURE: "a GPU capture (nvidia-smi / gpustat / monitor_gpu), not a training run",
                 SessionKind.NCCL_TESTS: "an nccl-tests benchmark, not a training run"}


def _ratio(num, den) -> float | None:
    num, den = to_float(num, finite=True), to_float(den, finite=True)
    return num / den if num is not None and den else None


def _ranks(summary: SessionSummary) -> int:
    return summary.world_size or 1


def pick_baseline(sessions: list, summaries: list[SessionSummary], members) -> int | None:
    """Index of the baseline among ``members``: fewest ranks (world_size), ties broken by the earliest
    start; sessions with a throughput figure (samples_per_second) first, so a GPU capture or an
    nccl-tests table never becomes the baseline of training runs."""
    members = list(members)
    if not members:
        return None
    return min(members, key=lambda i: (summaries[i].samples_per_second is None, summaries[i].kind != SessionKind.TRAINING,
                                       _ranks(summaries[i]), sessions[i].start_key()))


def _per_rank_batch(summary: SessionSummary) -> float | None:
    return summary.total_batch_size / _ranks(summary) if summary.total_batch_size else None


def _regime(base: SessionSummary, cand: SessionSummary) -> Regime:
    b, c = base.total_batch_size, cand.total_batch_size
    if not b or not c:
        return Regime.UNKNOWN
    if b == c:
        return Regime.STRONG
    if _per_rank_batch(base) == _per_rank_batch(cand):
        return Regime.WEAK
    return Regime.MIXED


def comparison_plan(sessions: list, summaries: list[SessionSummary]):
    """Who is compared with whom: (groups, pairs [(baseline index, candidate index, group label)],
    sessions not compared and why)."""
    groups, pairs, not_compared = [], [], []
    for s in summaries:
        if s.kind in _KIND_REASONS:
            not_compared.append(NotCompared(s.session_id, _KIND_REASONS[s.kind]))
    for g in group_sessions(sessions):
        members = g["members"]
        with_tput = [i for i in members if summaries[i].samples_per_second is not None]
        not_compared += [NotCompared(summaries[i].session_id, "no throughput logged (no step times, no samples/s "
                                                              "in a summary)")
                         for i in members if summaries[i].samples_per_second is None]
        base = pick_baseline(sessions, summaries, with_tput)
        groups.append(Group(g["key"], g["label"], tuple(summaries[i].session_id for i in members),
                            summaries[base].session_id if base is not None else None))
        if len(with_tput) == 1:
            not_compared.append(NotCompared(summaries[base].session_id,
                                            f"no other run of {g['label']} with a throughput to compare with"))
        pairs += [(base, i, g["label"]) for i in with_tput if i != base]
    order = {s.session_id: k for k, s in enumerate(summaries)}
    not_compared.sort(key=lambda r: order.get(r.session_id, 0))
    return tuple(groups), pairs, tuple(not_compared)


def _causes(kind: FlagKind, base: SessionSummary, cand: SessionSummary, ctx: dict, cand_ctx: dict,
            base_ctx: dict) -> list[str]:
    causes = []
    if ctx["regime"] in (Regime.MIXED, Regime.UNKNOWN):
        causes.append(f"batch sizes not comparable ({ctx['regime']} regime: global batch "
                      f"{base.total_batch_size} vs {cand.total_batch_size})")
    if ctx.get("basis_mismatch"):
        causes.append(ctx["basis_mismatch"])
    ratio = ctx.get("samples_ratio")
    if not ctx.get("steady") and ratio and abs(ratio - 1) > SAMPLES_RATIO_TOLERANCE:
        # throughput does not depend on run length, except through the warm-up a whole-run figure includes
        causes.append(f"whole-run figures include warm-up and the runs differ in length (the candidate saw "
                      f"{ratio:.2f}x the baseline's samples): warm-up weighs differently in each")
    if kind == FlagKind.SLOWDOWN:
        if cand_ctx.get("busy_gpu"):
            causes.append("one busy GPU: one device does the work while the others idle "
                          "(device_map=\"auto\" / model parallel rather than data parallel)")
        share = cand_ctx.get("sync_share")
        if share is not None and comm_bound(share):
            causes.append(f"communication-bound: gradient sync takes {share:.0%} of step time")
        if cand_ctx.get("straggler") is not None:
            causes.append(f"straggler: rank {cand_ctx['straggler']} is the slowest")
    else:
        if base_ctx.get("busy_gpu"):
            causes.append("the baseline had one busy GPU and others idle")
        if not ctx.get("steady"):
            causes.append("warm-up not left out: a short baseline is dominated by its first steps")
        if ctx["regime"] == Regime.STRONG:
            causes.append("smaller per-rank batch fits caches / avoids memory pressure the baseline had "
                          "(e.g. offloading or gradient checkpointing in the single run)")
    return causes or ["no cause found in the logs: compare per-rank step times and data loading"]


def _interval(bstate: SteadyState, cstate: SteadyState, b: int, c: int, boots: dict) -> tuple[float, float] | None:
    if b not in boots:
        boots[b] = bootstrap_throughput(bstate, seed=1000 + b)
    cb = bootstrap_throughput(cstate, seed=1000 + c)
    if boots[b] is None or cb is None:
        return None
    q = np.quantile(cb / boots[b], [(1 - CI_LEVEL) / 2, (1 + CI_LEVEL) / 2])
    return float(q[0]), float(q[1])


def _steady_detail(base: SessionSummary, cand: SessionSummary, bstate: SteadyState, cstate: SteadyState) -> str:
    detail = (f"steady state: warm-up left out ({bstate.warmup_steps} step(s) of the baseline, "
              f"{cstate.warmup_steps} of the candidate); {bstate.steady_steps} and {cstate.steady_steps} "
              "steady steps")
    sampled = [f"{who} logs {x.logged_steps} of {x.total_steps} steps" for who, x in
               (("the baseline", base), ("the candidate", cand))
               if x.total_steps and x.logged_steps and x.logged_steps < x.total_steps]
    return detail + (" (from sampled step lines: " + ", ".join(sampled) + ")" if sampled else "")


def _flag(headline: float | None, ratio: float, ci, basis: str, base, cand, ctx: dict, context: dict) -> tuple:
    if headline is None or ratio <= 1:  # same rank counts: an A/B comparison, not scaling
        return ()
    kind = FlagKind.SLOWDOWN if headline < 1 else FlagKind.SUPERLINEAR if headline > ratio + 1e-9 else None
    if kind is None:
        return ()
    causes = _causes(kind, base, cand, ctx, context.get(cand.session_id, {}), context.get(base.session_id, {}))
    significant = bool(ci and (ci[1] < 1 if kind == FlagKind.SLOWDOWN else ci[0] > ratio))
    return (Flag(kind, "; ".join(causes), tuple(causes), headline, ratio, basis, significant),)


def _compare(sessions, summaries, states, b: int, c: int, label: str, boots: dict, context: dict) -> Comparison:
    base, cand, bstate, cstate = summaries[b], summaries[c], states[b], states[c]
    ratio = _ranks(cand) / _ranks(base)
    whole_speedup = _ratio(cand.samples_per_second, base.samples_per_second)
    whole = Ratios(whole_speedup, _ratio(whole_speedup, ratio),
                   _ratio(cand.steps_per_second, base.steps_per_second))
    steady = None
    if bstate.samples_per_second is not None and cstate.samples_per_second is not None:
        sp = cstate.samples_per_second / bstate.samples_per_second
        steady = Ratios(sp, sp / ratio, _ratio(cstate.steps_per_second, bstate.steps_per_second))
    ci = _interval(bstate, cstate, b, c, boots) if steady else None
    seen, base_seen = samples_seen(sessions[c], cand), samples_seen(sessions[b], base)
    mismatch = None
    if steady is None and base.basis != cand.basis:
        mismatch = (f"throughput on different bases: baseline from {base.basis_detail}, candidate from "
                    f"{cand.basis_detail}")
    ctx = {"regime": _regime(base, cand), "steady": steady is not None, "basis_mismatch": mismatch,
           "samples_ratio": seen / base_seen if seen and base_seen else None}
    if steady is not None:
        headline, basis, detail = steady, ComparisonBasis.STEADY_STATE, _steady_detail(base, cand, bstate, cstate)
        tputs = (bstate.samples_per_second, cstate.samples_per_second)
    else:
        headline, basis = whole, ComparisonBasis.WHOLE_RUN
        detail = "whole run: " + (f"baseline {base.basis_detail}; candidate {cand.basis_detail}"
                                  if base.basis != Basis.STEPS or cand.basis != Basis.STEPS
                                  else "every logged step, warm-up included")
        tputs = (base.samples_per_second, cand.samples_per_second)
    return Comparison(
        baseline=base.session_id, candidate=cand.session_id, group=label, regime=ctx["regime"], basis=basis,
        basis_detail=detail, headline=headline, whole_run=whole, steady=steady, speedup_ci=ci, ci_level=CI_LEVEL,
        rank_ratio=ratio, baseline_samples_per_second=tputs[0], candidate_samples_per_second=tputs[1],
        baseline_basis=base.basis_detail, candidate_basis=cand.basis_detail, baseline_samples_seen=base_seen,
        candidate_samples_seen=seen, samples_ratio=ctx["samples_ratio"], note=mismatch,
        flags=_flag(headline.speedup, ratio, ci, basis, base, cand, ctx, context),
        per_rank_batch=_per_rank_batch(base))


def scaling_analysis(sessions: list, context: dict[str, dict] | None = None) -> Scaling:
    """The scaling section for ``sessions`` (in the order given).

    ``context`` (optional) maps session_id to facts other analyses found, used for the causes of
    flags: ``sync_share`` (largest gradient-sync share of step time), ``busy_gpu`` (bool),
    ``straggler`` (rank or None).
    """
    context = context or {}
    headline = [session_summary(s, sessions) for s in sessions]
    states = [steady_state(s, headline[i].total_batch_size) for i, s in enumerate(sessions)]
    summaries = [dataclasses.replace(s, warmup_steps=st.warmup_steps, steady_steps=st.steady_steps,
                                     steady_samples_per_second=st.samples_per_second,
                                     steady_steps_per_second=st.steps_per_second)
                 for s, st in zip(headline, states, strict=True)]
    groups, pairs, not_compared = comparison_plan(sessions, summaries)
    boots: dict = {}
    comparisons = [_compare(sessions, summaries, states, b, c, label, boots, context) for b, c, label in pairs]
    points: dict[str, list] = {}
    bases: dict[str, int] = {}
    for (b, c, label), comp in zip(pairs, comparisons, strict=True):
        if comp.speedup is not None:
            points.setdefault(label, []).append((summaries[c].world_size or 1, comp.rank_ratio, comp.speedup))
            bases[label] = summaries[b].world_size or 1
    fits = tuple(f for label, pts in points.items() if (f := amdahl_fit(pts, bases[label], label)) is not None)
    return Scaling(sessions=tuple(summaries), comparisons=tuple(comparisons), groups=groups,
                   not_compared=not_compared, fits=fits,
                   baseline=next((g.baseline for g in groups if g.baseline is not None), None))


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def with_averages(scaling: Scaling, gpus: pd.DataFrame) -> Scaling:
    """``scaling`` with its ``averages`` (see module doc) over the per-GPU table ``gpus``."""
    util = gpus["avg_util"].astype("float64") if len(gpus) else pd.Series(dtype="float64")
    averages = []
    for label in dict.fromkeys(c.group for c in scaling.comparisons):
        mine = [c for c in scaling.comparisons if c.group == label]
        ids = dict.fromkeys([mine[0].baseline] + [c.candidate for c in mine])
        members = [s for s in map(scaling.session_summary, ids) if s is not None]
        for multi in (False, True):
            side = [s for s in members if s.is_multi == multi]
            if not side:
                continue
            side_ids = [s.session_id for s in side]
            used = util[gpus["session_id"].isin(side_ids)].dropna().tolist() if len(gpus) else []
            averages.append(GroupAverage(label, multi, tuple(side_ids), _mean(s.steps_per_second for s in side),
                                         _mean(s.samples_per_second for s in side), _mean(used)))
    return dataclasses.replace(scaling, averages=tuple(averages))
