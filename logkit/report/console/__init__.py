"""Console text of an analysis: the verdict it opens with, the comparison (``--compare``), communication (``--communication``),
performance, stragglers and GPUs (``--performance``), the diagnosis (``--diagnose``), and where the
hours went (``--ledger``). Each block
ends with the definitions of the figures it shows. Renderers read ``Analysis`` fields; they compute
nothing beyond unit changes (bytes to MB, fractions to percent) and never parse."""

from __future__ import annotations

from logkit.report.console.common import render_verdict
from logkit.report.console.communication import render_communication
from logkit.report.console.compare import render_compare
from logkit.report.console.diagnose import render_diagnose
from logkit.report.console.forecast import render_forecast
from logkit.report.console.ledger import render_ledger
from logkit.report.console.performance import render_performance

__all__ = ["render_verdict", "render_compare", "render_communication", "render_performance", "render_diagnose",
           "render_ledger", "render_forecast"]
