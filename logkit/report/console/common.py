"""What the console reports share: the rule, the definitions footer, a session's header and GPU lines."""

from __future__ import annotations

from logkit.analysis.results import Analysis, SessionSummary
from logkit.report.format import fmt
from logkit.schema.vocab import SessionKind

RULE = "=" * 60
KIND_WORDS = {SessionKind.GPU_CAPTURE: "GPU capture", SessionKind.NCCL_TESTS: "nccl-tests benchmark"}


def definitions_footer(analysis: Analysis, keys) -> list[str]:
    """The "Definitions:" footer for ``keys`` (those the analysis defines)."""
    shown = [k for k in dict.fromkeys(keys) if analysis.definitions.get(k)]
    if not shown:
        return []
    return ["", "Definitions:"] + [f"  {k}: {analysis.definitions[k]}" for k in shown]


def gpu_count_text(s: SessionSummary | None) -> str:
    """"2", "2 (4 ranks)", "0 (CPU, 2 rank(s))" when the run says it had none (``on_cpu``), "unknown"
    when it does not say."""
    if s is None:
        return "unknown"
    gpus, ranks = s.gpu_count, s.world_size
    if s.on_cpu:
        return f"0 (CPU, {fmt(ranks, 'd')} rank(s))"
    if gpus is None:
        return "unknown" + (f" ({ranks} rank(s))" if ranks else "")
    return f"{gpus}" + (f" ({ranks} ranks)" if ranks and ranks != gpus else "")


def gpu_lines(analysis: Analysis, sid, indent: str = "  ") -> list[str]:
    gpus = analysis.rows("gpus", sid)
    hosts = {g.host for g in gpus}
    out = []
    for g in gpus:
        where = f"{g.host} " if len(hosts) > 1 and g.host else ""
        out.append(f"{indent}{where}GPU {fmt(g.gpu, 'd')}: {fmt(g.avg_util, '.1f', '%')} avg util, "
                   f"{fmt(g.peak_util, '.1f', '%')} peak, {fmt(g.avg_memory_pct, '.1f', '%')} avg memory")
    return out


def strategy_lines(s: SessionSummary | None, indent: str = "  ") -> list[str]:
    """How the model was spread over the ranks, with where the logs said so ([] where they do not)."""
    if s is None or not s.strategy_words:
        return []
    return [f"{indent}Strategy: {s.strategy_words}" + (f"  [{s.strategy_from}]" if s.strategy_from else "")]


def session_header(analysis: Analysis, sid, icon: str) -> list[str]:
    s = analysis.scaling.session_summary(sid)
    kind = KIND_WORDS.get(s.kind) if s else None
    return [f"{icon} Session: {sid}" + (f" ({kind})" if kind else ""), f"  GPUs: {gpu_count_text(s)}",
            *strategy_lines(s)]


def session_order(analysis: Analysis, *tables: str) -> list:
    """Sessions in the analysis' order, then any that only a table names."""
    order = [s.session_id for s in analysis.scaling.sessions]
    for t in tables:
        for r in analysis.rows(t):
            if r.session_id not in order:
                order.append(r.session_id)
    return order


def render_verdict(analysis: Analysis) -> str:
    """The verdict's sentences, one per line, under a rule: what every console output opens with."""
    if not analysis.verdict:
        return ""
    return "\n".join(["VERDICT", RULE, *analysis.verdict])
