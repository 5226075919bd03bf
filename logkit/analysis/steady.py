"""Steady state of a run: warm-up steps found and left out, steady throughput, bootstrap samples.

Definitions:

- warm-up: the leading steps before the first step that is itself within ``tol`` of the steady
  reference and opens a window of ``w`` consecutive steps whose median is within it too, where the reference is the median step
  time of the second half of the run, ``tol = max(5% of it, 3 x 1.4826 x MAD)`` over that half,
  and ``w = clip(n // 50, 1, 10)``; never more than half the steps, none when n < 4.
- steady throughput: sum(total_batch_size) / sum(step_time_s) over the steady steps (and steady
  step rate: steady steps / their summed time); none with fewer than ``MIN_STEADY_STEPS`` timed steps.
- bootstrap: the steady steps cut into at most 200 consecutive blocks (keeping the correlation
  of neighbouring steps), blocks drawn with replacement ``n_boot`` times with a fixed seed;
  each draw's throughput = its samples / its time.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

__all__ = ["SteadyState", "MIN_STEADY_STEPS", "warmup_count", "steady_state", "bootstrap_throughput", "main_rank_timed"]

N_BOOT = 1000
MIN_STEADY_STEPS = 4  # fewer timed steps (two sampled text lines): no steady-state figures
MAX_BLOCKS = 200
SEED = 20241206


@dataclass
class SteadyState:
    """Steady-state figures of one session (rank 0's timed steps)."""

    warmup_steps: int = 0
    steady_steps: int = 0
    samples_per_second: float | None = None
    steps_per_second: float | None = None
    batch: np.ndarray | None = None  # per steady step, for the bootstrap
    time: np.ndarray | None = None


def main_rank_timed(steps: pd.DataFrame) -> pd.DataFrame:
    """The lowest rank's rows with a positive step_time_s, ordered by step."""
    if steps.empty:
        return steps
    ranks = steps["rank"].dropna()
    rows = steps[steps["rank"] == ranks.min()] if not ranks.empty else steps
    rows = rows[rows["step_time_s"].notna() & (rows["step_time_s"] > 0)]
    if rows["step"].notna().all() and not rows["step"].is_monotonic_increasing:
        rows = rows.sort_values("step", kind="stable")
    return rows


def warmup_count(times: np.ndarray) -> int:
    """Number of leading warm-up steps in ``times`` (step times in step order); see module doc."""
    t = np.asarray(times, dtype="float64")
    n = len(t)
    if n < 4:
        return 0
    half = t[n // 2:]
    ref = float(np.median(half))
    mad = float(np.median(np.abs(half - ref)))
    tol = max(0.05 * ref, 3 * 1.4826 * mad)
    w = int(min(10, max(1, n // 50)))
    head = t[: n // 2 + w]
    # median of t[i:i+w] for every i, vectorised over a strided view
    windows = np.lib.stride_tricks.sliding_window_view(head, w)
    med = np.median(windows, axis=1) if w > 1 else windows[:, 0]
    ok = np.flatnonzero((med <= ref + tol) & (head[: len(med)] <= ref + tol))
    first = int(ok[0]) if len(ok) else n // 2
    return min(first, n // 2)


def steady_state(session, default_batch: int | None = None) -> SteadyState:
    """Warm-up and steady throughput of ``session`` (its lowest rank's timed steps)."""
    rows = main_rank_timed(session.steps)
    if rows.empty:
        return SteadyState()
    times = rows["step_time_s"].to_numpy(dtype="float64")
    batch = rows["total_batch_size"].astype("Float64")
    if default_batch is not None:
        batch = batch.fillna(default_batch)
    if len(times) < MIN_STEADY_STEPS:
        return SteadyState()
    k = warmup_count(times)
    rate = float((len(times) - k) / times[k:].sum())
    if batch.isna().any():
        return SteadyState(warmup_steps=k, steady_steps=len(times) - k, steps_per_second=rate)
    batch = batch.to_numpy(dtype="float64")
    b, t = batch[k:], times[k:]
    return SteadyState(warmup_steps=k, steady_steps=len(t), samples_per_second=float(b.sum() / t.sum()),
                       steps_per_second=rate, batch=b, time=t)


def bootstrap_throughput(state: SteadyState, n_boot: int = N_BOOT, seed: int = SEED) -> np.ndarray | None:
    """``n_boot`` bootstrap draws of the steady throughput (block bootstrap; see module doc)."""
    if state.time is None or len(state.time) < 2:
        return None
    n = len(state.time)
    m = min(n, MAX_BLOCKS)
    starts = (np.arange(m) * n) // m
    b = np.add.reduceat(state.batch, starts)
    t = np.add.reduceat(state.time, starts)
    idx = np.random.default_rng(seed).integers(0, m, size=(n_boot, m))
    return b[idx].sum(axis=1) / t[idx].sum(axis=1)
