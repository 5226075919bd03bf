"""Performance: step-time spread per rank, slow steps, stragglers, per-GPU utilization.

Definitions (``definitions.PERFORMANCE``):

- ``step_p50_s / step_p95_s / step_max_s / step_mean_s`` (and the quartiles and 5th percentile
  the box plots draw): over the rank's steps with a positive step_time_s (warm-up included).
- ``slow_steps``: steps after the rank's warm-up (``throughput.warmup_count`` over its step times in
  step order) whose step_time_s exceeds ``SLOW_FACTOR`` x the rank's median. First steps are slow on
  every healthy run (allocator, kernels' first launch, autotuning); counting them warned on healthy runs.
- ``data_share``: sum(data_time_s) / sum(step_time_s) over the rank's steps that logged both.
- ``samples_per_s``: the rank's samples / its time (``throughput.throughput``: sum of the steps'
  total_batch_size, a step without one counting its logged samples/s x its time, / sum of their
  times); unknown when a step has neither.
- stragglers: the detector of ``kernels/straggler.py`` over each rank's step time per step
  (``baseline="fastest"``): ``vs_fastest`` = the rank's median step time / the fastest rank's
  median; ``score`` = vs_fastest - 1; ``p_value`` = the chance a fair draw (1/n per step) makes
  the rank the slowest of a step (by ``ARRIVAL_MARGIN`` of the median step) as often as it was,
  times n; ``is_straggler``: the slowest rank, with score > ``STRAGGLER_SCORE``, the slowest in at
  least ``STRAGGLER_SHARE`` of the steps every rank timed, p_value < ``STRAGGLER_ALPHA``, and its
  median above the fastest's by more than ``STRAGGLER_NOISE`` x the robust spread of step times.
- ``recent_slowdown``: the median of a rank's last ``SLOWDOWN_RECENT`` step times over the median of the
  steps before them (the live view's window; at least ``SLOWDOWN_MIN_EARLIER`` of them).
- GPUs: ``avg_util / peak_util`` mean / max of utilization_pct over the snapshots;
  ``avg_memory_pct`` mean of memory_usage_pct, or of memory_used_mb / memory_total_mb x 100
  where that is missing; without snapshots, summary.json's gpus[] where it carries figures.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from logkit.analysis.kernels.straggler import detect
from logkit.analysis.kernels.throughput import throughput, warmup_count
from logkit.analysis.thresholds import (
    BUSY_UTIL,
    IDLE_UTIL,
    SLOW_FACTOR,
    SLOWDOWN_MIN_EARLIER,
    SLOWDOWN_RECENT,
)
from logkit.schema.values import to_float

STEP_COLUMNS = ["session_id", "rank", "steps", "step_p50_s", "step_p95_s", "step_max_s", "step_mean_s",
                "slow_steps", "slow_threshold_s", "data_share", "step_p5_s", "step_p25_s", "step_p75_s",
                "samples_per_s"]
STRAGGLER_COLUMNS = ["session_id", "rank", "median_step_s", "vs_fastest", "score", "is_straggler", "p_value"]
SAMPLE_COLUMNS = ["session_id", "rank", "step", "step_time_s"]
GPU_COLUMNS = ["session_id", "host", "gpu", "name", "avg_util", "peak_util", "avg_memory_pct", "samples", "source"]


def step_stats(session) -> pd.DataFrame:
    """One row per rank of ``session``: columns ``STEP_COLUMNS`` (see module doc)."""
    rows = session.timed_steps()
    if rows.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    rank = rows["rank"].fillna(0).to_numpy(dtype="int64")
    t = rows["step_time_s"].to_numpy(dtype="float64")
    frame = pd.DataFrame({"rank": rank, "t": t, "d": rows["data_time_s"].to_numpy(dtype="float64"),
                          "b": rows["total_batch_size"].astype("float64").fillna(
                              rows["samples_per_s"].astype("float64") * rows["step_time_s"]).to_numpy()})
    g = frame.groupby("rank", sort=True)["t"]
    q = g.quantile([0.05, 0.25, 0.75]).unstack()
    out = pd.DataFrame({"steps": g.size(), "step_p50_s": g.median(), "step_p95_s": g.quantile(0.95),
                        "step_max_s": g.max(), "step_mean_s": g.mean()})
    med = g.transform("median").to_numpy()
    frame["slow"] = (t > SLOW_FACTOR * med) & past_warmup(rows).to_numpy()
    out["slow_steps"] = frame.groupby("rank", sort=True)["slow"].sum().astype("int64")
    out["slow_threshold_s"] = SLOW_FACTOR * out["step_p50_s"]
    both = frame[frame["d"].notna()]
    dg = both.groupby("rank", sort=True)
    out["data_share"] = (dg["d"].sum() / dg["t"].sum()).reindex(out.index)
    out["step_p5_s"], out["step_p25_s"], out["step_p75_s"] = q[0.05], q[0.25], q[0.75]
    # each rank's rows as groupby gives them (stable), without a frame per rank (thousands of tiny ranks)
    order = np.argsort(rank, kind="stable")
    ranks, batch, times = rank[order], frame["b"].to_numpy()[order], t[order]
    cuts = np.flatnonzero(np.diff(ranks)) + 1
    rates = {int(ranks[a]): throughput(pd.Series(batch[a:b]), times[a:b])
             for a, b in zip(np.r_[0, cuts].tolist(), np.r_[cuts, len(ranks)].tolist(), strict=True)}
    out["samples_per_s"] = pd.Series(rates, dtype="object").reindex(out.index).astype("float64")
    out = out.reset_index()
    out.insert(0, "session_id", session.meta.session_id)
    return out[STEP_COLUMNS]


def recent_slowdown(step_times, recent: int = SLOWDOWN_RECENT,
                    min_earlier: int = SLOWDOWN_MIN_EARLIER) -> tuple[float, float] | None:
    """(the median of the last ``recent`` of ``step_times``, the median of those before them), oldest
    first, positive times only; None with fewer than ``recent + min_earlier`` of them."""
    t = np.asarray(step_times, dtype="float64")
    t = t[t > 0]
    if len(t) < recent + min_earlier:
        return None
    return float(np.median(t[-recent:])), float(np.median(t[:-recent]))


def past_warmup(rows: pd.DataFrame) -> pd.Series:
    """For each of ``rows`` (timed steps), whether it comes after its rank's warm-up steps."""
    rank = rows["rank"].fillna(0)
    order = rows.assign(_r=rank).sort_values(["_r", "step"], kind="stable")
    position = order.groupby("_r", sort=False).cumcount()
    warm = order.groupby("_r", sort=False)["step_time_s"].transform(
        lambda t: warmup_count(t.to_numpy(dtype="float64")))
    return (position >= warm).reindex(rows.index)


def slow_step_list(session, limit: int = 10) -> list[dict]:
    """The slowest steps after warm-up above the slow-step threshold: [{rank, step, step_time_s, x_median}]."""
    rows = session.timed_steps()
    if rows.empty:
        return []
    rank = rows["rank"].fillna(0)
    med = rows["step_time_s"].groupby(rank).transform("median")
    ratio = rows["step_time_s"] / med
    hit = rows.assign(x_median=ratio)[(ratio > SLOW_FACTOR) & past_warmup(rows)].nlargest(limit, "x_median")
    return [{"rank": int(r) if pd.notna(r) else None, "step": int(s) if pd.notna(s) else None,
             "step_time_s": float(t), "x_median": float(x)}
            for r, s, t, x in zip(hit["rank"], hit["step"], hit["step_time_s"], hit["x_median"], strict=True)]


def step_samples(session) -> pd.DataFrame:
    """What ``stragglers`` judges: per timed step of ``session`` (``SAMPLE_COLUMNS``) its session,
    rank (0 where none is logged, as in ``step_stats``), step and step time."""
    rows = session.timed_steps()
    return pd.DataFrame({"session_id": session.meta.session_id,
                         "rank": rows["rank"].fillna(0).to_numpy(dtype="int64"),
                         "step": rows["step"].to_numpy(dtype="float64"),
                         "step_time_s": rows["step_time_s"].to_numpy(dtype="float64")}, columns=SAMPLE_COLUMNS)


def stragglers(samples: pd.DataFrame) -> pd.DataFrame:
    """Per session and rank of ``samples`` (``step_samples`` rows of any number of sessions, a
    session without an id on its own): ``STRAGGLER_COLUMNS``, sessions in the order given."""
    if samples.empty:
        return pd.DataFrame(columns=STRAGGLER_COLUMNS)
    frames = []
    for _, rows in samples.groupby(samples["session_id"].fillna(""), sort=False):
        t = rows["step_time_s"]
        found = detect(pd.DataFrame({"rank": rows["rank"], "step": rows["step"], "value": t, "step_s": t}),
                       baseline="fastest")
        found.insert(0, "session_id", rows["session_id"].iloc[0])
        found["vs_fastest"] = found["median_s"] / found["median_s"].min()
        frames.append(found.rename(columns={"median_s": "median_step_s"}))
    out = pd.concat(frames, ignore_index=True)
    out["is_straggler"] = out["is_straggler"].astype(bool)
    return out[STRAGGLER_COLUMNS]


def _from_snapshots(frame: pd.DataFrame, names: dict) -> list[dict]:
    frame = frame[frame["gpu"].notna()].copy()
    derived = frame["memory_used_mb"] / frame["memory_total_mb"].where(frame["memory_total_mb"] > 0) * 100
    frame["mem_pct"] = frame["memory_usage_pct"].fillna(derived)
    out = []
    for (host, gpu), g in frame.groupby(["host", "gpu"], sort=True, dropna=False):
        out.append({"host": host, "gpu": int(gpu), "name": names.get(int(gpu)),
                    "avg_util": to_float(g["utilization_pct"].mean(), finite=True),
                    "peak_util": to_float(g["utilization_pct"].max(), finite=True),
                    "avg_memory_pct": to_float(g["mem_pct"].mean(), finite=True),
                    "samples": int(len(g)), "source": "gpu_snapshot"})
    return out


def _from_summary(session) -> list[dict]:
    summary = session.meta.summary
    gpus = summary.get("gpus") if isinstance(summary, dict) else None
    out = []
    for g in gpus if isinstance(gpus, list) else []:
        if not isinstance(g, dict):
            continue
        figures = {k: to_float(g.get(k), finite=True) for k in ("avg_util", "peak_util", "avg_memory_pct")}
        if all(v is None for v in figures.values()):
            continue  # the summary names the device but measured nothing on it
        out.append({"host": "", "gpu": g.get("index"), "name": g.get("name"), **figures, "samples": None,
                    "source": "summary.json"})
    return out


def gpu_table(session) -> pd.DataFrame:
    """Per GPU of ``session``: ``GPU_COLUMNS`` (from the gpu frame, else summary.json's gpus)."""
    names = {g.get("index"): g.get("name") for g in session.meta.gpus or [] if isinstance(g, dict)}
    frame = session.gpu
    has = not frame.empty and frame["gpu"].notna().any()
    rows = _from_snapshots(frame, names) if has else _from_summary(session)
    if not rows:
        return pd.DataFrame(columns=GPU_COLUMNS)
    out = pd.DataFrame(rows)
    if "gpu_name" in frame.columns and out["name"].isna().any():  # GPU captures name their devices
        known = frame.dropna(subset=["gpu", "gpu_name"]).groupby("gpu")["gpu_name"].first()
        out["name"] = out["name"].fillna(out["gpu"].map(known))
    out.insert(0, "session_id", session.meta.session_id)
    return out.reindex(columns=GPU_COLUMNS)


def busy_gpu(gpus: pd.DataFrame) -> dict | None:
    """One GPU busy (avg util >= 50%) while every other is idle (<= 10%): {busy, idle}; else None."""
    g = gpus.dropna(subset=["avg_util"])
    if len(g) < 2:
        return None
    busy = g[g["avg_util"] >= BUSY_UTIL]
    idle = g[g["avg_util"] <= IDLE_UTIL]
    if len(busy) == 1 and len(idle) == len(g) - 1:
        return {"busy": int(busy["gpu"].iloc[0]), "idle": [int(x) for x in idle["gpu"]],
                "busy_util": float(busy["avg_util"].iloc[0])}
    return None
