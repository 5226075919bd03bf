"""The result frames of ``Analysis`` and the row type of each, made from the columns declared where
the frame is made (the analysis module that computes it). Renderers read a frame through
``Analysis.rows(name)`` (typed rows) or ``Analysis.frame(name)`` (the frame, its declared columns
checked); neither lets a renamed column through.

    >>> ROWS["gpus"].COLUMNS[:4]
    ('session_id', 'host', 'gpu', 'name')
    >>> ROWS["gpus"]().avg_util is None
    True
"""

from __future__ import annotations

from logkit.analysis.kernels.breakdown import ARRIVAL_COLUMNS, BREAKDOWN_COLUMNS
from logkit.analysis.kernels.communication import COMM_COLUMNS, PEAK_COLUMNS, RUN_LINK_COLUMNS
from logkit.analysis.kernels.counterfactual import COUNTERFACTUAL_COLUMNS
from logkit.analysis.kernels.diagnostics import DIAGNOSTIC_COLUMNS
from logkit.analysis.kernels.forecast import FORECAST_COLUMNS
from logkit.analysis.kernels.nccl_sweep import NCCL_TESTS_COLUMNS
from logkit.analysis.kernels.performance import GPU_COLUMNS, STEP_COLUMNS
from logkit.analysis.results.rows import row_type

__all__ = ["ROWS", "CommRow", "NcclTestsRow", "PeakRow", "LinkRow", "StepRow", "ArrivalRow", "BreakdownRow", "GpuRow",
           "DiagnosticRow", "ForecastRow", "CounterfactualRow"]

CommRow = row_type("CommRow", COMM_COLUMNS, __name__)  # communication: per session, rank and op
NcclTestsRow = row_type("NcclTestsRow", NCCL_TESTS_COLUMNS, __name__)  # nccl_tests: per op and placement
PeakRow = row_type("PeakRow", PEAK_COLUMNS, __name__)  # communication_peaks: per link
LinkRow = row_type("LinkRow", RUN_LINK_COLUMNS, __name__)  # run_links: per link the sessions were judged against
StepRow = row_type("StepRow", STEP_COLUMNS, __name__)  # performance: step-time spread per rank
ArrivalRow = row_type("ArrivalRow", ARRIVAL_COLUMNS, __name__)  # stragglers: per rank
BreakdownRow = row_type("BreakdownRow", BREAKDOWN_COLUMNS, __name__)  # step_breakdown: per rank
GpuRow = row_type("GpuRow", GPU_COLUMNS, __name__)  # gpus: per GPU
DiagnosticRow = row_type("DiagnosticRow", DIAGNOSTIC_COLUMNS, __name__)  # diagnostics: per line not read
# issue 27: the forecast per group and size; the counterfactual per group (its run, then the forecast's sizes)
ForecastRow = row_type("ForecastRow", FORECAST_COLUMNS, __name__)
CounterfactualRow = row_type("CounterfactualRow", COUNTERFACTUAL_COLUMNS, __name__)

# Analysis field -> the row type of its frame
ROWS: dict[str, type] = {
    "communication": CommRow, "nccl_tests": NcclTestsRow, "communication_peaks": PeakRow, "run_links": LinkRow,
    "performance": StepRow, "stragglers": ArrivalRow, "step_breakdown": BreakdownRow, "gpus": GpuRow, "diagnostics": DiagnosticRow,
    "forecast": ForecastRow, "counterfactual": CounterfactualRow,
}
