"""Which rank, if any, the others wait for: one detector over a metric by rank and step.

Two steps, as in HTA's straggler analysis (a metric per rank, then the detection over it): the
callers compute the metric (``breakdown``: each rank's lateness at the gradient sync per step;
``performance``: each rank's step time per step; the live view: the same over a window of
recent steps), and ``detect`` decides from those samples alone: no Session, no files.

``samples``: one row per (rank, step): ``rank``, ``step``, ``value`` (the metric: larger is later
or slower) and ``step_s`` (the rank's step time at that step). Per rank (``DETECTION_COLUMNS``):

- ``median_s``: the median of the rank's values.
- ``excess_s``: how far that median is above the others: the median itself for a metric measured
  from the earliest rank already (``baseline="zero"``: lateness), else the median - the lowest
  rank median (``baseline="fastest"``: step time).
- ``score``: ``zero``: median / the median step time of all samples; ``fastest``: median / the
  lowest rank median - 1.
- ``steps``: the steps every rank has a value for (with a step number); ``worst_steps``: those in
  which the rank's value is the largest by more than ``ARRIVAL_MARGIN`` of the median step time
  (the step's last arrival, or its slowest rank); ``worst_share`` = worst_steps / steps.
- ``p_value``: the chance that a fair draw (each of the n ranks the worst of a step with
  probability 1/n, whatever the others did) makes the rank the worst in at least worst_steps of
  the steps: the binomial tail, times n (Bonferroni: the candidate is one of n ranks), at most 1.
  Steps where no rank is the worst by the margin count against every rank, so a fair run's
  p-values are conservative.
- ``noise_s``: the run's own noise: the robust standard deviation (``MAD_TO_SD`` x the median
  absolute deviation) across the steps of the per-step median step time over the ranks.

The straggler is the rank with the largest score when all of: score > ``STRAGGLER_SCORE``,
worst_share >= ``STRAGGLER_SHARE``, p_value < ``STRAGGLER_ALPHA``, and excess_s >
``STRAGGLER_NOISE`` x noise_s: it is late or slow in most steps, more often than chance would
make it, and by more than its steps vary on their own. At most one rank; none with one rank.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from logkit.analysis.thresholds import (
    ARRIVAL_MARGIN,
    STRAGGLER_ALPHA,
    STRAGGLER_NOISE,
    STRAGGLER_SCORE,
    STRAGGLER_SHARE,
)

DETECTION_COLUMNS = ["rank", "median_s", "excess_s", "score", "steps", "worst_steps", "worst_share", "p_value",
                     "noise_s", "is_straggler"]
MAD_TO_SD = 1.4826  # the MAD of normal samples x 1.4826 estimates their standard deviation
BASELINES = ("zero", "fastest")


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (exact to float precision, no overflow)."""
    if k <= 0:
        return 1.0
    if k > n:
        return 0.0
    if p <= 0.0 or p >= 1.0:
        return float(p >= 1.0)
    i = np.arange(k, n + 1)
    log_fact = np.concatenate(([0.0], np.cumsum(np.log(np.arange(1, n + 1)))))
    log_terms = log_fact[n] - log_fact[i] - log_fact[n - i] + i * np.log(p) + (n - i) * np.log1p(-p)
    top = log_terms.max()
    return float(min(1.0, np.exp(top) * np.exp(log_terms - top).sum()))


def robust_sd(values) -> float:
    """``MAD_TO_SD`` x the median absolute deviation of the finite ``values`` (NaN without any)."""
    x = np.asarray(values, dtype="float64")
    x = x[np.isfinite(x)]
    if not len(x):
        return float("nan")
    return float(MAD_TO_SD * np.median(np.abs(x - np.median(x))))


def worst_by_margin(values: np.ndarray, margin: float) -> np.ndarray:
    """``values``: ranks x steps. Per step (column), True for the rank with the largest value when
    it exceeds the next largest by more than ``margin``; no rank otherwise (ties, within the margin)."""
    values = np.asarray(values, dtype="float64")
    out = np.zeros(values.shape, dtype=bool)
    if values.ndim != 2 or values.shape[0] < 2 or values.shape[1] == 0:
        return out
    order = np.argsort(-values, axis=0, kind="stable")
    cols = np.arange(values.shape[1])
    top, second = values[order[0], cols], values[order[1], cols]
    hit = (top - second) > margin
    out[order[0][hit], cols[hit]] = True
    return out


def _wide(samples: pd.DataFrame, column: str) -> pd.DataFrame:
    """``column`` as ranks x steps over the steps every rank has a value for (first row of a repeated step)."""
    rows = samples[samples["step"].notna()].drop_duplicates(["rank", "step"])
    wide = rows.pivot(index="rank", columns="step", values=column).reindex(sorted(samples["rank"].unique()))
    return wide.dropna(axis=1)


def margin_of(samples: pd.DataFrame) -> float:
    """``ARRIVAL_MARGIN`` of the median step time of ``samples`` (0 without step times)."""
    step = samples["step_s"].median() if len(samples) else float("nan")
    return ARRIVAL_MARGIN * float(step) if pd.notna(step) else 0.0


def worst_of_steps(samples: pd.DataFrame) -> pd.Series:
    """Per row of ``samples``: whether its rank was its step's worst (``worst_by_margin`` over the
    steps every rank has a value for, margin ``margin_of(samples)``)."""
    if samples.empty:
        return pd.Series(False, index=samples.index, dtype=bool)
    wide = _wide(samples, "value")
    flags = pd.DataFrame(worst_by_margin(wide.to_numpy(), margin_of(samples)), index=wide.index, columns=wide.columns)
    key = pd.MultiIndex.from_arrays([samples["rank"], samples["step"]])
    hit = flags.stack().reindex(key).fillna(False).to_numpy(dtype=bool)
    return pd.Series(hit, index=samples.index, dtype=bool)


def _scores(medians: pd.Series, samples: pd.DataFrame, baseline: str) -> tuple[pd.Series, pd.Series]:
    """(excess_s, score) per rank, as the module doc defines them for ``baseline``."""
    if baseline == "zero":
        step = float(samples["step_s"].median())
        return medians, medians / step if step > 0 else medians * np.nan
    fastest = float(medians.min())
    return medians - fastest, medians / fastest - 1 if fastest > 0 else medians * np.nan


def detect(samples: pd.DataFrame, baseline: str = "zero") -> pd.DataFrame:
    """Per rank of ``samples`` (rank, step, value, step_s): ``DETECTION_COLUMNS``, in rank order,
    with ``is_straggler`` True for at most one rank (see the module doc)."""
    if baseline not in BASELINES:
        raise ValueError(f"baseline must be one of {BASELINES}; got {baseline!r}")
    if samples.empty:
        return pd.DataFrame(columns=DETECTION_COLUMNS)
    medians = samples.groupby("rank", sort=True)["value"].median()
    out = pd.DataFrame({"median_s": medians})
    out["excess_s"], out["score"] = _scores(medians, samples, baseline)
    wide = _wide(samples, "value")
    worst = pd.Series(worst_by_margin(wide.to_numpy(), margin_of(samples)).sum(axis=1), index=wide.index)
    n, m = len(out), wide.shape[1]
    out["steps"] = m
    out["worst_steps"] = worst.reindex(out.index).fillna(0).astype("int64")
    out["worst_share"] = out["worst_steps"] / m if m else np.nan
    out["p_value"] = [min(1.0, n * binomial_tail(int(k), m, 1.0 / n)) if n > 1 and m else np.nan
                      for k in out["worst_steps"]]
    step_times = _wide(samples, "step_s").reindex(columns=wide.columns)
    out["noise_s"] = robust_sd(step_times.median(axis=0).to_numpy()) if m else np.nan
    out["is_straggler"] = False
    top = straggler(out)
    if top is not None:
        out.at[top, "is_straggler"] = True
    out = out.reset_index()
    return out[DETECTION_COLUMNS]


def straggler(per_rank: pd.DataFrame):
    """The index of the straggler among ``per_rank`` (``DETECTION_COLUMNS`` but ``is_straggler``,
    one row per rank), or None: the rule of the module doc."""
    if len(per_rank) < 2 or not per_rank["score"].notna().any():
        return None
    top = per_rank["score"].idxmax()
    row = per_rank.loc[top]
    named = (row["score"] > STRAGGLER_SCORE and row["worst_share"] >= STRAGGLER_SHARE
             and row["p_value"] < STRAGGLER_ALPHA and row["excess_s"] > STRAGGLER_NOISE * row["noise_s"])
    return top if bool(named) else None
