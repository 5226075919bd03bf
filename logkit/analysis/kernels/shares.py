"""Shares of a step's wall time, and the judgements made of them, once for every caller (the batch
findings, the verdict, the scaling flags and the live view).

- ``of_step(part, step)``: part / step where the step time is positive (NaN elsewhere), for scalars or
  arrays; a share of a step is of its wall time and never above 1 (a part longer than its step, e.g.
  overlapping gradient buckets added up, counts as the whole step).
- ``comm_bound(share)``: the (exposed) gradient sync takes at least ``COMM_BOUND_SHARE`` of a step.
- ``data_heavy(share)``: data loading takes at least ``DATA_HEAVY`` of a step.
"""

from __future__ import annotations

import numpy as np

from logkit.analysis.thresholds import COMM_BOUND_SHARE, DATA_HEAVY


def of_step(part, step):
    """part / step, clipped to [0, 1]; NaN where the step time is not positive or either is missing."""
    part = np.asarray(part, dtype="float64")
    step = np.asarray(step, dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        share = np.where(step > 0, np.clip(part / step, 0.0, 1.0), np.nan)
    return share if share.ndim else float(share)


def comm_bound(share):
    """Whether a share of step time in (exposed) gradient sync makes a run communication-bound (False where unknown)."""
    share = np.asarray(share, dtype="float64")
    out = np.nan_to_num(share, nan=-1.0) >= COMM_BOUND_SHARE
    return out if out.ndim else bool(out)


def data_heavy(share):
    """Whether a share of step time in data loading is worth advice of its own (False where unknown)."""
    share = np.asarray(share, dtype="float64")
    out = np.nan_to_num(share, nan=-1.0) >= DATA_HEAVY
    return out if out.ndim else bool(out)
