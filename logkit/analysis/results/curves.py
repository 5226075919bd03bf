"""What the plots draw: series per session (``kernels/curves.py`` makes them)."""

from __future__ import annotations

from dataclasses import dataclass, field

import pandas as pd

__all__ = ["Curves"]


def _frame(*columns: str) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})


@dataclass(frozen=True)
class Curves:
    """Series per session, ready to draw (``curves.py`` says how each is made).

    ``loss``: session_id, x, loss (the lowest rank's finite losses, x on ``loss_axis``);
    ``eval_loss``: session_id, x, value; ``throughput``: session_id, step, samples_per_s;
    ``gpu_utilization``: session_id, host, gpu, time_s, utilization_pct; ``bandwidth``:
    session_id, op, size_mb, busbw_mb_s (median per size), records.
    """

    loss: pd.DataFrame = field(default_factory=lambda: _frame("session_id", "x", "loss"))
    eval_loss: pd.DataFrame = field(default_factory=lambda: _frame("session_id", "x", "value"))
    loss_axis: str = "step"
    throughput: pd.DataFrame = field(default_factory=lambda: _frame("session_id", "step", "samples_per_s"))
    gpu_utilization: pd.DataFrame = field(
        default_factory=lambda: _frame("session_id", "host", "gpu", "time_s", "utilization_pct"))
    bandwidth: pd.DataFrame = field(
        default_factory=lambda: _frame("session_id", "op", "size_mb", "busbw_mb_s", "records"))

