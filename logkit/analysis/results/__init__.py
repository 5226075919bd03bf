"""What the analysis returns: frozen dataclasses, and frames with declared columns (``analysis.py``),
and what the live view shows (``live.py``)."""

from __future__ import annotations

from logkit.analysis.results.analysis import (
    MAX_EVIDENCE,
    Analysis,
    Comparison,
    Curves,
    Divergence,
    Finding,
    Fit,
    Flag,
    Group,
    Health,
    LossParity,
    Mfu,
    NanPoint,
    NotCompared,
    Ratios,
    Scaling,
    SessionSummary,
    plain,
)

__all__ = ["MAX_EVIDENCE", "plain", "Ratios", "Flag", "SessionSummary", "Comparison", "Group", "NotCompared", "Fit",
           "Scaling", "NanPoint", "Divergence", "Health", "LossParity", "Mfu", "Finding", "Curves", "Analysis"]
