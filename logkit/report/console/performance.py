"""``--performance``: step-time spread per rank, stragglers, per-GPU utilization and memory, MFU."""

from __future__ import annotations

from logkit.analysis.results import Analysis, Mfu
from logkit.report.console.common import KIND_WORDS, RULE, definitions_footer, gpu_lines, rows, session_order
from logkit.report.format import fmt, pct

_KEYS = ["step_p50_s / p95 / max", "slow_steps", "data_share", "vs_fastest", "score", "avg_util / peak_util",
         "avg_memory_pct", "mfu"]


def _rank_lines(perf: list[dict]) -> list[str]:
    return [f"  Rank {fmt(r.get('rank'), 'd')}: {fmt(r.get('steps'), 'd')} steps, step time "
            f"p50 {fmt(r.get('step_p50_s'), '.3f', 's')}, p95 {fmt(r.get('step_p95_s'), '.3f', 's')}, "
            f"max {fmt(r.get('step_max_s'), '.3f', 's')}, mean {fmt(r.get('step_mean_s'), '.3f', 's')}; "
            f"{fmt(r.get('slow_steps'), 'd')} slow step(s); data loading {pct(r.get('data_share'))}"
            for r in sorted(perf, key=lambda r: r.get("rank") or 0)]


def _straggler_lines(strag: list[dict]) -> list[str]:
    flagged = [r for r in strag if r.get("is_straggler")]
    if flagged:
        return [f"  ⚠ Straggler: rank {fmt(r.get('rank'), 'd')} (median step {fmt(r.get('median_step_s'), '.3f', 's')}, "
                f"{fmt(r.get('vs_fastest'), '.2f', 'x')} the fastest rank, score {fmt(r.get('score'), '.2f')})"
                for r in flagged]
    if len(strag) > 1:
        slowest = max(strag, key=lambda r: r.get("vs_fastest") or 0)
        return [f"  Stragglers: none (slowest rank {fmt(slowest.get('rank'), 'd')} at "
                f"{fmt(slowest.get('vs_fastest'), '.2f', 'x')} the fastest)"]
    return []


def _mfu_lines(m: Mfu | None) -> list[str]:
    if m is None:
        return []
    if m.mfu is None:
        return [f"  MFU: n/a ({m.reason or 'an input is missing'})"]
    return [f"  MFU: {pct(m.mfu)} ({fmt(m.achieved_tflops, '.1f')} of {fmt(m.peak_tflops, '.1f')} TFLOP/s peak, "
            f"{m.gpu_model or 'unknown GPU'}; {fmt(m.flops_per_token, '.3g')} FLOPs/token x "
            f"{fmt(m.tokens_per_second, '.4g')} tokens/s / {fmt(m.n_gpus, 'd')} GPU(s))"] \
        + [f"    assumed: {a}" for a in m.assumptions]


def render_performance(analysis: Analysis) -> str:
    """Step-time spread per rank, stragglers, per-GPU utilization and memory, MFU, per session."""
    lines = ["PERFORMANCE, STRAGGLERS AND GPUS", RULE]
    for sid in session_order(analysis, "performance", "stragglers", "gpus"):
        summary = analysis.scaling.summary(sid)
        training = summary is None or summary.is_training
        lines += ["", f"⏱ Session: {sid}" + ("" if training else f" ({KIND_WORDS.get(summary.kind, summary.kind)})")]
        perf = rows(analysis.performance, sid)
        lines += _rank_lines(perf) or (["  No step times logged."] if training else [])
        lines += _straggler_lines(rows(analysis.stragglers, sid)) + gpu_lines(analysis, sid)
        if training:  # a capture has no model, no MFU
            lines += _mfu_lines(analysis.mfu.get(sid))
    return "\n".join(lines + definitions_footer(analysis, _KEYS))
