"""Scaling: per-session throughput figures, and speedup / efficiency of runs against a baseline.

Definitions (reported to users; every renderer repeats them):

- ``samples_per_second``: sum(total_batch_size) / sum(step_time_s) over rank 0's optimizer
  steps: training throughput of the whole job, all ranks together, excluding set-up time.
- ``steps_per_second``: number of optimizer steps / sum(step_time_s) over the same rows.
- ``speedup``: candidate samples_per_second / baseline samples_per_second (a throughput
  ratio; never a ratio of step rates, which mislead when the global batch grows with ranks).
- ``scaling_efficiency``: speedup / (candidate world_size / baseline world_size).
- ``regime``: "strong" when the global batch is the same, "weak" when the per-rank batch
  (total_batch_size / world_size) is the same, "mixed" otherwise, "unknown" without batch sizes.
"""

from __future__ import annotations

import math

__all__ = ["SUMMARY_KEYS", "COMPARISON_KEYS", "DEFINITIONS", "session_summary", "compare", "pick_baseline"]

SUMMARY_KEYS: tuple[str, ...] = (
    "session_id", "mode", "world_size", "gpu_count", "duration_s", "total_steps",
    "steps_per_second", "samples_per_second", "total_batch_size", "final_loss",
)
COMPARISON_KEYS: tuple[str, ...] = (
    "baseline", "candidate", "speedup", "scaling_efficiency", "regime", "step_rate_ratio",
)
DEFINITIONS: dict[str, str] = {
    "samples_per_second": "sum of total_batch_size / sum of step_time_s over rank 0's optimizer steps "
                          "(whole-job training throughput, set-up excluded)",
    "steps_per_second": "optimizer steps / sum of step_time_s over rank 0's steps",
    "speedup": "candidate samples/s / baseline samples/s (throughput ratio)",
    "scaling_efficiency": "speedup / (candidate ranks / baseline ranks)",
    "regime": "strong: same global batch; weak: same per-rank batch; mixed: neither",
    "step_rate_ratio": "candidate steps/s / baseline steps/s",
}


def _finite(value) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def _int(value) -> int | None:
    v = _finite(value)
    return int(v) if v is not None and v.is_integer() else None


def _ratio(num, den) -> float | None:
    num, den = _finite(num), _finite(den)
    if num is None or den is None or den == 0:
        return None
    return num / den


def _main_rank_steps(session):
    steps = session.steps
    if steps.empty:
        return steps
    ranks = steps["rank"].dropna()
    if ranks.empty:
        return steps
    return steps[steps["rank"] == ranks.min()]


def session_summary(session) -> dict:
    """Headline figures of one session, with exactly the keys of ``SUMMARY_KEYS``.

    From rank 0's ``steps`` rows (the lowest rank present): ``samples_per_second`` =
    sum(total_batch_size) / sum(step_time_s), where a row without a batch size takes the
    session's; ``steps_per_second`` = steps / sum(step_time_s); ``total_steps`` = the
    highest step; ``final_loss`` = the loss of the last step that logged one;
    ``total_batch_size`` = its most common value; ``duration_s`` = the session's
    wall time (session_end.duration_s). Without step rows, summary.json's figures are used
    (or total_steps x total_batch_size / duration_s). Missing figures are None.
    """
    meta = session.meta
    out = dict.fromkeys(SUMMARY_KEYS)
    out.update({
        "session_id": meta.get("session_id"),
        "mode": meta.get("mode"),
        "world_size": _int(meta.get("world_size")),
        "gpu_count": _int(meta.get("gpu_count")),
        "duration_s": _finite(meta.get("duration_s")),
    })
    steps = _main_rank_steps(session)
    timed = steps[steps["step_time_s"].notna() & (steps["step_time_s"] > 0)] if not steps.empty else steps
    if not timed.empty:
        batch = timed["total_batch_size"].astype("Float64")
        common = batch.dropna().mode()
        out["total_batch_size"] = int(common.min()) if not common.empty else _int(meta.get("total_batch_size"))
        if out["total_batch_size"] is not None:
            batch = batch.fillna(out["total_batch_size"])
        total_time = float(timed["step_time_s"].sum())
        out["steps_per_second"] = len(timed) / total_time
        out["samples_per_second"] = float(batch.sum()) / total_time if batch.notna().all() else None
        out["total_steps"] = _int(steps["step"].max())
        losses = steps.sort_values("step", kind="stable")["loss"].dropna()
        out["final_loss"] = float(losses.iloc[-1]) if not losses.empty else _finite(meta.get("final_loss"))
        return out
    # No step rows (summary.json alone, or a run killed before its first step).
    doc = meta.get("summary") if isinstance(meta.get("summary"), dict) else {}
    out["total_steps"] = _int(meta.get("total_steps"))
    if out["total_steps"] is None and not steps.empty:
        out["total_steps"] = _int(steps["step"].max())
    out["final_loss"] = _finite(meta.get("final_loss"))
    out["total_batch_size"] = _int(meta.get("total_batch_size"))
    # summary.json's figures, else those a foreign file gave (results.json, trainer_state.json)
    for key in ("steps_per_second", "samples_per_second"):
        out[key] = _finite(doc.get(key)) if doc.get(key) is not None else _finite(meta.get(key))
    if out["samples_per_second"] is None and out["total_steps"] and out["total_batch_size"]:
        out["samples_per_second"] = _ratio(out["total_steps"] * out["total_batch_size"], out["duration_s"])
    if out["steps_per_second"] is None:
        out["steps_per_second"] = _ratio(out["total_steps"], out["duration_s"])
    return out


def _start_key(session) -> tuple:
    from logkit.ingest.load import start_sort_key

    return start_sort_key(session.meta)


def _ranks(summary: dict) -> int:
    return summary["world_size"] if summary["world_size"] else 1


def pick_baseline(sessions: list, summaries: list[dict] | None = None) -> int | None:
    """Index of the baseline: fewest ranks (world_size), ties broken by the earliest start; sessions
    with a throughput figure (samples_per_second) first, so a GPU capture or an nccl-tests table
    never becomes the baseline of training runs."""
    if not sessions:
        return None
    summaries = summaries or [session_summary(s) for s in sessions]
    return min(range(len(sessions)), key=lambda i: (summaries[i]["samples_per_second"] is None,
                                                    _ranks(summaries[i]), _start_key(sessions[i])))


def _regime(base: dict, cand: dict) -> str:
    b, c = base["total_batch_size"], cand["total_batch_size"]
    if not b or not c:
        return "unknown"
    if b == c:
        return "strong"
    if b / _ranks(base) == c / _ranks(cand):
        return "weak"
    return "mixed"


def compare(sessions: list, summaries: list[dict] | None = None) -> list[dict]:
    """Each session against the baseline (``pick_baseline``), keys of ``COMPARISON_KEYS``.

    ``speedup`` = candidate samples_per_second / baseline samples_per_second;
    ``scaling_efficiency`` = speedup / (candidate world_size / baseline world_size);
    ``step_rate_ratio`` = candidate steps_per_second / baseline steps_per_second.
    """
    summaries = summaries or [session_summary(s) for s in sessions]
    index = pick_baseline(sessions, summaries)
    if index is None:
        return []
    base = summaries[index]
    out = []
    for i, cand in enumerate(summaries):
        if i == index:
            continue
        speedup = _ratio(cand["samples_per_second"], base["samples_per_second"])
        rank_ratio = _ranks(cand) / _ranks(base)
        out.append({
            "baseline": base["session_id"],
            "candidate": cand["session_id"],
            "speedup": speedup,
            "scaling_efficiency": _ratio(speedup, rank_ratio),
            "regime": _regime(base, cand),
            "step_rate_ratio": _ratio(cand["steps_per_second"], base["steps_per_second"]),
        })
    return out
