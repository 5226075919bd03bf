"""``--compare``: sessions, single and multi, and each comparison within its group, with the steady
state, the bootstrap interval, the flags, the Amdahl fit, loss parity and health."""

from __future__ import annotations

from logkit.analysis.results import Analysis, Comparison, Fit, GroupAverage, SessionSummary
from logkit.report.console.common import (
    KIND_WORDS,
    RULE,
    definitions_footer,
    gpu_count_text,
    gpu_lines,
    strategy_lines,
)
from logkit.report.format import fmt, pct
from logkit.schema.vocab import Regime, Status

_GPU_WORDS = {"title": "SINGLE GPU vs MULTI-GPU COMPARISON", "single": "SINGLE GPU", "multi": "MULTI-GPU",
              "single_avg": "Single GPU Average", "multi_avg": "Multi-GPU Average",
              "speedup": "Multi-GPU Speedup", "efficiency": "GPU Efficiency"}
_PROCESS_WORDS = {"title": "SINGLE-PROCESS vs MULTI-PROCESS COMPARISON", "single": "SINGLE-PROCESS",
                  "multi": "MULTI-PROCESS", "single_avg": "Single-process Average",
                  "multi_avg": "Multi-process Average", "speedup": "Multi-process Speedup",
                  "efficiency": "Scaling Efficiency"}


def _words(summaries: list[SessionSummary]) -> dict[str, str]:
    """GPU words when a run had GPUs; CPU words when every run says it had none; neutral words
    ("process") when the logs do not say."""
    if any(s.on_cpu is False for s in summaries):
        return _GPU_WORDS
    if summaries and all(s.on_cpu for s in summaries):
        return {**_PROCESS_WORDS, "title": _PROCESS_WORDS["title"] + " (CPU)"}
    return _PROCESS_WORDS


def _nan_point(p) -> str:
    text = f"step {fmt(p.step, 'd')}"
    if p.rank is not None:
        text += f" rank {p.rank}"
    return text + (f" at {p.source}" if p.source else "")


def _health_line(analysis: Analysis, sid) -> list[str]:
    h = analysis.health.get(sid)
    if h is None:
        return []
    d = h.divergence
    if d is not None:
        div_text = (f"diverging ({d.kind}: smoothed loss {fmt(d.final_loss_smoothed, '.4f')} against a minimum of "
                    f"{fmt(d.min_loss, '.4f')} at {fmt(d.min_at, 'g')})")
    else:
        div_text = "no divergence"
    nan = h.nan_steps
    nan_text = "no NaN/Inf loss" if not nan else f"NaN/Inf loss at {len(nan)} step(s)"
    if nan:
        nan_text += " (" + ", ".join(_nan_point(x) for x in nan[:5]) + (", ..." if len(nan) > 5 else "") + ")"
    return [f"  Health: {nan_text}, {div_text}"]


def _session_block(s: SessionSummary, analysis: Analysis, gpu: bool) -> list[str]:
    d = s.duration_s
    duration = f"{fmt(d, '.1f', 's')} ({fmt(d / 60 if d is not None else None, '.1f', 'min')})"
    if s.duration_from == "last record":
        duration += " (to the last record: no session_end)"
    batch = f"global batch {fmt(s.total_batch_size, 'd')}"
    if s.total_batch_size_from not in (None, "logged"):
        batch += f", {s.total_batch_size_from}"
    devices = f"  Ranks: {fmt(s.world_size, 'd')}" if gpu is False else f"  GPUs: {gpu_count_text(s)}"
    lines = [f"  Session: {s.session_id}", f"  Duration: {duration}", devices, *strategy_lines(s),
             f"  Steps: {fmt(s.total_steps, 'd')}",
             f"  Final Loss: {fmt(s.final_loss, '.4f')}"
             + (f" (from {s.final_loss_from})" if s.final_loss_from and s.final_loss is not None else ""),
             f"  Steps/sec: {fmt(s.steps_per_second)}", f"  Samples/sec: {fmt(s.samples_per_second)} ({batch})"]
    if s.basis_detail:
        lines.append(f"  Figures from: {s.basis_detail}")
    if s.steady_samples_per_second is not None:
        lines.append(f"  Steady samples/sec: {fmt(s.steady_samples_per_second)} (after {fmt(s.warmup_steps, 'd')} "
                     f"warm-up steps, {fmt(s.steady_steps, 'd')} steady steps)")
    if s.status not in (None, Status.COMPLETED):
        lines.append(f"  Status: {s.status}" + (f": {s.status_detail}" if s.status_detail else ""))
    return lines + run_fact_lines(s) + gpu_lines(analysis, s.session_id) + _health_line(analysis, s.session_id)


def fact_text(value) -> str:
    """A run fact's value as a line shows it: lists joined, a count per name as "name n"."""
    if isinstance(value, dict):
        return ", ".join(f"{k} {v}" for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ", ".join(map(str, value))
    return str(value)


def run_fact_lines(s: SessionSummary) -> list[str]:
    """The "Run facts" block: each fact the logs give, its value and where it came from."""
    facts = s.run_facts
    if not facts:
        return []
    lines = ["  Run facts:"]
    for f in facts:
        said = f.said or (f"read at {f.source}" if f.source else "")
        lines.append(f"    {f.name}: {fact_text(f.value)}" + (f"  [{said}]" if said else ""))
    return lines


def _average_block(title: str, avg: GroupAverage, gpu: bool) -> list[str]:
    lines = [f"{title}:", f"  Steps/sec: {fmt(avg.steps_per_second)}", f"  Samples/sec: {fmt(avg.samples_per_second)}"]
    if gpu and avg.gpu_utilization_pct is not None:
        lines.append(f"  GPU utilization: {avg.gpu_utilization_pct:.1f}%")
    return lines


def _regime_text(c: Comparison, base: SessionSummary, cand: SessionSummary) -> str:
    regime = c.regime
    if regime == Regime.STRONG:
        return f"strong scaling (same global batch: {base.total_batch_size})"
    if regime == Regime.WEAK:
        return f"weak scaling (same per-rank batch: {fmt(c.per_rank_batch, 'g')})"
    if regime == Regime.MIXED:
        return (f"mixed (global batch {base.total_batch_size} -> {cand.total_batch_size}, "
                "per-rank batch differs too)")
    return f"{regime or 'unknown'} (batch sizes not logged)"


def _headline_lines(c: Comparison, w: dict) -> list[str]:
    basis, whole = c.basis, c.whole_run
    if c.is_scaling:
        lines = [f"🚀 {w['speedup']}: {fmt(c.speedup, '.2f', 'x')} ({basis})",
                 f"📊 {w['efficiency']}: {pct(c.scaling_efficiency)} ({basis})"]
        if c.steady is not None and whole.speedup is not None:
            lines.append(f"  Whole run (warm-up included): speedup {fmt(whole.speedup, '.2f', 'x')}, "
                         f"efficiency {pct(whole.scaling_efficiency)}")
        return lines
    lines = [f"⚖ Relative throughput: {fmt(c.speedup, '.2f', 'x')} ({basis}; the same number of ranks: a "
             "comparison of runs, not a scaling measurement)"]
    if c.steady is not None and whole.speedup is not None:
        lines.append(f"  Whole run (warm-up included): {fmt(whole.speedup, '.2f', 'x')}")
    return lines


def _comparison_lines(c: Comparison, base: SessionSummary, cand: SessionSummary, w: dict) -> list[str]:
    lines = ["", f"vs {c.candidate} ({fmt(cand.world_size, 'd')} rank(s)):",
             f"  Samples/sec ({c.basis}): {fmt(c.baseline_samples_per_second)} -> "
             f"{fmt(c.candidate_samples_per_second)}"]
    lines += _headline_lines(c, w)
    if c.speedup_ci is not None:
        lines.append(f"  {pct(c.ci_level, '.0f')} CI of the steady-state speedup: "
                     f"[{fmt(c.speedup_ci[0], '.2f', 'x')}, {fmt(c.speedup_ci[1], '.2f', 'x')}]")
    lines += [f"  Regime: {_regime_text(c, base, cand)}",
              f"  Step-rate ratio: {fmt(c.headline.step_rate_ratio, '.2f', 'x')} ({c.basis})"]
    if c.basis_detail:
        lines.append(f"  Basis: {c.basis_detail}")
    if c.note:
        lines.append(f"  Note: {c.note}")
    return lines + [f"  ⚠ {f.kind}: {f.cause}" for f in c.flags]


def _fit_lines(fit: Fit) -> list[str]:
    group = f" of {fit.group}" if fit.group else ""
    lines = ["", f"📈 Scaling fit{group} ({fit.model}): serial fraction {fmt(fit.serial_fraction, '.3f')}, "
                 f"parallel fraction {fmt(fit.parallel_fraction, '.3f')}, R² {fmt(fit.r2, '.3f')}"]
    if fit.karp_flatt:
        lines.append("  Karp-Flatt serial fraction: " + ", ".join(
            f"{ws} ranks {fmt(e, '.3f')}" for ws, e in sorted(fit.karp_flatt.items(), key=lambda kv: float(kv[0]))))
    if fit.predicted:
        lines.append("  Predicted speedup: " + ", ".join(
            f"{ws} ranks {fmt(v, '.2f', 'x')}" for ws, v in sorted(fit.predicted.items(), key=lambda kv: float(kv[0]))))
    if fit.note:
        lines.append(f"  ⚠ {fit.note}")
    return lines


def _parity_lines(analysis: Analysis) -> list[str]:
    if not analysis.loss_parity:
        return []
    lines = ["", "🎯 LOSS PARITY:"]
    for p in analysis.loss_parity:
        if not p.points and p.final_loss_diff is None:
            lines.append(f"  {p.candidate} vs {p.baseline}: no loss values to compare")
            continue
        lines.append(f"  {p.candidate} vs {p.baseline}: final loss diff {fmt(p.final_loss_diff, '+.4f')} "
                     f"({pct(p.final_loss_rel_diff, '+.2f')}), max |diff| {fmt(p.max_abs_diff_aligned, '.4f')} "
                     f"aligned by {p.aligned_by} over {fmt(p.points, 'd')} point(s)")
    return lines


def _group_lines(analysis: Analysis, mine: list[Comparison], label, several: bool, w: dict, gpu) -> list[str]:
    scaling = analysis.scaling
    lines = [f"── Group: {label} ──"] if several and label else []
    for title, multi in ((w["single_avg"], False), (w["multi_avg"], True)):
        avg = scaling.average(label, multi)
        if avg is not None:
            lines += _average_block(title, avg, gpu) + [""]
    base = scaling.session_summary(mine[0].baseline) or _unknown(mine[0].baseline)
    lines.append(f"Baseline: {mine[0].baseline} ({fmt(base.world_size, 'd')} rank(s), "
                 f"{fmt(base.samples_per_second)} samples/s)")
    shown = _that_matter(mine)
    for c in shown:
        lines += _comparison_lines(c, scaling.session_summary(c.baseline) or base,
                                   scaling.session_summary(c.candidate) or _unknown(c.candidate), w)
    if len(shown) < len(mine):
        lines += ["", f"... and {len(mine) - len(shown)} more comparisons not listed (--json lists every one)"]
    return lines + [""]


def _that_matter(comparisons: list[Comparison]) -> list[Comparison]:
    """All of them up to ``LISTED``; past it, in their order, those flagged and those of the lowest and the
    highest speedups (``_EACH_END`` each), ``LISTED`` at most."""
    if len(comparisons) <= LISTED:
        return comparisons
    rated = sorted((c for c in comparisons if c.speedup is not None), key=lambda c: c.speedup)
    keep = {id(c) for c in comparisons if c.flags} | {id(c) for c in rated[:_EACH_END] + rated[-_EACH_END:]}
    return [c for c in comparisons if id(c) in keep][:LISTED]


# Sessions listed one by one in a group up to this many; past it the group is summarised (``_overview``):
# its counts by status and world size, the sessions that matter listed, the rest counted (--json keeps all).
LISTED = 20
_EACH_END = 3  # the slowest and the fastest listed


def _stragglers(analysis: Analysis) -> set:
    return {r.session_id for r in analysis.rows("stragglers") if r.is_straggler}


def _counts(values) -> list[tuple]:
    """(value, how many) of ``values``, most first (ties in order of first appearance)."""
    counts: dict = {}
    for v in values:
        counts[v] = counts.get(v, 0) + 1
    return sorted(counts.items(), key=lambda x: -x[1])


def _overview(group: list[SessionSummary], analysis: Analysis, gpu: bool) -> list[str]:
    """A group of more sessions than ``LISTED``: how many of each status and world size, then the
    sessions that matter in full (those that did not complete, those with a straggler, the slowest and
    the fastest by samples/s, up to ``LISTED``), the rest counted."""
    stragglers = _stragglers(analysis)
    rated = sorted((s for s in group if s.samples_per_second is not None), key=lambda s: s.samples_per_second)
    why: dict = {}
    for s in group:
        if s.status not in (None, Status.COMPLETED):
            why.setdefault(s.session_id, []).append(str(s.status))
        if s.session_id in stragglers:
            why.setdefault(s.session_id, []).append("a straggler")
    for s in rated[:_EACH_END]:
        why.setdefault(s.session_id, []).append("among the slowest")
    for s in rated[::-1][:_EACH_END]:
        why.setdefault(s.session_id, []).append("among the fastest")
    shown = [s for s in group if s.session_id in why][:LISTED]
    statuses = ", ".join(f"{n} {v or 'status unknown'}" for v, n in _counts(s.status for s in group))
    sizes = ", ".join(f"{fmt(v, 'd')} ranks ({n} sessions)" for v, n in _counts(s.world_size for s in group))
    lines = [f"  {len(group)} sessions: {statuses}", f"  World sizes: {sizes}"]
    if rated:
        lines.append(f"  Samples/sec: {fmt(rated[0].samples_per_second)} (slowest) to "
                     f"{fmt(rated[-1].samples_per_second)} (fastest)")
    for s in shown:
        lines += ["", f"  [{', '.join(why[s.session_id])}]"] + _session_block(s, analysis, gpu)
    lines += ["", f"  ... and {len(group) - len(shown)} more sessions not listed (--json lists every one)"]
    return lines


def _not_compared(rows: list) -> list[str]:
    """The sessions not compared and why: each, or past ``LISTED`` the first few and the rest counted."""
    lines = [f"Not compared ({len(rows)}):"] + [f"  {r.session_id}: {r.reason}" for r in rows[:LISTED]]
    if len(rows) > LISTED:
        lines.append(f"  ... and {len(rows) - LISTED} more (--json lists every one)")
    return lines


def _unknown(sid) -> SessionSummary:
    return SessionSummary(session_id=sid)


def _comparisons(analysis: Analysis, training: list[SessionSummary], w: dict, gpu) -> tuple[list[str], list[str]]:
    """The comparison block, and the definitions it needs."""
    comparisons = analysis.scaling.comparisons
    if not comparisons:
        return (["Only one session: nothing to compare." if len(training) < 2
                 else "No comparison could be made (see the sessions not compared below)."], [])
    labels = list(dict.fromkeys(c.group for c in comparisons))
    several = len(labels) > 1 or len(analysis.scaling.groups) > 1
    lines = []
    for label in labels:
        lines += _group_lines(analysis, [c for c in comparisons if c.group == label], label, several, w, gpu)
    keys = ["speedup_ci"] if any(c.speedup_ci for c in comparisons) else []
    if any(c.steady is not None for c in comparisons):
        keys += ["whole_run_speedup", "steady_speedup", "steady_scaling_efficiency", "warmup_steps"]
    return lines, keys + ["group"]


def render_compare(analysis: Analysis) -> str:
    """The comparison as text (no trailing newline). Only training runs are listed as single / multi
    sessions; captures (nvidia-smi, nccl-tests) are named apart and never compared; runs are
    compared within their group only."""
    scaling = analysis.scaling
    training = list(scaling.training)
    captures = [s for s in scaling.sessions if not s.is_training]
    w = _words(training)
    gpu = True if w is _GPU_WORDS else (False if training and all(s.on_cpu for s in training) else None)
    lines = [w["title"], RULE]
    for icon, label, group in (("📱", w["single"], [s for s in training if not s.is_multi]),
                               ("🔗", w["multi"], [s for s in training if s.is_multi])):
        lines += ["", f"{icon} {label} SESSIONS ({len(group)}):"]
        if len(group) > LISTED:
            lines += _overview(group, analysis, gpu)
            continue
        for i, s in enumerate(group):
            lines += ([""] if i else []) + _session_block(s, analysis, gpu)
    if captures:
        lines += ["", f"🧾 OTHER CAPTURES, NOT TRAINING RUNS ({len(captures)}; never compared):"]
        lines += [f"  {s.session_id}: {KIND_WORDS.get(s.kind, s.kind)} (see --communication / --performance)"
                  for s in captures[:LISTED]]
        lines += [f"  ... and {len(captures) - LISTED} more (--json lists every one)"] if len(captures) > LISTED else []
    lines += ["", "⚡ PERFORMANCE COMPARISON:"]
    block, extra = _comparisons(analysis, training, w, gpu)
    lines += block
    keys = ["speedup", "scaling_efficiency", "regime", "step_rate_ratio", "samples_per_second", "final_loss", *extra]
    not_compared = [r for r in scaling.not_compared if (scaling.session_summary(r.session_id) or _unknown(None)).is_training]
    if not_compared:
        lines += [""] + _not_compared(not_compared)
    for fit in scaling.fits:
        lines += _fit_lines(fit)
    if scaling.fits:
        keys += ["serial_fraction", "karp_flatt", "predicted", "r2"]
    lines += _parity_lines(analysis)
    keys += (["loss_parity"] if analysis.loss_parity else []) + (["nan_steps", "divergence"] if analysis.health else [])
    return "\n".join(lines + definitions_footer(analysis, keys))
