"""``--communication``: per session, rank and op, sizes, latency percentiles, algbw/busbw, share of
step time, share of the link's peak and the verdict; the run's own totals beside sampled lines;
for nccl-tests output, per op the bandwidth at the largest message size."""

from __future__ import annotations

from logkit.analysis.results import Analysis
from logkit.analysis.results.frames import CommRow, NcclTestsRow
from logkit.report.console.common import RULE, definitions_footer, session_header, session_order
from logkit.report.format import fmt, mb, pct, size_text
from logkit.schema.vocab import SessionKind

_KEYS = ["count", "total_bytes / mean_bytes", "p50_ms / p95_ms", "algbw_mb_s", "busbw_mb_s",
         "sync_share_of_step_time", "pct_of_peak", "verdict"]


def _link(r: CommRow | NcclTestsRow, ind: str, where: str = "") -> list[str]:
    """The link the row is measured against and its share of the link's peak."""
    crosses = ([f"{ind}Crosses: {r.scope or 'unknown scope'}, over {r.transport or 'a transport no log names'}; "
                f"peak from: {r.peak_source}"] if r.scope or r.transport else [])
    if r.peak_busbw_gb_s is not None:
        return [f"{ind}Link: {r.link or 'unknown'} (peak {fmt(r.peak_busbw_gb_s, '.1f', ' GB/s')} "
                f"busbw): {fmt(r.pct_of_peak, '.1f', '%')} of peak{where}", *crosses]
    return [f"{ind}Link: {r.link} (no reference peak)", *crosses] if r.link else crosses


def _nccl_tests_lines(tests: list[NcclTestsRow]) -> list[str]:
    lines = ["  nccl-tests (GB/s = 10^9 bytes/s; busbw at the largest size is the figure to compare):"]
    for r in tests:
        where = f" ({r.placement})" if r.placement else ""
        lines.append(f"    {r.op}{where}: {fmt(r.sizes, 'd')} sizes, {size_text(r.min_bytes)}"
                     f" .. {size_text(r.max_bytes)}, {fmt(r.group_size, 'd')} ranks")
        lines.append(f"      busbw at the largest size ({size_text(r.max_bytes)}): "
                     f"{fmt(r.busbw_at_max_size_gb_s, '.2f', ' GB/s')} (algbw "
                     f"{fmt(r.algbw_at_max_size_gb_s, '.2f', ' GB/s')}, "
                     f"{fmt(r.time_at_max_size_us, '.1f', ' us')})"
                     + (f" at {r.source}" if r.source else ""))
        lines.append(f"      80% of the sweep's max busbw ({fmt(r.max_busbw_gb_s, '.2f', ' GB/s')}) first "
                     f"reached at {size_text(r.size_at_80pct_bytes)}")
        lines.append(f"      # Avg bus bandwidth (nccl-tests, mean over all sizes): "
                     f"{fmt(r.avg_busbw_gb_s, '.2f', ' GB/s')}")
        lines += _link(r, "      ", " at the largest size")
        if r.note:
            lines.append(f"      Verdict: {r.note}")
    return lines


def _op_detail(r: CommRow, ind: str) -> list[str]:
    bus_from = r.busbw_from
    lines = [f"{ind}Duration p50/p95: {fmt(r.p50_ms, '.2f')} / {fmt(r.p95_ms, '.2f')} ms",
             f"{ind}Bandwidth: algbw {fmt(r.algbw_mb_s, '.1f', ' MB/s')}, "
             f"busbw {fmt(r.busbw_mb_s, '.1f', ' MB/s')}"
             + (f" ({bus_from})" if bus_from and bus_from != "logged" else "")]
    matched = r.matched_steps
    if r.sync_share_of_step_time is not None:
        lines.append(f"{ind}Share of step time: {pct(r.sync_share_of_step_time)}"
                     + (f" (over {matched} step(s) with both)" if matched else ""))
    else:
        lines.append(f"{ind}Share of step time: n/a (no step logged both this op and a step time)")
    lines += _link(r, ind)
    if r.note:
        lines.append(f"{ind}Verdict: {r.note}" if r.verdict else f"{ind}Note: {r.note}")
    elif r.latency_bound:
        lines.append(f"{ind}Latency-bound: yes")
    return lines


def _op_lines(op: str, op_rows: list[CommRow]) -> tuple[list[str], bool]:
    """The lines of one op (its lowest rank's figures, the other ranks below); whether the run's own
    totals stood in for sampled lines."""
    op_rows = sorted(op_rows, key=lambda r: (r.rank is None, r.rank or 0))
    head = op_rows[0]
    sampled = bool(head.sampled and head.summary_count is not None)
    if sampled:
        lines = [f"    {op}: {fmt(head.summary_count, '.0f')} occurrences (run total, summary.json)",
                 f"      Avg data size: {mb(head.summary_mean_bytes)}",
                 f"      Total data: {mb(head.summary_total_bytes)}",
                 f"      Sampled log lines: {fmt(head.count, 'd')} of them, {mb(head.total_bytes)} total, "
                 f"{mb(head.mean_bytes)} avg: the figures below are the sampled lines'"]
    else:
        lines = [f"    {op}: {fmt(head.count, 'd')} occurrences",
                 f"      Avg data size: {mb(head.mean_bytes)}", f"      Total data: {mb(head.total_bytes)}"]
    if head.phase:
        lines.append(f"      Phase: {head.phase}")
    if head.role:
        lines.append(f"      What it does here: {head.role}")
    lines += _op_detail(head, "      ")
    if len(op_rows) > 1:
        lines.append(f"      (figures above: rank {fmt(head.rank, 'd')}; other ranks below)")
        lines += [f"      Rank {fmt(r.rank, 'd')}: {fmt(r.count, 'd')} ops, {mb(r.total_bytes)} "
                  f"total, p50 {fmt(r.p50_ms, '.2f', ' ms')}, busbw {fmt(r.busbw_mb_s, '.1f', ' MB/s')}, "
                  f"{pct(r.sync_share_of_step_time)} of step time" for r in op_rows[1:]]
    return lines, sampled


def render_communication(analysis: Analysis) -> str:
    """The communication block of every session with communication (see module doc)."""
    lines = ["MULTI-GPU COMMUNICATION ANALYSIS", RULE]
    keys = list(_KEYS)
    for sid in session_order(analysis, "communication", "nccl_tests"):
        mine, tests = analysis.rows("communication", sid), analysis.rows("nccl_tests", sid)
        summary = analysis.scaling.session_summary(sid)
        if summary is not None and summary.kind == SessionKind.GPU_CAPTURE and not mine:
            continue  # a GPU capture has no communication to show
        lines += [""] + session_header(analysis, sid, "📡")
        if tests:
            lines += _nccl_tests_lines(tests)
            keys += ["busbw_at_max_size_gb_s", "size_at_80pct_bytes", "avg_busbw_gb_s"]
            continue
        if not mine:
            lines.append("  Communication Operations: none logged (single rank, or communication logging off)")
            continue
        lines.append("  Communication Operations:")
        ops: dict[str, list[CommRow]] = {}
        for r in mine:
            ops.setdefault(str(r.op), []).append(r)
        for op, op_rows in ops.items():
            op_lines, sampled = _op_lines(op, op_rows)
            lines += op_lines
            keys += ["summary_count"] if sampled else []
    return "\n".join(lines + definitions_footer(analysis, keys))
