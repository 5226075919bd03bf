"""Console text of a comparison, in the style of the seed's ``analyze_logs.py --compare``."""

from __future__ import annotations

__all__ = ["render_console", "fmt"]

RULE = "=" * 60


def fmt(value, spec: str = ".2f", unit: str = "") -> str:
    """``value`` formatted, or "n/a" when it is missing."""
    if value is None:
        return "n/a"
    try:
        return f"{value:{spec}}{unit}"
    except (TypeError, ValueError):
        return f"{value}{unit}"


def _is_multi(s: dict) -> bool:
    return (s.get("world_size") or 1) > 1 or (s.get("gpu_count") or 0) > 1


def _words(gpu: bool) -> dict[str, str]:
    if gpu:
        return {"title": "SINGLE GPU vs MULTI-GPU COMPARISON", "single": "SINGLE GPU", "multi": "MULTI-GPU",
                "single_avg": "Single GPU Average", "multi_avg": "Multi-GPU Average",
                "speedup": "Multi-GPU Speedup", "efficiency": "GPU Efficiency"}
    return {"title": "SINGLE-PROCESS vs MULTI-PROCESS COMPARISON (CPU)", "single": "SINGLE-PROCESS",
            "multi": "MULTI-PROCESS", "single_avg": "Single-process Average",
            "multi_avg": "Multi-process Average", "speedup": "Multi-process Speedup",
            "efficiency": "Scaling Efficiency"}


def _devices(s: dict, gpu: bool) -> str:
    ranks = s.get("world_size")
    if not gpu:
        return f"  Ranks: {fmt(ranks, 'd')}"
    gpus = s.get("gpu_count")
    if not gpus:
        return f"  GPUs: 0 (CPU, {fmt(ranks, 'd')} ranks)"
    return f"  GPUs: {gpus}" + (f" ({ranks} ranks)" if ranks and ranks != gpus else "")


def _session_block(s: dict, report, gpu: bool) -> list[str]:
    sid = s["session_id"]
    meta = report.meta.get(sid, {})
    d = s.get("duration_s")
    duration = f"{fmt(d, '.1f', 's')} ({fmt(d / 60 if d is not None else None, '.1f', 'min')})"
    if meta.get("duration_from") == "last record":
        duration += " (to the last record: no session_end)"
    lines = [f"  Session: {sid}", f"  Duration: {duration}", _devices(s, gpu),
             f"  Steps: {fmt(s.get('total_steps'), 'd')}", f"  Final Loss: {fmt(s.get('final_loss'), '.4f')}",
             f"  Steps/sec: {fmt(s.get('steps_per_second'))}",
             f"  Samples/sec: {fmt(s.get('samples_per_second'))}"
             f" (global batch {fmt(s.get('total_batch_size'), 'd')})"]
    if meta.get("status") not in (None, "completed"):
        lines.append(f"  Status: {meta['status']}")
    for g in report.gpus.get(sid, []):
        lines.append(f"  GPU {g['gpu']}: {fmt(g['avg_util'], '.1f', '%')} avg util, "
                     f"{fmt(g['peak_util'], '.1f', '%')} peak, {fmt(g['avg_memory_pct'], '.1f', '%')} avg memory")
    return lines


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _average_block(title: str, group: list[dict], report, gpu: bool) -> list[str]:
    lines = [f"{title}:", f"  Steps/sec: {fmt(_mean(s.get('steps_per_second') for s in group))}",
             f"  Samples/sec: {fmt(_mean(s.get('samples_per_second') for s in group))}"]
    if gpu:
        util = _mean(g["avg_util"] for s in group for g in report.gpus.get(s["session_id"], []))
        if util is not None:
            lines.append(f"  GPU utilization: {util:.1f}%")
    return lines


def _regime_text(regime: str, base: dict, cand: dict) -> str:
    if regime == "strong":
        return f"strong scaling (same global batch: {base['total_batch_size']})"
    if regime == "weak":
        per = base["total_batch_size"] / (base["world_size"] or 1)
        return f"weak scaling (same per-rank batch: {per:g})"
    if regime == "mixed":
        return (f"mixed (global batch {base['total_batch_size']} -> {cand['total_batch_size']}, "
                "per-rank batch differs too)")
    return "unknown (batch sizes not logged)"


def render_console(report) -> str:
    """The comparison as text lines (joined with newlines, no trailing newline)."""
    sessions = report.sessions
    gpu = any((s.get("gpu_count") or 0) > 0 for s in sessions)
    w = _words(gpu)
    single = [s for s in sessions if not _is_multi(s)]
    multi = [s for s in sessions if _is_multi(s)]
    lines = [w["title"], RULE]
    for icon, label, group in (("📱", w["single"], single), ("🔗", w["multi"], multi)):
        lines += ["", f"{icon} {label} SESSIONS ({len(group)}):"]
        for i, s in enumerate(group):
            if i:
                lines.append("")
            lines += _session_block(s, report, gpu)
    lines += ["", "⚡ PERFORMANCE COMPARISON:"]
    if single:
        lines += _average_block(w["single_avg"], single, report, gpu) + [""]
    if multi:
        lines += _average_block(w["multi_avg"], multi, report, gpu) + [""]
    if not report.comparisons:
        lines.append("Only one session: nothing to compare.")
        return "\n".join(lines)
    by_id = {s["session_id"]: s for s in sessions}
    base = by_id[report.baseline]
    lines.append(f"Baseline: {base['session_id']} ({fmt(base['world_size'], 'd')} rank(s), "
                 f"{fmt(base['samples_per_second'])} samples/s)")
    for c in report.comparisons:
        cand = by_id[c["candidate"]]
        lines += ["", f"vs {cand['session_id']} ({fmt(cand['world_size'], 'd')} rank(s)):",
                  f"  Samples/sec: {fmt(base['samples_per_second'])} -> {fmt(cand['samples_per_second'])}",
                  f"🚀 {w['speedup']}: {fmt(c['speedup'], '.2f', 'x')}",
                  f"📊 {w['efficiency']}: {fmt(c['scaling_efficiency'] * 100 if c['scaling_efficiency'] is not None else None, '.1f', '%')}",
                  f"  Regime: {_regime_text(c['regime'], base, cand)}",
                  f"  Step-rate ratio: {fmt(c['step_rate_ratio'], '.2f', 'x')}"]
    lines += ["", "Speedup = candidate samples/s ÷ baseline samples/s (throughput ratio); "
                  "efficiency = speedup ÷ (candidate ranks ÷ baseline ranks)."]
    return "\n".join(lines)
