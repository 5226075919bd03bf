"""``--performance``: step-time spread per rank, stragglers, per-GPU utilization and memory, MFU."""

from __future__ import annotations

from logkit.analysis.results import Analysis, Mfu
from logkit.report.console.common import KIND_WORDS, RULE, definitions_footer, gpu_lines, rows, session_order
from logkit.report.format import fmt, pct

_KEYS = ["step_p50_s / p95 / max", "slow_steps", "data_share", "vs_fastest", "score", "is_straggler", "p_value",
         "data_s", "compute_s",
         "comm_exposed_s", "wait_s", "other_s", "last_arrival_share", "cause", "avg_util / peak_util",
         "avg_memory_pct", "mfu"]
_PARTS = (("data_s", "data"), ("compute_s", "fwd/bwd"), ("comm_exposed_s", "exposed sync"), ("wait_s", "wait"),
          ("other_s", "optimizer/host"))


def _ms(value) -> str:
    return fmt(value * 1e3 if value is not None else None, ".2f", " ms")


def _breakdown_lines(rows_: list[dict]) -> list[str]:
    if not rows_:
        return []
    out = [f"  Where each step goes (median over {fmt(rows_[0].get('steps'), 'd')} synced steps):"]
    for r in sorted(rows_, key=lambda r: r.get("rank") or 0):
        out.append(f"    rank {fmt(r.get('rank'), 'd')}: " + ", ".join(f"{label} {_ms(r.get(key))}"
                                                                       for key, label in _PARTS)
                   + f" of {_ms(r.get('step_s'))}")
    return out


def _rank_lines(perf: list[dict]) -> list[str]:
    return [f"  Rank {fmt(r.get('rank'), 'd')}: {fmt(r.get('steps'), 'd')} steps, step time "
            f"p50 {fmt(r.get('step_p50_s'), '.3f', 's')}, p95 {fmt(r.get('step_p95_s'), '.3f', 's')}, "
            f"max {fmt(r.get('step_max_s'), '.3f', 's')}, mean {fmt(r.get('step_mean_s'), '.3f', 's')}; "
            f"{fmt(r.get('slow_steps'), 'd')} slow step(s); data loading {pct(r.get('data_share'))}"
            for r in sorted(perf, key=lambda r: r.get("rank") or 0)]


def _straggler_lines(strag: list[dict]) -> list[str]:
    flagged = [r for r in strag if r.get("is_straggler")]
    arrival = [r for r in strag if r.get("last_arrival_share") is not None]
    if flagged and arrival:
        return [f"  ⚠ Straggler: rank {fmt(r.get('rank'), 'd')}, last to the gradient sync in "
                f"{pct(r.get('last_arrival_share'))} of steps, {_ms(r.get('lateness_s'))} after the first rank"
                f" (score {fmt(r.get('score'), '.2f')}, p {fmt(r.get('p_value'), '.2g')}); cause: "
                f"{r.get('cause') or 'not explained'}" for r in flagged]
    if arrival:
        latest = max(arrival, key=lambda r: r.get("last_arrival_share") or 0)
        return [f"  Stragglers: none (rank {fmt(latest.get('rank'), 'd')} was last to the sync in "
                f"{pct(latest.get('last_arrival_share'))} of steps, p {fmt(latest.get('p_value'), '.2g')})"]
    if flagged:
        return [f"  ⚠ Straggler: rank {fmt(r.get('rank'), 'd')} (median step {fmt(r.get('median_step_s'), '.3f', 's')}, "
                f"{fmt(r.get('vs_fastest'), '.2f', 'x')} the fastest rank, score {fmt(r.get('score'), '.2f')}, "
                f"p {fmt(r.get('p_value'), '.2g')})" for r in flagged]
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
        lines += _breakdown_lines(rows(analysis.step_breakdown, sid))
        lines += _straggler_lines(rows(analysis.stragglers, sid)) + gpu_lines(analysis, sid)
        if training:  # a capture has no model, no MFU
            lines += _mfu_lines(analysis.mfu.get(sid))
    return "\n".join(lines + definitions_footer(analysis, _KEYS))
