"""Scaling section: summaries and comparisons (``scaling``) plus steady-state figures, a bootstrap
confidence interval of the speedup, flags with likely causes, and an Amdahl / Karp-Flatt fit.

Definitions (``SCALING_DEFINITIONS``, added to ``scaling.DEFINITIONS``):

- ``steady_speedup`` / ``steady_scaling_efficiency``: as speedup / scaling_efficiency, over the
  steady-state steps only (warm-up steps of each run left out; ``steady.py`` says how).
- ``speedup_ci``: 95% block-bootstrap interval of ``steady_speedup`` (1000 draws of each run's
  steady throughput, independent seeds; the ratio's 2.5th and 97.5th percentiles).
- Amdahl: speedup(p) = 1 / (s + (1 - s) / p), p = candidate ranks / baseline ranks, fitted by
  least squares on 1/speedup - 1/p = s (1 - 1/p) through every comparison (steady speedups
  where known); Karp-Flatt e(p) = (1/speedup - 1/p) / (1 - 1/p), the mean per world size.
  Needs three or more distinct world sizes (the baseline's included).
"""

from __future__ import annotations

import math

import numpy as np

from logkit.analysis.scaling import DEFINITIONS, compare, pick_baseline, session_summary
from logkit.analysis.steady import bootstrap_throughput, steady_state

__all__ = ["SCALING_DEFINITIONS", "scaling_analysis", "amdahl_fit", "samples_seen",
           "COMM_BOUND_SHARE"]

CI_LEVEL = 0.95
COMM_BOUND_SHARE = 0.30  # gradient sync >= 30% of step time: communication-bound

SCALING_DEFINITIONS: dict[str, str] = {
    **DEFINITIONS,
    "warmup_steps": "leading steps before the first window of steps whose median step time is within "
                    "max(5%, 3 robust SD) of the median of the run's second half (at most half the run)",
    "steady_samples_per_second": "samples_per_second over the steps after warm-up",
    "steady_speedup": "candidate steady samples/s / baseline steady samples/s (warm-up excluded)",
    "steady_scaling_efficiency": "steady_speedup / (candidate ranks / baseline ranks)",
    "speedup_ci": "95% block-bootstrap interval of steady_speedup (1000 resamples of up to 200 blocks of "
                  "consecutive steps per run)",
    "samples_seen": "session_end samples_seen, else total_steps x total_batch_size",
    "serial_fraction": "Amdahl fit speedup(p) = 1 / (s + (1 - s) / p), p = ranks / baseline ranks, least "
                       "squares on 1/speedup - 1/p = s (1 - 1/p); steady speedups where known",
    "karp_flatt": "experimentally determined serial fraction e = (1/speedup - 1/p) / (1 - 1/p)",
    "predicted": "Amdahl speedup over the baseline at 2x and 4x the largest world size measured",
    "r2": "coefficient of determination of the Amdahl fit on the speedups (baseline = 1 included)",
    "flags": "slowdown: speedup < 1; superlinear: speedup > rank ratio (steady speedup where known)",
}


def _f(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def samples_seen(session, summary: dict) -> float | None:
    """Samples the run processed: session_end's samples_seen, else total_steps x total_batch_size."""
    seen = _f(session.meta.get("samples_seen"))
    if seen:
        return seen
    if summary.get("total_steps") and summary.get("total_batch_size"):
        return float(summary["total_steps"] * summary["total_batch_size"])
    return None


def amdahl_fit(points: list[tuple[int, float, float]], base_ws: int) -> dict | None:
    """Amdahl fit of ``points`` = [(world_size, rank ratio p, speedup)]; None with < 3 world sizes."""
    pts = [(ws, p, s) for ws, p, s in points if s and s > 0 and p > 0]
    if len({base_ws} | {ws for ws, _, _ in pts}) < 3:
        return None
    p = np.array([x[1] for x in pts] + [1.0])
    s = np.array([x[2] for x in pts] + [1.0])
    x, y = 1 - 1 / p, 1 / s - 1 / p
    serial = float(np.clip((x * y).sum() / (x * x).sum(), 0.0, 1.0))
    fitted = 1 / (serial + (1 - serial) / p)
    ss_tot = float(((s - s.mean()) ** 2).sum())
    r2 = 1 - float(((s - fitted) ** 2).sum()) / ss_tot if ss_tot > 0 else None
    kf: dict[int, list[float]] = {}
    for ws, pi, si in pts:
        if pi > 1:
            kf.setdefault(ws, []).append((1 / si - 1 / pi) / (1 - 1 / pi))
    top = max(ws for ws, _, _ in pts)
    predicted = {m * top: 1 / (serial + (1 - serial) / (m * top / base_ws)) for m in (2, 4)}
    return {"model": "amdahl", "serial_fraction": serial, "parallel_fraction": 1 - serial,
            "karp_flatt": {ws: float(np.mean(v)) for ws, v in sorted(kf.items())},
            "predicted": predicted, "r2": r2, "points": len(pts) + 1, "baseline_world_size": base_ws}


def _causes(kind: str, base: dict, cand: dict, ctx: dict, cand_ctx: dict, base_ctx: dict) -> list[str]:
    causes = []
    if ctx["regime"] in ("mixed", "unknown"):
        causes.append(f"batch sizes not comparable ({ctx['regime']} regime: global batch "
                      f"{base['total_batch_size']} vs {cand['total_batch_size']})")
    if ctx.get("samples_ratio") and abs(ctx["samples_ratio"] - 1) > 0.05:
        causes.append(f"step counts not comparable: the candidate saw {ctx['samples_ratio']:.2f}x the "
                      "baseline's samples")
    if kind == "slowdown":
        if cand_ctx.get("busy_gpu"):
            causes.append("one busy GPU: one device does the work while the others idle "
                          "(device_map=\"auto\" / model parallel rather than data parallel)")
        share = cand_ctx.get("sync_share")
        if share is not None and share >= COMM_BOUND_SHARE:
            causes.append(f"communication-bound: gradient sync takes {share:.0%} of step time")
        if cand_ctx.get("straggler") is not None:
            causes.append(f"straggler: rank {cand_ctx['straggler']} is the slowest")
    else:
        if base_ctx.get("busy_gpu"):
            causes.append("the baseline had one busy GPU and others idle")
        if not ctx.get("steady"):
            causes.append("warm-up not left out: a short baseline is dominated by its first steps")
        if ctx["regime"] == "strong":
            causes.append("smaller per-rank batch fits caches / avoids memory pressure the baseline had "
                          "(e.g. offloading or gradient checkpointing in the single run)")
    if not causes:
        causes.append("no cause found in the logs: compare per-rank step times and data loading")
    return causes


def scaling_analysis(sessions: list, context: dict[str, dict] | None = None) -> dict:
    """The scaling section for ``sessions``: {"sessions", "comparisons", "fit", "definitions", "baseline"}.

    ``context`` (optional) maps session_id to facts other analyses found, used for the causes of
    flags: ``sync_share`` (largest gradient-sync share of step time), ``busy_gpu`` (bool),
    ``straggler`` (rank or None).
    """
    context = context or {}
    summaries = [session_summary(s) for s in sessions]
    states = [steady_state(s, summaries[i]["total_batch_size"]) for i, s in enumerate(sessions)]
    rows = []
    for summary, state in zip(summaries, states, strict=True):
        rows.append({**summary, "warmup_steps": state.warmup_steps, "steady_steps": state.steady_steps,
                     "steady_samples_per_second": state.samples_per_second})
    out = {"sessions": rows, "comparisons": [], "fit": None, "definitions": dict(SCALING_DEFINITIONS),
           "baseline": None}
    index = pick_baseline(sessions, summaries)
    if index is None:
        return out
    base, bstate = summaries[index], states[index]
    out["baseline"], out["baseline_index"] = base["session_id"], index
    base_seen = samples_seen(sessions[index], base)
    boots = {}
    others = [i for i in range(len(sessions)) if i != index]  # compare() keeps the sessions' order
    points = []
    base_ws = base["world_size"] or 1
    for i, comp in zip(others, compare(sessions, summaries), strict=True):
        cand, cstate = summaries[i], states[i]
        ratio = (cand["world_size"] or 1) / base_ws
        steady = bstate.samples_per_second is not None and cstate.samples_per_second is not None
        sp = cstate.samples_per_second / bstate.samples_per_second if steady else None
        ci = None
        if steady:
            if index not in boots:
                boots[index] = bootstrap_throughput(bstate, seed=1000 + index)
            cb = bootstrap_throughput(cstate, seed=1000 + i)
            if boots[index] is not None and cb is not None:
                q = np.quantile(cb / boots[index], [(1 - CI_LEVEL) / 2, (1 + CI_LEVEL) / 2])
                ci = [float(q[0]), float(q[1])]
        seen = samples_seen(sessions[i], cand)
        ctx = {"regime": comp["regime"], "steady": steady,
               "samples_ratio": seen / base_seen if seen and base_seen else None}
        headline = sp if sp is not None else comp["speedup"]
        flags = []
        if headline is not None:
            kind = "slowdown" if headline < 1 else "superlinear" if headline > ratio * 1.0 + 1e-9 else None
            if kind:
                cause = _causes(kind, base, cand, ctx, context.get(cand["session_id"], {}),
                                context.get(base["session_id"], {}))
                flags.append({"kind": kind, "cause": "; ".join(cause), "causes": cause,
                              "speedup": headline, "rank_ratio": ratio,
                              "significant": bool(ci and (ci[1] < 1 if kind == "slowdown" else ci[0] > ratio))})
        out["comparisons"].append({
            **comp, "steady_speedup": sp, "steady_scaling_efficiency": sp / ratio if sp is not None else None,
            "speedup_ci": ci, "ci_level": CI_LEVEL, "steady_state": steady, "rank_ratio": ratio,
            "baseline_samples_seen": base_seen, "candidate_samples_seen": seen,
            "samples_ratio": ctx["samples_ratio"], "flags": flags,
        })
        if headline is not None:
            points.append((cand["world_size"] or 1, ratio, headline))
    out["fit"] = amdahl_fit(points, base_ws)
    return out
