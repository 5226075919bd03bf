"""What the plots draw: series per session (``kernels/curves.py`` makes them), each a frame whose
columns are declared here (``CURVE_COLUMNS``)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

from logkit.analysis.results.rows import declared
from logkit.schema.vocab import LossAxis

__all__ = ["Curves", "CURVE_COLUMNS", "LOSS_COLUMNS", "EVAL_LOSS_COLUMNS", "THROUGHPUT_COLUMNS",
           "GPU_UTILIZATION_COLUMNS", "BANDWIDTH_COLUMNS"]

LOSS_COLUMNS = ("session_id", "x", "loss")
EVAL_LOSS_COLUMNS = ("session_id", "x", "value")
THROUGHPUT_COLUMNS = ("session_id", "step", "samples_per_s")
GPU_UTILIZATION_COLUMNS = ("session_id", "host", "gpu", "time_s", "utilization_pct")
BANDWIDTH_COLUMNS = ("session_id", "op", "size_mb", "busbw_mb_s", "records")
CURVE_COLUMNS = {"loss": LOSS_COLUMNS, "eval_loss": EVAL_LOSS_COLUMNS, "throughput": THROUGHPUT_COLUMNS,
                 "gpu_utilization": GPU_UTILIZATION_COLUMNS, "bandwidth": BANDWIDTH_COLUMNS}


def _frame(columns) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})


@dataclass(frozen=True)
class Curves:
    """Series per session, ready to draw (``curves.py`` says how each is made).

    ``loss``: session_id, x, loss (the lowest rank's finite losses, x on ``loss_axis``);
    ``eval_loss``: session_id, x, value; ``throughput``: session_id, step, samples_per_s;
    ``gpu_utilization``: session_id, host, gpu, time_s, utilization_pct; ``bandwidth``:
    session_id, op, size_mb, busbw_mb_s (median per size), records.
    """

    loss: pd.DataFrame = field(default_factory=lambda: _frame(LOSS_COLUMNS))
    eval_loss: pd.DataFrame = field(default_factory=lambda: _frame(EVAL_LOSS_COLUMNS))
    loss_axis: str = LossAxis.STEP
    throughput: pd.DataFrame = field(default_factory=lambda: _frame(THROUGHPUT_COLUMNS))
    gpu_utilization: pd.DataFrame = field(default_factory=lambda: _frame(GPU_UTILIZATION_COLUMNS))
    bandwidth: pd.DataFrame = field(default_factory=lambda: _frame(BANDWIDTH_COLUMNS))

    def frame(self, name: str) -> pd.DataFrame:
        """The series ``name`` with its declared columns (``rows.MissingColumns`` when one is missing)."""
        return declared(getattr(self, name), CURVE_COLUMNS[name], f"Curves.{name}")
