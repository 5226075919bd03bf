"""``--diagnose``: findings, most severe first, each with its evidence (file:line)."""

from __future__ import annotations

from logkit.analysis.results import Analysis
from logkit.report.console.common import RULE, definitions_footer

ICONS = {"critical": "🛑", "error": "❌", "warning": "⚠", "info": "ℹ"}
MAX_SHOWN = 10


def render_diagnose(analysis: Analysis) -> str:
    """Findings as the analysis orders them (most severe first), each with its evidence."""
    findings = analysis.findings
    lines = [f"🩺 DIAGNOSIS: {len(findings)} finding(s)", RULE]
    if not findings:
        lines += ["", "✅ No findings: nothing abnormal in these sessions."]
    for f in findings:
        sev = f.severity.value
        where = f"session {f.session_id}" + (f", rank(s) {', '.join(str(r) for r in f.ranks)}" if f.ranks else "")
        lines += ["", f"{ICONS[sev]} [{sev.upper()}] {f.title} ({where}; {f.kind})"]
        lines += [f"    {line}" for line in str(f.detail or "").splitlines()]
        lines += [f"    evidence: {e}" for e in f.evidence[:MAX_SHOWN]]
        more = f.evidence_total - min(len(f.evidence), MAX_SHOWN)
        if more > 0:
            lines.append(f"    ... and {more} more evidence line(s) (see --json)")
    return "\n".join(lines + definitions_footer(analysis, ["severity"]))
