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


def _words(gpu: bool | None) -> dict[str, str]:
    """The seed's GPU words when a run had GPUs; CPU words when every run says it had none; neutral
    words ("process") when the logs do not say."""
    if gpu is None:
        return {"title": "SINGLE-PROCESS vs MULTI-PROCESS COMPARISON", "single": "SINGLE-PROCESS",
                "multi": "MULTI-PROCESS", "single_avg": "Single-process Average",
                "multi_avg": "Multi-process Average", "speedup": "Multi-process Speedup",
                "efficiency": "Scaling Efficiency"}
    if gpu:
        return {"title": "SINGLE GPU vs MULTI-GPU COMPARISON", "single": "SINGLE GPU", "multi": "MULTI-GPU",
                "single_avg": "Single GPU Average", "multi_avg": "Multi-GPU Average",
                "speedup": "Multi-GPU Speedup", "efficiency": "GPU Efficiency"}
    return {"title": "SINGLE-PROCESS vs MULTI-PROCESS COMPARISON (CPU)", "single": "SINGLE-PROCESS",
            "multi": "MULTI-PROCESS", "single_avg": "Single-process Average",
            "multi_avg": "Multi-process Average", "speedup": "Multi-process Speedup",
            "efficiency": "Scaling Efficiency"}


def _gpu_count_text(gpus, ranks, mode=None) -> str:
    """"2", "2 (4 ranks)", "0 (CPU, 2 ranks)" when the run says it had none, "unknown" when it does not say."""
    if gpus is None:
        cpu = str(mode or "").upper() in ("CPU", "MULTI-CPU")
        if cpu:
            return f"0 (CPU, {fmt(ranks, 'd')} rank(s))"
        return "unknown" + (f" ({ranks} rank(s))" if ranks else "")
    if gpus == 0:
        return f"0 (CPU, {fmt(ranks, 'd')} rank(s))"
    return f"{gpus}" + (f" ({ranks} ranks)" if ranks and ranks != gpus else "")


def _devices(s: dict, gpu: bool | None) -> str:
    ranks = s.get("world_size")
    if gpu is False:
        return f"  Ranks: {fmt(ranks, 'd')}"
    return f"  GPUs: {_gpu_count_text(s.get('gpu_count'), ranks, s.get('mode'))}"


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
    batch = f"global batch {fmt(s.get('total_batch_size'), 'd')}"
    if s.get("total_batch_size_from") not in (None, "logged"):
        batch += f", {s['total_batch_size_from']}"
    lines = [f"  Session: {sid}", f"  Duration: {duration}", _devices(s, gpu),
             f"  Steps: {fmt(s.get('total_steps'), 'd')}", f"  Final Loss: {fmt(s.get('final_loss'), '.4f')}"
             + (f" (from {s['final_loss_from']})" if s.get("final_loss_from") and s.get("final_loss") is not None
                else ""),
             f"  Steps/sec: {fmt(s.get('steps_per_second'))}",
             f"  Samples/sec: {fmt(s.get('samples_per_second'))} ({batch})"]
    if s.get("basis_detail"):
        lines.append(f"  Figures from: {s['basis_detail']}")
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
    steady = c.get("basis") == "steady state"
    key = "steady_samples_per_second" if steady else "samples_per_second"
    basis = c.get("basis") or "whole run"
    lines = ["", f"vs {cand.get('session_id', c.get('candidate'))} ({fmt(cand.get('world_size'), 'd')} rank(s)):",
             f"  Samples/sec ({basis}): {fmt(base.get(key))} -> {fmt(cand.get(key))}"]
    if (c.get("rank_ratio") or 2) > 1:
        lines += [f"🚀 {w['speedup']}: {fmt(c.get('speedup'), '.2f', 'x')} ({basis})",
                  f"📊 {w['efficiency']}: {pct(c.get('scaling_efficiency'))} ({basis})"]
        if steady and c.get("whole_run_speedup") is not None:
            lines.append(f"  Whole run (warm-up included): speedup {fmt(c['whole_run_speedup'], '.2f', 'x')}, "
                         f"efficiency {pct(c.get('whole_run_scaling_efficiency'))}")
    else:
        lines.append(f"⚖ Relative throughput: {fmt(c.get('speedup'), '.2f', 'x')} ({basis}; the same number of "
                     "ranks: a comparison of runs, not a scaling measurement)")
        if steady and c.get("whole_run_speedup") is not None:
            lines.append(f"  Whole run (warm-up included): {fmt(c['whole_run_speedup'], '.2f', 'x')}")
    ci = c.get("speedup_ci")
    if isinstance(ci, list) and len(ci) == 2 and None not in ci:
        level = c.get("ci_level")
        level_text = pct(level, ".0f") if isinstance(level, float) and level < 1 else fmt(level, "g", "%")
        lines.append(f"  {level_text} CI of the steady-state speedup: "
                     f"[{fmt(ci[0], '.2f', 'x')}, {fmt(ci[1], '.2f', 'x')}]")
    lines += [f"  Regime: {_regime_text(c.get('regime'), base, cand)}",
              f"  Step-rate ratio: {fmt(c.get('step_rate_ratio'), '.2f', 'x')} ({basis})"]
    if c.get("basis_detail"):
        lines.append(f"  Basis: {c['basis_detail']}")
    if c.get("note"):
        lines.append(f"  Note: {c['note']}")
    for f in c.get("flags") or []:
        lines.append(f"  ⚠ {f.get('kind')}: {f.get('cause')}")
    return lines


def _fit_lines(fit: dict | None) -> list[str]:
    if not isinstance(fit, dict):
        return []
    group = f" of {fit['group']}" if fit.get("group") else ""
    lines = ["", f"📈 Scaling fit{group} ({fit.get('model') or 'Amdahl'}): serial fraction "
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
    if fit.get("note"):
        lines.append(f"  ⚠ {fit['note']}")
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


_KIND_WORDS = {"gpu_capture": "GPU capture", "nccl_tests": "nccl-tests benchmark"}


def render_compare(analysis, sessions=None) -> str:
    """The comparison (seed 000's ``--compare``) as text (no trailing newline).

    ``analysis``: an ``Analysis``, its dict, a view, or a ``ComparisonReport``; ``sessions``
    (optional) gives each session's status and where its duration came from. Only training runs
    are listed as single / multi sessions; captures (nvidia-smi, nccl-tests) are named apart and
    never compared; runs are compared within their group (same model) only.
    """
    view = analysis_view(analysis)
    meta = _meta(sessions)
    scaling = view["scaling"]
    summaries = [s for s in scaling["sessions"] if s.get("kind") in (None, "training")]
    captures = [s for s in scaling["sessions"] if s.get("kind") not in (None, "training")]
    gpu = True if any((s.get("gpu_count") or 0) > 0 for s in summaries) else (
        False if summaries and all(s.get("gpu_count") == 0 or str(s.get("mode") or "").upper() in ("CPU", "MULTI-CPU")
                                   for s in summaries) else None)
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
    if captures:
        lines += ["", f"🧾 OTHER CAPTURES, NOT TRAINING RUNS ({len(captures)}; never compared):"]
        for s in captures:
            lines.append(f"  {s['session_id']}: {_KIND_WORDS.get(s.get('kind'), s.get('kind'))}"
                         " (see --communication / --performance)")
    lines += ["", "⚡ PERFORMANCE COMPARISON:"]
    comparisons = scaling["comparisons"]
    by_id = {s["session_id"]: s for s in scaling["sessions"]}
    keys = ["speedup", "scaling_efficiency", "regime", "step_rate_ratio", "samples_per_second", "final_loss"]
    groups = scaling.get("groups") or []
    if not comparisons:
        lines.append("Only one session: nothing to compare." if len(summaries) < 2
                     else "No comparison could be made (see the sessions not compared below).")
    else:
        labels = list(dict.fromkeys(c.get("group") for c in comparisons))
        for label in labels:
            mine = [c for c in comparisons if c.get("group") == label]
            ids = {mine[0].get("baseline")} | {c.get("candidate") for c in mine}
            members = [by_id[i] for i in ids if i in by_id]
            if len(labels) > 1 or (label and len(groups) > 1):
                lines += [f"── Group: {label} ──"] if label else []
            g_single = [s for s in members if not _is_multi(s)]
            g_multi = [s for s in members if _is_multi(s)]
            if g_single:
                lines += _average_block(w["single_avg"], g_single, view, gpu) + [""]
            if g_multi:
                lines += _average_block(w["multi_avg"], g_multi, view, gpu) + [""]
            baseline = mine[0].get("baseline")
            base = by_id.get(baseline, {"session_id": baseline})
            lines.append(f"Baseline: {baseline} ({fmt(base.get('world_size'), 'd')} rank(s), "
                         f"{fmt(base.get('samples_per_second'))} samples/s)")
            for c in mine:
                lines += _comparison_lines(c, by_id.get(c.get("baseline"), base), by_id.get(c.get("candidate"), {}),
                                           w)
            lines.append("")
        if any(c.get("speedup_ci") for c in comparisons):
            keys.append("speedup_ci")
        if any(c.get("steady_speedup") is not None for c in comparisons):
            keys += ["whole_run_speedup", "steady_speedup", "steady_scaling_efficiency", "warmup_steps"]
        keys.append("group")
    not_compared = [r for r in scaling.get("not_compared") or [] if by_id.get(r.get("session_id"), {}).get(
        "kind") in (None, "training")]
    if not_compared:
        lines += ["", f"Not compared ({len(not_compared)}):"]
        lines += [f"  {r['session_id']}: {r['reason']}" for r in not_compared]
    fits = scaling.get("fits") or ([scaling["fit"]] if scaling.get("fit") else [])
    for fit in fits:
        lines += _fit_lines(fit)
    if fits:
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
    kind = _KIND_WORDS.get(s.get("kind"))
    devices = f"  GPUs: {_gpu_count_text(s.get('gpu_count'), s.get('world_size'), s.get('mode'))}" if s \
        else "  GPUs: unknown"
    return [f"📡 Session: {sid}" + (f" ({kind})" if kind else ""), devices]


def _session_order(view: dict, *tables: str) -> list[str]:
    order = [s["session_id"] for s in view["scaling"]["sessions"]]
    for t in tables:
        for r in view.get(t) or []:
            if r.get("session_id") not in order:
                order.append(r.get("session_id"))
    return order


def render_communication(analysis) -> str:
    """Seed 000's ``--communication`` block per session, with latency percentiles, algbw/busbw,
    share of step time, share of the link's peak and the verdict; the run's own totals beside
    sampled lines; for nccl-tests output, per op the bandwidth at the largest message size."""
    view = analysis_view(analysis)
    rows = view["communication"]
    nccl = view.get("nccl_tests") or []
    lines = ["MULTI-GPU COMMUNICATION ANALYSIS", RULE]
    keys = ["count", "total_bytes / mean_bytes", "p50_ms / p95_ms", "algbw_mb_s", "busbw_mb_s",
            "sync_share_of_step_time", "pct_of_peak", "verdict"]
    for sid in _session_order(view, "communication", "nccl_tests"):
        mine = [r for r in rows if r.get("session_id") == sid]
        tests = [r for r in nccl if r.get("session_id") == sid]
        summary = next((x for x in view["scaling"]["sessions"] if x.get("session_id") == sid), {})
        if summary.get("kind") == "gpu_capture" and not mine:
            continue  # a GPU capture has no communication to show
        lines += [""] + _session_header(view, sid)
        if tests:
            lines += _nccl_tests_lines(tests)
            keys += ["busbw_at_max_size_gb_s", "size_at_80pct_bytes", "avg_busbw_gb_s"]
            continue
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
            if head.get("sampled") and head.get("summary_count") is not None:
                lines.append(f"    {op}: {fmt(head.get('summary_count'), '.0f')} occurrences (run total, "
                             f"summary.json)")
                lines.append(f"      Avg data size: {mb(head.get('summary_mean_bytes'))}")
                lines.append(f"      Total data: {mb(head.get('summary_total_bytes'))}")
                lines.append(f"      Sampled log lines: {fmt(head.get('count'), 'd')} of them, "
                             f"{mb(head.get('total_bytes'))} total, {mb(head.get('mean_bytes'))} avg: the figures "
                             "below are the sampled lines'")
                keys.append("summary_count")
            else:
                lines.append(f"    {op}: {fmt(head.get('count'), 'd')} occurrences")
                lines += [f"      Avg data size: {mb(head.get('mean_bytes'))}",
                          f"      Total data: {mb(head.get('total_bytes'))}"]
            lines += _op_detail(head, "      ")
            if len(op_rows) > 1:
                lines.append(f"      (figures above: rank {fmt(head.get('rank'), 'd')}; other ranks below)")
                for r in op_rows[1:]:
                    lines.append(f"      Rank {fmt(r.get('rank'), 'd')}: {fmt(r.get('count'), 'd')} ops, "
                                 f"{mb(r.get('total_bytes'))} total, p50 {fmt(r.get('p50_ms'), '.2f', ' ms')}, "
                                 f"busbw {fmt(r.get('busbw_mb_s'), '.1f', ' MB/s')}, "
                                 f"{pct(r.get('sync_share_of_step_time'))} of step time")
    lines += render_definitions(view, list(dict.fromkeys(keys)))
    return "\n".join(lines)


def _size_text(nbytes) -> str:
    if not isinstance(nbytes, (int, float)):
        return "n/a"
    if nbytes < 1e3:
        return f"{nbytes:.0f} B"
    if nbytes < 1e6:
        return f"{nbytes / 1e3:.3g} kB"
    return f"{nbytes / 1e6:.4g} MB"


def _nccl_tests_lines(tests: list[dict]) -> list[str]:
    lines = ["  nccl-tests (GB/s = 10^9 bytes/s; busbw at the largest size is the figure to compare):"]
    for r in tests:
        where = f" ({r['placement']})" if r.get("placement") else ""
        lines.append(f"    {r.get('op')}{where}: {fmt(r.get('sizes'), 'd')} sizes, {_size_text(r.get('min_bytes'))}"
                     f" .. {_size_text(r.get('max_bytes'))}, {fmt(r.get('group_size'), 'd')} ranks")
        lines.append(f"      busbw at the largest size ({_size_text(r.get('max_bytes'))}): "
                     f"{fmt(r.get('busbw_at_max_size_gb_s'), '.2f', ' GB/s')} (algbw "
                     f"{fmt(r.get('algbw_at_max_size_gb_s'), '.2f', ' GB/s')}, "
                     f"{fmt(r.get('time_at_max_size_us'), '.1f', ' us')})"
                     + (f" at {r['source']}" if r.get("source") else ""))
        lines.append(f"      80% of the sweep's max busbw ({fmt(r.get('max_busbw_gb_s'), '.2f', ' GB/s')}) first "
                     f"reached at {_size_text(r.get('size_at_80pct_bytes'))}")
        lines.append(f"      # Avg bus bandwidth (nccl-tests, mean over all sizes): "
                     f"{fmt(r.get('avg_busbw_gb_s'), '.2f', ' GB/s')}")
        if r.get("peak_busbw_gb_s") is not None:
            lines.append(f"      Link: {r.get('link')} (peak {fmt(r.get('peak_busbw_gb_s'), '.1f', ' GB/s')} busbw): "
                         f"{fmt(r.get('pct_of_peak'), '.1f', '%')} of peak at the largest size")
        elif r.get("link"):
            lines.append(f"      Link: {r['link']} (no reference peak)")
        if r.get("note"):
            lines.append(f"      Verdict: {r['note']}")
    return lines


def _op_detail(r: dict, ind: str) -> list[str]:
    bus_from = r.get("busbw_from")
    lines = [f"{ind}Duration p50/p95: {fmt(r.get('p50_ms'), '.2f')} / {fmt(r.get('p95_ms'), '.2f')} ms",
             f"{ind}Bandwidth: algbw {fmt(r.get('algbw_mb_s'), '.1f', ' MB/s')}, "
             f"busbw {fmt(r.get('busbw_mb_s'), '.1f', ' MB/s')}"
             + (f" ({bus_from})" if bus_from and bus_from != "logged" else "")]
    matched = r.get("matched_steps")
    if r.get("sync_share_of_step_time") is not None:
        lines.append(f"{ind}Share of step time: {pct(r.get('sync_share_of_step_time'))}"
                     + (f" (over {matched} step(s) with both)" if matched else ""))
    else:
        lines.append(f"{ind}Share of step time: n/a (no step logged both this op and a step time)")
    if r.get("peak_busbw_gb_s") is not None:
        lines.append(f"{ind}Link: {r.get('link') or 'unknown'} (peak {fmt(r.get('peak_busbw_gb_s'), '.1f', ' GB/s')}"
                     f" busbw): {fmt(r.get('pct_of_peak'), '.1f', '%')} of peak")
    elif r.get("link"):
        lines.append(f"{ind}Link: {r['link']} (no reference peak)")
    verdict = r.get("verdict")
    if r.get("note"):
        lines.append(f"{ind}Verdict: {r['note']}" if verdict else f"{ind}Note: {r['note']}")
    elif r.get("latency_bound"):
        lines.append(f"{ind}Latency-bound: yes")
    return lines


def render_performance(analysis) -> str:
    """Step-time spread per rank, stragglers, per-GPU utilization and memory, MFU, per session."""
    view = analysis_view(analysis)
    lines = ["PERFORMANCE, STRAGGLERS AND GPUS", RULE]
    for sid in _session_order(view, "performance", "stragglers", "gpus"):
        kind = next((x.get("kind") for x in view["scaling"]["sessions"] if x.get("session_id") == sid), None)
        lines += ["", f"⏱ Session: {sid}" + (f" ({_KIND_WORDS[kind]})" if kind in _KIND_WORDS else "")]
        perf = [r for r in view["performance"] if r.get("session_id") == sid]
        for r in sorted(perf, key=lambda r: r.get("rank") or 0):
            lines.append(f"  Rank {fmt(r.get('rank'), 'd')}: {fmt(r.get('steps'), 'd')} steps, step time "
                         f"p50 {fmt(r.get('step_p50_s'), '.3f', 's')}, p95 {fmt(r.get('step_p95_s'), '.3f', 's')}, "
                         f"max {fmt(r.get('step_max_s'), '.3f', 's')}, mean {fmt(r.get('step_mean_s'), '.3f', 's')}; "
                         f"{fmt(r.get('slow_steps'), 'd')} slow step(s); data loading {pct(r.get('data_share'))}")
        if not perf and kind in (None, "training"):
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
        if kind not in (None, "training"):
            continue  # a capture: no model, no MFU
        if isinstance(m, dict) and m.get("mfu") is not None:
            lines.append(f"  MFU: {pct(m['mfu'])} ({fmt(m.get('achieved_tflops'), '.1f')} of "
                         f"{fmt(m.get('peak_tflops'), '.1f')} TFLOP/s peak, {m.get('gpu_model') or 'unknown GPU'}"
                         f"; {fmt(m.get('flops_per_token'), '.3g')} FLOPs/token x "
                         f"{fmt(m.get('tokens_per_second'), '.4g')} tokens/s / {fmt(m.get('n_gpus'), 'd')} GPU(s))")
            for a in m.get("assumptions") or []:
                lines.append(f"    assumed: {a}")
        elif isinstance(m, dict):
            lines.append(f"  MFU: n/a ({m.get('reason') or 'an input is missing'})")
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
