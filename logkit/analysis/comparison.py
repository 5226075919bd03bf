"""The comparison bundle every renderer takes: session summaries, comparisons, GPU stats, diagnostics."""

from __future__ import annotations

from dataclasses import dataclass, field

from logkit.analysis.gpu import gpu_stats
from logkit.analysis.scaling import DEFINITIONS, compare, pick_baseline, session_summary

__all__ = ["ComparisonReport", "comparison_report"]


@dataclass
class ComparisonReport:
    """Results for a set of sessions; ``to_dict()`` is the JSON document (sessions, comparisons)."""

    sessions: list[dict] = field(default_factory=list)
    comparisons: list[dict] = field(default_factory=list)
    baseline: str | None = None
    gpus: dict[str, list[dict]] = field(default_factory=dict)  # session_id -> gpu_stats rows
    meta: dict[str, dict] = field(default_factory=dict)  # session_id -> status, start_time, ...
    diagnostics: list[dict] = field(default_factory=list)  # file, line, reason, text, session_id
    definitions: dict[str, str] = field(default_factory=lambda: dict(DEFINITIONS))

    def to_dict(self) -> dict:
        return {"sessions": self.sessions, "comparisons": self.comparisons}


def _plain(value):
    # pandas' <NA> and numpy scalars out of frames become plain Python values for renderers.
    if value is None:
        return None
    try:
        import pandas as pd

        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value.item() if hasattr(value, "item") else value


def comparison_report(sessions: list) -> ComparisonReport:
    """Summaries of ``sessions`` (in the order given), each compared with the baseline."""
    report = ComparisonReport(
        sessions=[session_summary(s) for s in sessions],
        comparisons=compare(sessions),
    )
    index = pick_baseline(sessions, report.sessions)
    report.baseline = report.sessions[index]["session_id"] if index is not None else None
    for s in sessions:
        sid = s.meta.get("session_id")
        report.gpus[sid] = gpu_stats(s)
        report.meta[sid] = {k: s.meta.get(k) for k in ("status", "start_time", "end_time", "model", "backend",
                                                       "folder", "ranks_found", "duration_from")}
        for row in s.diagnostics.to_dict("records"):
            report.diagnostics.append({k: _plain(v) for k, v in row.items()} | {"session_id": sid})
    return report
