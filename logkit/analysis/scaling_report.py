"""Scaling section: summaries and comparisons (``scaling``) plus steady-state figures, a bootstrap
confidence interval of the speedup, flags with likely causes, and an Amdahl / Karp-Flatt fit.

Definitions (``SCALING_DEFINITIONS``, added to ``scaling.DEFINITIONS``):

- headline ``speedup`` / ``scaling_efficiency`` / ``step_rate_ratio``: on the steady state when
  both runs have step times (warm-up steps of each run left out; ``steady.py`` says how), else
  over the whole run (the only figures a run's totals give); ``basis`` says which, and the
  whole-run figures are kept beside (``whole_run_speedup``, ...).
- ``speedup_ci``: 95% block-bootstrap interval of ``steady_speedup`` (1000 draws of each run's
  steady throughput, independent seeds; the ratio's 2.5th and 97.5th percentiles).
- Amdahl: speedup(p) = 1 / (s + (1 - s) / p), p = candidate ranks / baseline ranks, fitted by
  least squares on 1/speedup - 1/p = s (1 - 1/p) through every comparison of a group (the
  headline speedups); Karp-Flatt e(p) = (1/speedup - 1/p) / (1 - 1/p), the mean per world size.
  Needs three or more distinct world sizes (the baseline's included). No prediction when a point
  is superlinear (speedup > p: Amdahl's law cannot describe it), when the unclipped serial
  fraction is negative, or when R² < ``MIN_R2``.
"""

from __future__ import annotations

import math

import numpy as np

from logkit.analysis.scaling import DEFINITIONS, compare, comparison_plan, session_summary
from logkit.analysis.steady import bootstrap_throughput, steady_state

__all__ = ["SCALING_DEFINITIONS", "scaling_analysis", "amdahl_fit", "samples_seen", "COMM_BOUND_SHARE", "MIN_R2"]

CI_LEVEL = 0.95
COMM_BOUND_SHARE = 0.30  # gradient sync >= 30% of step time: communication-bound
MIN_R2 = 0.9  # an Amdahl fit below this predicts nothing

SCALING_DEFINITIONS: dict[str, str] = {
    **DEFINITIONS,
    "speedup": "candidate samples/s / baseline samples/s (throughput ratio), on the steady state (warm-up "
               "left out) when both runs logged step times, else over the whole run; 'basis' says which",
    "scaling_efficiency": "speedup / (candidate ranks / baseline ranks), on the same basis as speedup",
    "step_rate_ratio": "candidate steps/s / baseline steps/s, on the same basis as speedup",
    "whole_run_speedup": "candidate samples/s / baseline samples/s over every step (warm-up included), or from "
                         "the runs' totals",
    "warmup_steps": "leading steps before the first window of steps whose median step time is within "
                    "max(5%, 3 robust SD) of the median of the run's second half (at most half the run)",
    "steady_samples_per_second": "samples_per_second over the steps after warm-up",
    "steady_speedup": "candidate steady samples/s / baseline steady samples/s (warm-up excluded)",
    "steady_scaling_efficiency": "steady_speedup / (candidate ranks / baseline ranks)",
    "speedup_ci": "95% block-bootstrap interval of steady_speedup (1000 resamples of up to 200 blocks of "
                  "consecutive steps per run)",
    "samples_seen": "session_end samples_seen, else total_steps x total_batch_size",
    "serial_fraction": "Amdahl fit speedup(p) = 1 / (s + (1 - s) / p), p = ranks / baseline ranks, least "
                       "squares on 1/speedup - 1/p = s (1 - 1/p) over a group's headline speedups",
    "karp_flatt": "experimentally determined serial fraction e = (1/speedup - 1/p) / (1 - 1/p)",
    "predicted": "Amdahl speedup over the baseline at 2x and 4x the largest world size measured; none when a "
                 f"point is superlinear, the serial fraction comes out negative, or R² < {MIN_R2:g}",
    "r2": "coefficient of determination of the Amdahl fit on the speedups (baseline = 1 included)",
    "flags": "slowdown: speedup < 1; superlinear: speedup > rank ratio (headline speedup); only for more ranks "
             "than the baseline (runs with equal rank counts are compared, not judged for scaling)",
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
    """Amdahl fit of ``points`` = [(world_size, rank ratio p, speedup)]; None with < 3 world sizes.

    ``reliable`` is False (and ``predicted`` None, ``note`` saying why) when a point is
    superlinear, the unclipped least-squares serial fraction is negative, or R² < ``MIN_R2``."""
    pts = [(ws, p, s) for ws, p, s in points if s and s > 0 and p > 0]
    if len({base_ws} | {ws for ws, _, _ in pts}) < 3:
        return None
    p = np.array([x[1] for x in pts] + [1.0])
    s = np.array([x[2] for x in pts] + [1.0])
    x, y = 1 - 1 / p, 1 / s - 1 / p
    raw = float((x * y).sum() / (x * x).sum())
    serial = float(np.clip(raw, 0.0, 1.0))
    fitted = 1 / (serial + (1 - serial) / p)
    ss_tot = float(((s - s.mean()) ** 2).sum())
    r2 = 1 - float(((s - fitted) ** 2).sum()) / ss_tot if ss_tot > 0 else None
    kf: dict[int, list[float]] = {}
    for ws, pi, si in pts:
        if pi > 1:
            kf.setdefault(ws, []).append((1 / si - 1 / pi) / (1 - 1 / pi))
    superlinear = sorted({ws for ws, pi, si in pts if si > pi * (1 + 1e-9)})
    notes = []
    if superlinear:
        notes.append(f"superlinear point(s) at {', '.join(map(str, superlinear))} ranks (speedup above the rank "
                     "ratio): Amdahl's law cannot describe them")
    if raw < 0:
        notes.append(f"the least-squares serial fraction is negative ({raw:.3f}, shown clipped to 0)")
    if r2 is None or r2 < MIN_R2:
        notes.append(f"poor fit (R² {'n/a' if r2 is None else f'{r2:.2f}'} < {MIN_R2:g})")
    reliable = not notes
    top = max(ws for ws, _, _ in pts)
    predicted = {m * top: 1 / (serial + (1 - serial) / (m * top / base_ws)) for m in (2, 4)} if reliable else None
    note = ("; ".join(notes) + ": no prediction") if notes else None
    return {"model": "amdahl", "serial_fraction": serial, "serial_fraction_raw": raw, "parallel_fraction": 1 - serial,
            "karp_flatt": {ws: float(np.mean(v)) for ws, v in sorted(kf.items())},
            "predicted": predicted, "r2": r2, "points": len(pts) + 1, "baseline_world_size": base_ws,
            "reliable": reliable, "note": note, "superlinear_world_sizes": superlinear}


def _causes(kind: str, base: dict, cand: dict, ctx: dict, cand_ctx: dict, base_ctx: dict) -> list[str]:
    causes = []
    if ctx["regime"] in ("mixed", "unknown"):
        causes.append(f"batch sizes not comparable ({ctx['regime']} regime: global batch "
                      f"{base['total_batch_size']} vs {cand['total_batch_size']})")
    if ctx.get("basis_mismatch"):
        causes.append(ctx["basis_mismatch"])
    ratio = ctx.get("samples_ratio")
    if not ctx.get("steady") and ratio and abs(ratio - 1) > 0.05:
        # throughput does not depend on run length, except through the warm-up a whole-run figure includes
        causes.append(f"whole-run figures include warm-up and the runs differ in length (the candidate saw "
                      f"{ratio:.2f}x the baseline's samples): warm-up weighs differently in each")
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


def _ratio(a, b):
    a, b = _f(a), _f(b)
    return a / b if a is not None and b else None


def scaling_analysis(sessions: list, context: dict[str, dict] | None = None) -> dict:
    """The scaling section for ``sessions``: {"sessions", "comparisons", "groups", "not_compared",
    "fit", "fits", "definitions", "baseline"}.

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
                     "steady_samples_per_second": state.samples_per_second,
                     "steady_steps_per_second": state.steps_per_second})
    plan = comparison_plan(sessions, summaries)
    first = next((g["baseline"] for g in plan["groups"] if g["baseline"] is not None), None)
    out = {"sessions": rows, "comparisons": [], "groups": plan["groups"], "not_compared": plan["not_compared"],
           "fit": None, "fits": [], "definitions": dict(SCALING_DEFINITIONS), "baseline": first}
    if first is not None:
        out["baseline_index"] = next(i for i, s in enumerate(summaries) if s["session_id"] == first)
    boots: dict[int, np.ndarray | None] = {}
    points: dict[str, list] = {}
    bases: dict[str, int] = {}
    for (b, c, label), comp in zip(plan["pairs"], compare(sessions, summaries), strict=True):
        base, cand, bstate, cstate = summaries[b], summaries[c], states[b], states[c]
        base_ws = base["world_size"] or 1
        ratio = (cand["world_size"] or 1) / base_ws
        steady = bstate.samples_per_second is not None and cstate.samples_per_second is not None
        sp = cstate.samples_per_second / bstate.samples_per_second if steady else None
        ci = None
        if steady:
            if b not in boots:
                boots[b] = bootstrap_throughput(bstate, seed=1000 + b)
            cb = bootstrap_throughput(cstate, seed=1000 + c)
            if boots[b] is not None and cb is not None:
                q = np.quantile(cb / boots[b], [(1 - CI_LEVEL) / 2, (1 + CI_LEVEL) / 2])
                ci = [float(q[0]), float(q[1])]
        seen, base_seen = samples_seen(sessions[c], cand), samples_seen(sessions[b], base)
        mismatch = None
        if not steady and base["basis"] != cand["basis"]:
            mismatch = (f"throughput on different bases: baseline from {base['basis_detail']}, candidate from "
                        f"{cand['basis_detail']}")
        ctx = {"regime": comp["regime"], "steady": steady, "basis_mismatch": mismatch,
               "samples_ratio": seen / base_seen if seen and base_seen else None}
        if steady:
            headline, rate = sp, _ratio(cstate.steps_per_second, bstate.steps_per_second)
            basis = "steady state"
            detail = (f"steady state: warm-up left out ({bstate.warmup_steps} step(s) of the baseline, "
                      f"{cstate.warmup_steps} of the candidate); {bstate.steady_steps} and {cstate.steady_steps} "
                      "steady steps")
            sampled = [f"{who} logs {x['logged_steps']} of {x['total_steps']} steps" for who, x in
                       (("the baseline", base), ("the candidate", cand))
                       if x["total_steps"] and x["logged_steps"] and x["logged_steps"] < x["total_steps"]]
            if sampled:
                detail += " (from sampled step lines: " + ", ".join(sampled) + ")"
        else:
            headline, rate = comp["speedup"], comp["step_rate_ratio"]
            basis = "whole run"
            detail = ("whole run: " + (f"baseline {base['basis_detail']}; candidate {cand['basis_detail']}"
                                       if base["basis"] != "steps" or cand["basis"] != "steps"
                                       else "every logged step, warm-up included"))
        flags = []
        if headline is not None and ratio > 1:  # same rank counts: an A/B comparison, not scaling
            kind = "slowdown" if headline < 1 else "superlinear" if headline > ratio * 1.0 + 1e-9 else None
            if kind:
                cause = _causes(kind, base, cand, ctx, context.get(cand["session_id"], {}),
                                context.get(base["session_id"], {}))
                flags.append({"kind": kind, "cause": "; ".join(cause), "causes": cause,
                              "speedup": headline, "rank_ratio": ratio, "basis": basis,
                              "significant": bool(ci and (ci[1] < 1 if kind == "slowdown" else ci[0] > ratio))})
        out["comparisons"].append({
            "baseline": comp["baseline"], "candidate": comp["candidate"], "speedup": headline,
            "scaling_efficiency": headline / ratio if headline is not None else None, "regime": comp["regime"],
            "step_rate_ratio": rate, "basis": basis, "basis_detail": detail, "group": label,
            "whole_run_speedup": comp["speedup"], "whole_run_scaling_efficiency": comp["scaling_efficiency"],
            "whole_run_step_rate_ratio": comp["step_rate_ratio"],
            "steady_speedup": sp, "steady_scaling_efficiency": sp / ratio if sp is not None else None,
            "speedup_ci": ci, "ci_level": CI_LEVEL, "steady_state": steady, "rank_ratio": ratio,
            "baseline_basis": base["basis_detail"], "candidate_basis": cand["basis_detail"],
            "baseline_samples_seen": base_seen, "candidate_samples_seen": seen,
            "samples_ratio": ctx["samples_ratio"], "note": mismatch, "flags": flags,
        })
        if headline is not None:
            points.setdefault(label, []).append((cand["world_size"] or 1, ratio, headline))
            bases[label] = base_ws
    for label, pts in points.items():
        fit = amdahl_fit(pts, bases[label])
        if fit is not None:
            out["fits"].append({"group": label, **fit})
    out["fit"] = out["fits"][0] if out["fits"] else None
    return out
