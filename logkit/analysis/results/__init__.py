"""What the analysis returns: frozen dataclasses by concern (``scaling.py``, ``health.py``,
``performance.py``, ``findings.py``, ``curves.py``), frames with declared columns read as typed
rows (``rows.py``, ``frames.py``), all held by ``Analysis`` (``analysis.py``); and what the live
view shows (``live.py``)."""

from __future__ import annotations

from logkit.analysis.results.analysis import Analysis
from logkit.analysis.results.curves import Curves
from logkit.analysis.results.findings import MAX_EVIDENCE, Finding
from logkit.analysis.results.health import Divergence, Health, LossParity, NanPoint
from logkit.analysis.results.ledger import LedgerRow
from logkit.analysis.results.performance import Mfu, StragglerCall
from logkit.analysis.results.rows import MissingColumns
from logkit.analysis.results.scaling import (
    Comparison,
    Fit,
    Flag,
    Group,
    GroupAverage,
    NotCompared,
    Ratios,
    Scaling,
    SessionSummary,
)
from logkit.analysis.results.values import plain

__all__ = ["MAX_EVIDENCE", "plain", "Ratios", "Flag", "SessionSummary", "Comparison", "Group", "NotCompared", "Fit",
           "GroupAverage", "Scaling", "NanPoint", "Divergence", "Health", "LossParity", "Mfu", "StragglerCall",
           "Finding", "Curves", "Analysis", "MissingColumns", "LedgerRow"]
