"""``--performance``: step-time spread per rank, stragglers, per-GPU utilization and memory, MFU."""

from __future__ import annotations

from logkit.analysis.results import Analysis, Mfu, StragglerCall
from logkit.analysis.results.frames import ArrivalRow, BreakdownRow, StepRow
from logkit.report.console.common import (
    KIND_WORDS,
    RULE,
    definitions_footer,
    gpu_lines,
    session_order,
    strategy_lines,
)
from logkit.report.format import fmt, pct

_KEYS = ["step_p50_s / p95 / max", "slow_steps", "data_share", "vs_fastest", "score", "is_straggler", "p_value",
         "data_s", "compute_s",
         "comm_exposed_s", "wait_s", "other_s", "last_arrival_share", "cause", "avg_util / peak_util",
         "avg_memory_pct", "mfu"]
_PARTS = (("data_s", "data"), ("compute_s", "fwd/bwd"), ("comm_exposed_s", "exposed sync"), ("wait_s", "wait"),
          ("other_s", "optimizer/host"))


def _ms(value) -> str:
    return fmt(value * 1e3 if value is not None else None, ".2f", " ms")


def _breakdown_lines(rows: list[BreakdownRow]) -> list[str]:
    if not rows:
        return []
    out = [f"  Where each step goes (median over {fmt(rows[0].steps, 'd')} synced steps):"]
    for r in sorted(rows, key=lambda r: r.rank or 0):
        out.append(f"    rank {fmt(r.rank, 'd')}: " + ", ".join(f"{label} {_ms(getattr(r, key))}"
                                                              for key, label in _PARTS)
                   + f" of {_ms(r.step_s)}")
    return out


def _rank_lines(perf: list[StepRow]) -> list[str]:
    return [f"  Rank {fmt(r.rank, 'd')}: {fmt(r.steps, 'd')} steps, step time "
            f"p50 {fmt(r.step_p50_s, '.3f', 's')}, p95 {fmt(r.step_p95_s, '.3f', 's')}, "
            f"max {fmt(r.step_max_s, '.3f', 's')}, mean {fmt(r.step_mean_s, '.3f', 's')}; "
            f"{fmt(r.slow_steps, 'd')} slow step(s); data loading {pct(r.data_share)}"
            for r in sorted(perf, key=lambda r: r.rank or 0)]


def _straggler_lines(call: StragglerCall | None, strag: list[ArrivalRow]) -> list[str]:
    """The session's stragglers on the basis the analysis judged them by, or the rank nearest to one."""
    if call is None:
        return []
    flagged = [r for r in strag if r.is_straggler]
    nearest = next((r for r in strag if r.rank == call.nearest_rank), None) if call.nearest_rank is not None else None
    if call.by_arrival:
        if flagged:
            return [f"  ⚠ Straggler: rank {fmt(r.rank, 'd')}, last to the gradient sync in "
                    f"{pct(r.last_arrival_share)} of steps, {_ms(r.lateness_s)} after the first rank"
                    f" (score {fmt(r.score, '.2f')}, p {fmt(r.p_value, '.2g')}); cause: {r.cause or 'not explained'}"
                    for r in flagged]
        return [f"  Stragglers: none (rank {fmt(nearest.rank, 'd')} was last to the sync in "
                f"{pct(nearest.last_arrival_share)} of steps, p {fmt(nearest.p_value, '.2g')})"] if nearest else []
    if flagged:
        return [f"  ⚠ Straggler: rank {fmt(r.rank, 'd')} (median step {fmt(r.median_step_s, '.3f', 's')}, "
                f"{fmt(r.vs_fastest, '.2f', 'x')} the fastest rank, score {fmt(r.score, '.2f')}, "
                f"p {fmt(r.p_value, '.2g')})" for r in flagged]
    return [f"  Stragglers: none (slowest rank {fmt(nearest.rank, 'd')} at "
            f"{fmt(nearest.vs_fastest, '.2f', 'x')} the fastest)"] if nearest else []


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
        summary = analysis.scaling.session_summary(sid)
        training = summary is None or summary.is_training
        lines += ["", f"⏱ Session: {sid}" + ("" if training else f" ({KIND_WORDS.get(summary.kind, summary.kind)})")]
        lines += strategy_lines(summary)
        lines += _rank_lines(analysis.rows("performance", sid)) or (["  No step times logged."] if training else [])
        lines += _breakdown_lines(analysis.rows("step_breakdown", sid))
        lines += _straggler_lines(analysis.straggler_calls.get(sid), analysis.rows("stragglers", sid))
        lines += gpu_lines(analysis, sid)
        lines += _mfu_lines(analysis.training_mfu.get(sid))  # a capture has no model, no MFU
    return "\n".join(lines + definitions_footer(analysis, _KEYS))
