"""Performance: step-time spread per rank, slow steps, stragglers, per-GPU utilization, MFU.

Definitions (``PERFORMANCE_DEFINITIONS``):

- ``step_p50_s / step_p95_s / step_max_s / step_mean_s``: over the rank's steps with a positive
  step_time_s (warm-up included).
- ``slow_steps``: steps whose step_time_s exceeds ``SLOW_FACTOR`` (3) x the rank's median.
- ``data_share``: sum(data_time_s) / sum(step_time_s) over the rank's steps that logged both.
- stragglers: ``vs_fastest`` = the rank's median step time / the fastest rank's median;
  ``score`` = vs_fastest - 1; ``is_straggler`` = score > 0.05 and the rank is the slowest.
- GPUs: ``avg_util / peak_util`` mean / max utilization_pct over snapshots; ``avg_memory_pct``
  mean memory used / total x 100 (``gpu.gpu_stats``).
- MFU (LoRA-aware): FLOPs per token = 2 N (forward) + 2 N (activation gradients) + 2 N_trainable
  (weight gradients) = 4 N + 2 N_trainable (6 N when every weight trains; attention's
  sequence-length term is left out); achieved FLOP/s = FLOPs per token x tokens/s (the whole
  job's, steady steps) / number of GPUs (world size); MFU = achieved / the GPU's dense BF16 peak.
"""

from __future__ import annotations

import math

import pandas as pd

from logkit.analysis.gpu import gpu_stats
from logkit.analysis.peaks import peak_tflops_for
from logkit.analysis.steady import main_rank_timed, warmup_count

__all__ = ["PERFORMANCE_DEFINITIONS", "SLOW_FACTOR", "STRAGGLER_SCORE", "step_stats", "stragglers",
           "gpu_table", "busy_gpu", "slow_step_list", "model_parameters", "gpu_model", "mfu"]

SLOW_FACTOR = 3.0
STRAGGLER_SCORE = 0.05
BUSY_UTIL, IDLE_UTIL = 50.0, 10.0

STEP_COLUMNS = ["session_id", "rank", "steps", "step_p50_s", "step_p95_s", "step_max_s", "step_mean_s",
                "slow_steps", "slow_threshold_s", "data_share"]
STRAGGLER_COLUMNS = ["session_id", "rank", "median_step_s", "vs_fastest", "score", "is_straggler"]
GPU_COLUMNS = ["session_id", "host", "gpu", "name", "avg_util", "peak_util", "avg_memory_pct", "samples", "source"]

PERFORMANCE_DEFINITIONS: dict[str, str] = {
    "step_p50_s / p95 / max": "median / 95th percentile / max of step_time_s over the rank's steps",
    "slow_steps": f"steps with step_time_s > {SLOW_FACTOR:g} x the rank's median step time",
    "data_share": "sum of data_time_s / sum of step_time_s over the rank's steps that logged both",
    "vs_fastest": "the rank's median step time / the fastest rank's median step time",
    "score": "vs_fastest - 1; a straggler is the slowest rank with score > "
             f"{STRAGGLER_SCORE:g}",
    "avg_util / peak_util": "mean / max of utilization_pct over the GPU snapshots",
    "avg_memory_pct": "mean of memory used / memory total x 100 over the snapshots",
    "mfu": "achieved FLOP/s per GPU / the GPU's dense BF16 peak; FLOPs per token = 4 N + 2 N_trainable "
           "(forward 2N, activation gradients 2N, weight gradients 2 N_trainable: LoRA-aware), "
           "tokens/s of the whole job over steady steps, divided among world_size GPUs",
}


def _timed(session) -> pd.DataFrame:
    steps = session.steps
    if steps.empty:
        return steps
    return steps[steps["step_time_s"].notna() & (steps["step_time_s"] > 0)]


def step_stats(session) -> pd.DataFrame:
    """One row per rank of ``session``: columns ``STEP_COLUMNS`` (see module doc)."""
    rows = _timed(session)
    if rows.empty:
        return pd.DataFrame(columns=STEP_COLUMNS)
    rank = rows["rank"].fillna(0).to_numpy(dtype="int64")
    t = rows["step_time_s"].to_numpy(dtype="float64")
    frame = pd.DataFrame({"rank": rank, "t": t, "d": rows["data_time_s"].to_numpy(dtype="float64")})
    g = frame.groupby("rank", sort=True)["t"]
    out = pd.DataFrame({"steps": g.size(), "step_p50_s": g.median(), "step_p95_s": g.quantile(0.95),
                        "step_max_s": g.max(), "step_mean_s": g.mean()})
    med = g.transform("median").to_numpy()
    frame["slow"] = t > SLOW_FACTOR * med
    out["slow_steps"] = frame.groupby("rank", sort=True)["slow"].sum().astype("int64")
    out["slow_threshold_s"] = SLOW_FACTOR * out["step_p50_s"]
    both = frame[frame["d"].notna()]
    dg = both.groupby("rank", sort=True)
    out["data_share"] = (dg["d"].sum() / dg["t"].sum()).reindex(out.index)
    out = out.reset_index()
    out.insert(0, "session_id", session.meta.get("session_id"))
    return out[STEP_COLUMNS]


def slow_step_list(session, limit: int = 10) -> list[dict]:
    """The slowest steps above the slow-step threshold: [{rank, step, step_time_s, x_median}]."""
    rows = _timed(session)
    if rows.empty:
        return []
    rank = rows["rank"].fillna(0)
    med = rows["step_time_s"].groupby(rank).transform("median")
    ratio = rows["step_time_s"] / med
    hit = rows.assign(x_median=ratio)[ratio > SLOW_FACTOR].nlargest(limit, "x_median")
    return [{"rank": int(r) if pd.notna(r) else None, "step": int(s) if pd.notna(s) else None,
             "step_time_s": float(t), "x_median": float(x)}
            for r, s, t, x in zip(hit["rank"], hit["step"], hit["step_time_s"], hit["x_median"], strict=True)]


def stragglers(stats: pd.DataFrame) -> pd.DataFrame:
    """Per rank from ``step_stats`` rows (any number of sessions): ``STRAGGLER_COLUMNS``."""
    if stats.empty:
        return pd.DataFrame(columns=STRAGGLER_COLUMNS)
    out = stats[["session_id", "rank", "step_p50_s"]].rename(columns={"step_p50_s": "median_step_s"})
    key = out["session_id"].fillna("")
    fastest = out.groupby(key)["median_step_s"].transform("min")
    slowest = out.groupby(key)["median_step_s"].transform("max")
    nranks = out.groupby(key)["rank"].transform("size")
    out = out.assign(vs_fastest=out["median_step_s"] / fastest)
    out["score"] = out["vs_fastest"] - 1
    out["is_straggler"] = (out["score"] > STRAGGLER_SCORE) & (out["median_step_s"] == slowest) & (nranks > 1)
    return out[STRAGGLER_COLUMNS].reset_index(drop=True)


def gpu_table(session) -> pd.DataFrame:
    """Per GPU of ``session``: ``GPU_COLUMNS`` (from the gpu frame, else summary.json's gpus)."""
    rows = gpu_stats(session)
    if not rows:
        return pd.DataFrame(columns=GPU_COLUMNS)
    out = pd.DataFrame(rows)
    frame = session.gpu
    if "gpu_name" in frame.columns and out["name"].isna().any():  # GPU captures name their devices
        names = frame.dropna(subset=["gpu", "gpu_name"]).groupby("gpu")["gpu_name"].first()
        out["name"] = out["name"].fillna(out["gpu"].map(names))
    out.insert(0, "session_id", session.meta.get("session_id"))
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


def _num(v) -> float | None:
    try:
        v = float(v)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def model_parameters(session) -> tuple[float | None, float | None, str]:
    """(parameters_total, parameters_trainable, where from): meta's model_info / parameters_*, else
    the model_info event's columns when ingest keeps them."""
    meta = session.meta
    info = meta.get("model_info") if isinstance(meta.get("model_info"), dict) else {}
    for src, get in (("meta.model_info", info.get), ("meta", meta.get)):
        total = _num(get("parameters_total"))
        if total:
            return total, _num(get("parameters_trainable")), src
    ev = session.events
    if "parameters_total" in ev.columns and not ev.empty:
        hit = ev[(ev["kind"] == "model_info") & ev["parameters_total"].notna()]
        if not hit.empty:
            row = hit.iloc[0]
            trainable = _num(row["parameters_trainable"]) if "parameters_trainable" in hit.columns else None
            return _num(row["parameters_total"]), trainable, "model_info event"
    return None, None, "not logged"


def gpu_model(session) -> str | None:
    """The GPU's name: session_start's gpus, summary.json's gpus, or the gpu frame's gpu_name."""
    for g in session.meta.get("gpus") or []:
        if isinstance(g, dict) and g.get("name"):
            return str(g["name"])
    doc = session.meta.get("summary")
    for g in (doc.get("gpus") or []) if isinstance(doc, dict) else []:
        if isinstance(g, dict) and g.get("name"):
            return str(g["name"])
    if "gpu_name" in session.gpu.columns:
        names = session.gpu["gpu_name"].dropna()
        if not names.empty:
            return str(names.iloc[0])
    return None


TOKENS_MISSING = ("tokens/s not logged (metrics.tokens_per_second of the step records: with transformers' Trainer, "
                  "TrainingArguments(include_num_input_tokens_seen=True); with TrainingLogger, step.log(tokens=...))")


def _tokens_per_second(session) -> tuple[float | None, int]:
    """Steady tokens/s of the whole job (lowest rank's rows after warm-up, time-weighted), rows used."""
    rows = main_rank_timed(session.steps)
    if rows.empty or not rows["tokens_per_s"].notna().any():
        return None, 0
    k = warmup_count(rows["step_time_s"].to_numpy(dtype="float64"))
    steady = rows.iloc[k:]
    steady = steady[steady["tokens_per_s"].notna()]
    if steady.empty:
        return None, 0
    tokens = (steady["tokens_per_s"] * steady["step_time_s"]).sum()
    return float(tokens / steady["step_time_s"].sum()), int(len(steady))


def mfu(session) -> dict:
    """Model FLOPs utilization of ``session`` (see module doc): {mfu, achieved_tflops, peak_tflops,
    gpu_model, gpu_name, flops_per_token, tokens_per_second, n_gpus, parameters_total,
    parameters_trainable, parameters_from, definition, missing, reason, assumptions}. ``mfu`` is
    None when an input is missing, and ``reason`` then says exactly which and where it would come from."""
    from logkit.analysis.groups import session_kind

    meta = session.meta
    total, trainable, src = model_parameters(session)
    name = gpu_model(session)
    peak = peak_tflops_for(name)
    tps, rows = _tokens_per_second(session)
    mode = str(meta.get("mode") or "").upper()
    cpu = mode in ("CPU", "MULTI-CPU") or (not name and meta.get("gpu_count") == 0)
    n_gpus = int(meta.get("world_size") or 1)
    trainable_used = trainable if trainable is not None else total
    fpt = 4 * total + 2 * trainable_used if total else None
    out = {"mfu": None, "achieved_tflops": None, "peak_tflops": peak[1] if peak else None,
           "gpu_model": peak[0] if peak else name, "gpu_name": name, "flops_per_token": fpt,
           "tokens_per_second": tps, "tokens_rows": rows, "n_gpus": n_gpus, "parameters_total": total,
           "parameters_trainable": trainable, "parameters_from": src, "definition": PERFORMANCE_DEFINITIONS["mfu"],
           "missing": [], "reason": None, "assumptions": []}
    reasons = []
    if session_kind(session) != "training":
        reasons.append("not a training run")
    elif cpu:
        out["missing"].append("gpu")
        reasons.append("a CPU run: MFU is measured against a GPU's peak FLOP/s")
    elif name is None:
        out["missing"].append("gpu model")
        reasons.append("GPU model not logged (session_start gpus[].name or summary.json gpus[].name)")
    elif peak is None:
        out["missing"].append("gpu peak")
        reasons.append(f"GPU model {name!r} is not in the peak table (peaks.GPU_PEAK_TFLOPS)")
    if total is None:
        out["missing"].append("parameters")
        reasons.append("model parameter count not logged (a model_info record with parameters_total)")
    if tps is None:
        out["missing"].append("tokens_per_second")
        reasons.append(TOKENS_MISSING)
    if total is not None and trainable is None:
        out["assumptions"].append("parameters_trainable not logged: every weight taken as trainable (6 N per token)")
    if fpt and tps:
        out["achieved_tflops"] = fpt * tps / n_gpus / 1e12
        if peak and not reasons:
            out["mfu"] = out["achieved_tflops"] / peak[1]
    out["reason"] = "; ".join(reasons) or None
    return out
