"""Throughput: of one step, of a run's steps, of its steady state (warm-up found and left out), and
bootstrap draws of the steady throughput.

Definitions:

- throughput of a set of steps: their samples / their time (``schema.values.per_second``) —
  sum(total_batch_size) / sum(step_time_s), never a mean of per-step rates;
- throughput of one step: its logged samples_per_s, else total_batch_size / step_time_s;
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

from logkit.analysis.thresholds import MAX_BLOCKS, MIN_STEADY_STEPS, N_BOOT, WARMUP_TOLERANCE
from logkit.schema.values import per_second

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


def throughput(batch, time) -> float | None:
    """Samples per second of a set of steps: sum of their batches / sum of their times (None when a
    batch is unknown or the time is not positive)."""
    batch = pd.Series(batch, dtype="Float64") if not isinstance(batch, pd.Series) else batch.astype("Float64")
    if batch.isna().any():
        return None
    return per_second(float(batch.sum()), float(np.sum(time)))


def step_throughput(steps: pd.DataFrame) -> pd.Series:
    """Samples per second of each step: the logged samples_per_s, else total_batch_size / step_time_s."""
    derived = steps["total_batch_size"].astype("float64") / steps["step_time_s"].where(steps["step_time_s"] > 0)
    return steps["samples_per_s"].astype("float64").fillna(derived)


def warmup_count(times: np.ndarray) -> int:
    """Number of leading warm-up steps in ``times`` (step times in step order); see module doc."""
    t = np.asarray(times, dtype="float64")
    n = len(t)
    if n < 4:
        return 0
    half = t[n // 2:]
    ref = float(np.median(half))
    mad = float(np.median(np.abs(half - ref)))
    tol = max(WARMUP_TOLERANCE * ref, 3 * 1.4826 * mad)
    w = int(min(10, max(1, n // 50)))
    head = t[: n // 2 + w]
    # median of t[i:i+w] for every i, vectorised over a strided view
    windows = np.lib.stride_tricks.sliding_window_view(head, w)
    med = np.median(windows, axis=1) if w > 1 else windows[:, 0]
    ok = np.flatnonzero((med <= ref + tol) & (head[: len(med)] <= ref + tol))
    first = int(ok[0]) if len(ok) else n // 2
    return min(first, n // 2)


def steady_state(session, default_batch: int | None = None) -> SteadyState:
    """Warm-up and steady throughput of ``session`` (its lowest rank's timed steps, by step)."""
    rows = session.timed_steps(main_rank=True)
    if rows.empty:
        return SteadyState()
    times = rows["step_time_s"].to_numpy(dtype="float64")
    batch = rows["total_batch_size"].astype("Float64")
    if default_batch is not None:
        batch = batch.fillna(default_batch)
    if len(times) < MIN_STEADY_STEPS:
        return SteadyState()
    k = warmup_count(times)
    rate = per_second(len(times) - k, times[k:].sum())
    if batch.isna().any():
        return SteadyState(warmup_steps=k, steady_steps=len(times) - k, steps_per_second=rate)
    batch = batch.to_numpy(dtype="float64")
    b, t = batch[k:], times[k:]
    return SteadyState(warmup_steps=k, steady_steps=len(t), samples_per_second=throughput(b, t),
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
