"""Console text in the style of the seed's ``analyze_logs.py``: the comparison (``--compare``),
communication (``--communication``), performance / stragglers / GPUs, and the diagnosis
(``--diagnose``). Each block ends with the definitions of the figures it shows.

Renderers read the view of ``logkit.report.view.analysis_view``; they compute nothing
beyond unit changes (bytes to MB, fractions to percent) and never parse.
"""

from __future__ import annotations

from logkit.report.view import analysis_view, severity_rank

__all__ = ["render_console", "render_compare", "render_communication", "render_performance",
           "render_diagnose", "render_definitions", "fmt", "pct", "mb"]

RULE = "=" * 60


def fmt(value, spec: str = ".2f", unit: str = "") -> str:
    """``value`` formatted, or "n/a" when it is missing."""
    if value is None:
        return "n/a"
    try:
        if value != value:  # NaN
            return "n/a"
    except (TypeError, ValueError):
        pass
    try:
        return f"{value:{spec}}{unit}"
    except (TypeError, ValueError):
        return f"{value}{unit}"


def pct(fraction, spec: str = ".1f") -> str:
    """A fraction (0.923) as a percentage ("92.3%")."""
    return fmt(fraction * 100 if isinstance(fraction, (int, float)) else None, spec, "%")


def mb(nbytes, spec: str = ".2f") -> str:
    """Bytes as SI megabytes ("67.23MB": 10^6 bytes, as LOG_FORMATS.md says)."""
    return fmt(nbytes / 1e6 if isinstance(nbytes, (int, float)) else None, spec, "MB")


def _meta(sessions) -> dict[str, dict]:
    out = {}
    for s in sessions or []:
        meta = getattr(s, "meta", s)
        if isinstance(meta, dict) and meta.get("session_id") is not None:
            out[meta["session_id"]] = meta
    return out


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


def _gpu_lines(view: dict, sid: str, indent: str = "  ") -> list[str]:
    rows = [g for g in view["gpus"] if g.get("session_id") == sid]
    hosts = {g.get("host") for g in rows}
    out = []
    for g in rows:
        where = f"{g['host']} " if len(hosts) > 1 and g.get("host") else ""
        out.append(f"{indent}{where}GPU {fmt(g.get('gpu'), 'd')}: {fmt(g.get('avg_util'), '.1f', '%')} avg util, "
                   f"{fmt(g.get('peak_util'), '.1f', '%')} peak, {fmt(g.get('avg_memory_pct'), '.1f', '%')} avg memory")
    return out


def _nan_point(x) -> str:
    if not isinstance(x, dict):
        return f"step {x}"
    text = f"step {fmt(x.get('step'), 'd')}"
    if x.get("rank") is not None:
        text += f" rank {x['rank']}"
    return text + (f" at {x['source']}" if x.get("source") else "")


def _health_line(view: dict, sid: str) -> list[str]:
    h = (view.get("health") or {}).get(sid)
    if not isinstance(h, dict):
        return []
    nan = h.get("nan_steps")
    n_nan = len(nan) if isinstance(nan, list) else nan
    div = h.get("divergence")
    if isinstance(div, dict):
        div_text = f"diverging ({div.get('kind') or 'loss rising'}: smoothed loss " \
                   f"{fmt(div.get('final_loss_smoothed'), '.4f')} against a minimum of {fmt(div.get('min_loss'), '.4f')}" \
                   + (f" at {fmt(div.get('min_at'), 'g')}" if div.get("min_at") is not None else "") + ")"
    elif div:
        div_text = "diverging" if isinstance(div, bool) else f"diverging ({div})"
    else:
        div_text = "no divergence"
    nan_text = "no NaN/Inf loss" if not n_nan else f"NaN/Inf loss at {n_nan} step(s)"
    if isinstance(nan, list) and nan:
        nan_text += " (" + ", ".join(_nan_point(x) for x in nan[:5]) + (", ..." if len(nan) > 5 else "") + ")"
    return [f"  Health: {nan_text}, {div_text}"]


def _session_block(s: dict, view: dict, meta: dict, gpu: bool) -> list[str]:
    sid = s["session_id"]
    m = meta.get(sid, {})
    d = s.get("duration_s")
    duration = f"{fmt(d, '.1f', 's')} ({fmt(d / 60 if d is not None else None, '.1f', 'min')})"
    if m.get("duration_from") == "last record":
        duration += " (to the last record: no session_end)"
    lines = [f"  Session: {sid}", f"  Duration: {duration}", _devices(s, gpu),
             f"  Steps: {fmt(s.get('total_steps'), 'd')}", f"  Final Loss: {fmt(s.get('final_loss'), '.4f')}",
             f"  Steps/sec: {fmt(s.get('steps_per_second'))}",
             f"  Samples/sec: {fmt(s.get('samples_per_second'))}"
             f" (global batch {fmt(s.get('total_batch_size'), 'd')})"]
    if s.get("steady_samples_per_second") is not None:
        lines.append(f"  Steady samples/sec: {fmt(s['steady_samples_per_second'])}"
                     f" (after {fmt(s.get('warmup_steps'), 'd')} warm-up steps,"
                     f" {fmt(s.get('steady_steps'), 'd')} steady steps)")
    if m.get("status") not in (None, "completed"):
        lines.append(f"  Status: {m['status']}")
    lines += _gpu_lines(view, sid)
    lines += _health_line(view, sid)
    return lines


def _mean(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) / len(values) if values else None


def _average_block(title: str, group: list[dict], view: dict, gpu: bool) -> list[str]:
    lines = [f"{title}:", f"  Steps/sec: {fmt(_mean(s.get('steps_per_second') for s in group))}",
             f"  Samples/sec: {fmt(_mean(s.get('samples_per_second') for s in group))}"]
    if gpu:
        ids = {s["session_id"] for s in group}
        util = _mean(g.get("avg_util") for g in view["gpus"] if g.get("session_id") in ids)
        if util is not None:
            lines.append(f"  GPU utilization: {util:.1f}%")
    return lines


def _regime_text(regime: str | None, base: dict, cand: dict) -> str:
    if regime == "strong":
        return f"strong scaling (same global batch: {base.get('total_batch_size')})"
    if regime == "weak":
        per = (base.get("total_batch_size") or 0) / (base.get("world_size") or 1)
        return f"weak scaling (same per-rank batch: {per:g})"
    if regime == "mixed":
        return (f"mixed (global batch {base.get('total_batch_size')} -> {cand.get('total_batch_size')}, "
                "per-rank batch differs too)")
    return f"{regime or 'unknown'} (batch sizes not logged)" if regime in (None, "unknown") else str(regime)


def _comparison_lines(c: dict, base: dict, cand: dict, w: dict) -> list[str]:
    lines = ["", f"vs {cand.get('session_id', c.get('candidate'))} ({fmt(cand.get('world_size'), 'd')} rank(s)):",
             f"  Samples/sec: {fmt(base.get('samples_per_second'))} -> {fmt(cand.get('samples_per_second'))}",
             f"🚀 {w['speedup']}: {fmt(c.get('speedup'), '.2f', 'x')}",
             f"📊 {w['efficiency']}: {pct(c.get('scaling_efficiency'))}"]
    if c.get("steady_speedup") is not None:
        lines.append(f"  Steady state: speedup {fmt(c['steady_speedup'], '.2f', 'x')}, "
                     f"efficiency {pct(c.get('steady_scaling_efficiency'))}")
    ci = c.get("speedup_ci")
    if isinstance(ci, list) and len(ci) == 2 and None not in ci:
        level = c.get("ci_level")
        level_text = pct(level, ".0f") if isinstance(level, float) and level < 1 else fmt(level, "g", "%")
        lines.append(f"  {level_text} CI of the steady-state speedup: "
                     f"[{fmt(ci[0], '.2f', 'x')}, {fmt(ci[1], '.2f', 'x')}]")
    lines += [f"  Regime: {_regime_text(c.get('regime'), base, cand)}",
              f"  Step-rate ratio: {fmt(c.get('step_rate_ratio'), '.2f', 'x')}"]
    for f in c.get("flags") or []:
        lines.append(f"  ⚠ {f.get('kind')}: {f.get('cause')}")
    return lines


def _fit_lines(fit: dict | None) -> list[str]:
    if not isinstance(fit, dict):
        return []
    lines = ["", f"📈 Scaling fit ({fit.get('model') or 'Amdahl'}): serial fraction "
                 f"{fmt(fit.get('serial_fraction'), '.3f')}, parallel fraction {fmt(fit.get('parallel_fraction'), '.3f')}"
                 f", R² {fmt(fit.get('r2'), '.3f')}"]
    kf = fit.get("karp_flatt") or {}
    if kf:
        lines.append("  Karp-Flatt serial fraction: " + ", ".join(
            f"{ws} ranks {fmt(e, '.3f')}" for ws, e in sorted(kf.items(), key=lambda kv: float(kv[0]))))
    pred = fit.get("predicted") or {}
    if pred:
        lines.append("  Predicted speedup: " + ", ".join(
            f"{ws} ranks {fmt(v, '.2f', 'x')}" for ws, v in sorted(pred.items(), key=lambda kv: float(kv[0]))))
    return lines


def _parity_lines(view: dict) -> list[str]:
    rows = view.get("loss_parity") or []
    if not rows:
        return []
    lines = ["", "🎯 LOSS PARITY:"]
    for p in rows:
        if not p.get("points") and p.get("final_loss_diff") is None:
            lines.append(f"  {p.get('candidate')} vs {p.get('baseline')}: no loss values to compare")
            continue
        lines.append(f"  {p.get('candidate')} vs {p.get('baseline')}: final loss diff "
                     f"{fmt(p.get('final_loss_diff'), '+.4f')} ({pct(p.get('final_loss_rel_diff'), '+.2f')}), "
                     f"max |diff| {fmt(p.get('max_abs_diff_aligned'), '.4f')} aligned by "
                     f"{p.get('aligned_by') or 'n/a'} over {fmt(p.get('points'), 'd')} point(s)")
    return lines


def render_definitions(view: dict, keys: list[str] | tuple[str, ...]) -> list[str]:
    """The "Definitions:" footer for ``keys`` (those the view defines)."""
    defs = view.get("definitions") or {}
    shown = [k for k in keys if defs.get(k)]
    if not shown:
        return []
    return ["", "Definitions:"] + [f"  {k}: {defs[k]}" for k in shown]


def render_compare(analysis, sessions=None) -> str:
    """The comparison (seed 000's ``--compare``) as text (no trailing newline).

    ``analysis``: an ``Analysis``, its dict, a view, or a ``ComparisonReport``; ``sessions``
    (optional) gives each session's status and where its duration came from.
    """
    view = analysis_view(analysis)
    meta = _meta(sessions)
    scaling = view["scaling"]
    summaries = scaling["sessions"]
    gpu = any((s.get("gpu_count") or 0) > 0 for s in summaries)
    w = _words(gpu)
    single = [s for s in summaries if not _is_multi(s)]
    multi = [s for s in summaries if _is_multi(s)]
    lines = [w["title"], RULE]
    for icon, label, group in (("📱", w["single"], single), ("🔗", w["multi"], multi)):
        lines += ["", f"{icon} {label} SESSIONS ({len(group)}):"]
        for i, s in enumerate(group):
            if i:
                lines.append("")
            lines += _session_block(s, view, meta, gpu)
    lines += ["", "⚡ PERFORMANCE COMPARISON:"]
    if single:
        lines += _average_block(w["single_avg"], single, view, gpu) + [""]
    if multi:
        lines += _average_block(w["multi_avg"], multi, view, gpu) + [""]
    comparisons = scaling["comparisons"]
    keys = ["speedup", "scaling_efficiency", "regime", "step_rate_ratio"]
    if not comparisons:
        lines.append("Only one session: nothing to compare." if len(summaries) < 2
                     else "No comparison could be made (throughput missing).")
    else:
        by_id = {s["session_id"]: s for s in summaries}
        baseline = scaling.get("baseline") or comparisons[0].get("baseline")
        base = by_id.get(baseline, {"session_id": baseline})
        lines.append(f"Baseline: {baseline} ({fmt(base.get('world_size'), 'd')} rank(s), "
                     f"{fmt(base.get('samples_per_second'))} samples/s)")
        for c in comparisons:
            b = by_id.get(c.get("baseline"), base)
            lines += _comparison_lines(c, b, by_id.get(c.get("candidate"), {}), w)
        if any(c.get("speedup_ci") for c in comparisons):
            keys.append("speedup_ci")
        if any(c.get("steady_speedup") is not None for c in comparisons):
            keys += ["steady_speedup", "steady_scaling_efficiency", "warmup_steps"]
    lines += _fit_lines(scaling.get("fit"))
    if scaling.get("fit"):
        keys += ["serial_fraction", "karp_flatt", "predicted", "r2"]
    lines += _parity_lines(view)
    if view.get("loss_parity"):
        keys.append("loss_parity")
    if view.get("health"):
        keys += ["nan_steps", "divergence"]
    lines += render_definitions(view, keys)
    return "\n".join(lines)


def render_console(report, sessions=None) -> str:
    """The comparison as text; kept for callers of the first version (a ``ComparisonReport``)."""
    return render_compare(report, sessions)


def _session_header(view: dict, sid: str) -> list[str]:
    s = next((x for x in view["scaling"]["sessions"] if x.get("session_id") == sid), {})
    gpus = s.get("gpu_count")
    ranks = s.get("world_size")
    if gpus:
        devices = f"  GPUs: {gpus}" + (f" ({ranks} ranks)" if ranks and ranks != gpus else "")
    else:
        devices = f"  GPUs: 0 (CPU, {fmt(ranks, 'd')} rank(s))" if s else "  GPUs: n/a"
    return [f"📡 Session: {sid}", devices]


def _session_order(view: dict, *tables: str) -> list[str]:
    order = [s["session_id"] for s in view["scaling"]["sessions"]]
    for t in tables:
        for r in view.get(t) or []:
            if r.get("session_id") not in order:
                order.append(r.get("session_id"))
    return order


def render_communication(analysis) -> str:
    """Seed 000's ``--communication`` block per session, with latency percentiles, algbw/busbw,
    share of step time, share of the link's peak and the latency-bound note."""
    view = analysis_view(analysis)
    rows = view["communication"]
    lines = ["MULTI-GPU COMMUNICATION ANALYSIS", RULE]
    for sid in _session_order(view, "communication"):
        mine = [r for r in rows if r.get("session_id") == sid]
        lines += [""] + _session_header(view, sid)
        if not mine:
            lines.append("  Communication Operations: none logged (single rank, or communication logging off)")
            continue
        lines.append("  Communication Operations:")
        ops: dict[str, list[dict]] = {}
        for r in mine:
            ops.setdefault(str(r.get("op")), []).append(r)
        for op, op_rows in ops.items():
            op_rows = sorted(op_rows, key=lambda r: (r.get("rank") is None, r.get("rank") or 0))
            head = op_rows[0]
            lines.append(f"    {op}: {fmt(head.get('count'), 'd')} occurrences")
            lines += _op_detail(head, "      ")
            if len(op_rows) > 1:
                lines.append(f"      (figures above: rank {fmt(head.get('rank'), 'd')}; other ranks below)")
                for r in op_rows[1:]:
                    lines.append(f"      Rank {fmt(r.get('rank'), 'd')}: {fmt(r.get('count'), 'd')} ops, "
                                 f"{mb(r.get('total_bytes'))} total, p50 {fmt(r.get('p50_ms'), '.2f', ' ms')}, "
                                 f"busbw {fmt(r.get('busbw_mb_s'), '.1f', ' MB/s')}, "
                                 f"{pct(r.get('sync_share_of_step_time'))} of step time")
    lines += render_definitions(view, ["count", "total_bytes / mean_bytes", "p50_ms / p95_ms", "algbw_mb_s", "busbw_mb_s",
                                       "sync_share_of_step_time", "pct_of_peak", "latency_bound"])
    return "\n".join(lines)


def _op_detail(r: dict, ind: str) -> list[str]:
    lines = [f"{ind}Avg data size: {mb(r.get('mean_bytes'))}",
             f"{ind}Total data: {mb(r.get('total_bytes'))}",
             f"{ind}Duration p50/p95: {fmt(r.get('p50_ms'), '.2f')} / {fmt(r.get('p95_ms'), '.2f')} ms",
             f"{ind}Bandwidth: algbw {fmt(r.get('algbw_mb_s'), '.1f', ' MB/s')}, "
             f"busbw {fmt(r.get('busbw_mb_s'), '.1f', ' MB/s')}",
             f"{ind}Share of step time: {pct(r.get('sync_share_of_step_time'))}"]
    if r.get("peak_busbw_gb_s") is not None:
        lines.append(f"{ind}Link: {r.get('link') or 'unknown'} (peak {fmt(r.get('peak_busbw_gb_s'), '.1f', ' GB/s')}"
                     f" busbw): {fmt(r.get('pct_of_peak'), '.1f', '%')} of peak")
    elif r.get("link"):
        lines.append(f"{ind}Link: {r['link']} (no reference peak)")
    if r.get("latency_bound"):
        lines.append(f"{ind}Latency-bound: yes" + (f" ({r['note']})" if r.get("note") else ""))
    elif r.get("note"):
        lines.append(f"{ind}Note: {r['note']}")
    return lines


def render_performance(analysis) -> str:
    """Step-time spread per rank, stragglers, per-GPU utilization and memory, MFU, per session."""
    view = analysis_view(analysis)
    lines = ["PERFORMANCE, STRAGGLERS AND GPUS", RULE]
    for sid in _session_order(view, "performance", "stragglers", "gpus"):
        lines += ["", f"⏱ Session: {sid}"]
        perf = [r for r in view["performance"] if r.get("session_id") == sid]
        for r in sorted(perf, key=lambda r: r.get("rank") or 0):
            lines.append(f"  Rank {fmt(r.get('rank'), 'd')}: {fmt(r.get('steps'), 'd')} steps, step time "
                         f"p50 {fmt(r.get('step_p50_s'), '.3f', 's')}, p95 {fmt(r.get('step_p95_s'), '.3f', 's')}, "
                         f"max {fmt(r.get('step_max_s'), '.3f', 's')}, mean {fmt(r.get('step_mean_s'), '.3f', 's')}; "
                         f"{fmt(r.get('slow_steps'), 'd')} slow step(s); data loading {pct(r.get('data_share'))}")
        if not perf:
            lines.append("  No step times logged.")
        strag = [r for r in view["stragglers"] if r.get("session_id") == sid]
        flagged = [r for r in strag if r.get("is_straggler")]
        if flagged:
            for r in flagged:
                lines.append(f"  ⚠ Straggler: rank {fmt(r.get('rank'), 'd')} (median step "
                             f"{fmt(r.get('median_step_s'), '.3f', 's')}, {fmt(r.get('vs_fastest'), '.2f', 'x')} "
                             f"the fastest rank, score {fmt(r.get('score'), '.2f')})")
        elif len(strag) > 1:
            slowest = max(strag, key=lambda r: r.get("vs_fastest") or 0)
            lines.append(f"  Stragglers: none (slowest rank {fmt(slowest.get('rank'), 'd')} at "
                         f"{fmt(slowest.get('vs_fastest'), '.2f', 'x')} the fastest)")
        lines += _gpu_lines(view, sid)
        m = (view.get("mfu") or {}).get(sid)
        if isinstance(m, dict) and m.get("mfu") is not None:
            lines.append(f"  MFU: {pct(m['mfu'])} ({fmt(m.get('achieved_tflops'), '.1f')} of "
                         f"{fmt(m.get('peak_tflops'), '.1f')} TFLOP/s peak, {m.get('gpu_model') or 'unknown GPU'})")
        elif sid in (view.get("mfu") or {}):
            lines.append("  MFU: n/a (no GPU model or FLOPs per token known)")
    lines += render_definitions(view, ["step_p50_s / p95 / max", "slow_steps", "data_share", "vs_fastest", "score",
                                       "avg_util / peak_util", "avg_memory_pct", "mfu"])
    return "\n".join(lines)


def render_diagnose(analysis) -> str:
    """Findings, most severe first, each with its evidence (file:line)."""
    view = analysis_view(analysis)
    findings = sorted(view["findings"], key=lambda f: severity_rank(f.get("severity")))
    lines = [f"🩺 DIAGNOSIS: {len(findings)} finding(s)", RULE]
    if not findings:
        lines += ["", "✅ No findings: nothing abnormal in these sessions."]
    icons = {"critical": "🛑", "error": "❌", "warning": "⚠", "info": "ℹ"}
    for f in findings:
        sev = str(f.get("severity") or "info").lower()
        ranks = f.get("ranks")
        where = f"session {f.get('session_id')}" + (
            f", rank(s) {', '.join(str(r) for r in ranks)}" if ranks else "")
        lines += ["", f"{icons.get(sev, '•')} [{sev.upper()}] {f.get('title')} ({where}; {f.get('kind')})"]
        if f.get("detail"):
            lines += [f"    {line}" for line in str(f["detail"]).splitlines()]
        evidence = f.get("evidence") or []
        for e in evidence[:10]:
            lines.append(f"    evidence: {e}")
        if len(evidence) > 10:
            lines.append(f"    ... and {len(evidence) - 10} more evidence line(s) (see --json)")
    lines += render_definitions(view, ["severity"])
    return "\n".join(lines)
