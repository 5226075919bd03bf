"""Scaling: per-session throughput figures, and speedup / efficiency of runs against a baseline.

Definitions (reported to users; every renderer repeats them):

- ``samples_per_second``: sum(total_batch_size) / sum(step_time_s) over rank 0's optimizer
  steps: training throughput of the whole job, all ranks together, excluding set-up time.
  When the step lines are sampled (fewer logged steps than the run did: a log interval > 1,
  text-only logs) and the run's own totals are known (summary.json, results.json), the
  totals are used instead; ``basis`` says which (``steps``, ``run totals``, ``sampled steps``).
- ``steps_per_second``: number of optimizer steps / sum(step_time_s) over the same rows (or the
  run's total, as above).
- ``final_loss``: the last logged loss (by step), or the run's final loss when the step lines
  are sampled or no loss was logged.
- ``total_batch_size``: the most common logged global batch; else the run's; else derived as
  samples/s / steps/s when both are known (``total_batch_size_from`` says so).
- ``speedup``: candidate samples_per_second / baseline samples_per_second (a throughput
  ratio; never a ratio of step rates, which mislead when the global batch grows with ranks).
- ``scaling_efficiency``: speedup / (candidate world_size / baseline world_size).
- ``regime``: "strong" when the global batch is the same, "weak" when the per-rank batch
  (total_batch_size / world_size) is the same, "mixed" otherwise, "unknown" without batch sizes.
- Only runs of one comparison group are compared (``groups``: same model, same sequence length
  and configuration where logged); each group has its own baseline: the fewest ranks, ties broken
  by the earliest start.
"""

from __future__ import annotations

import math

from logkit.analysis.groups import GROUP_DEFINITIONS, group_sessions, session_kind

__all__ = ["SUMMARY_KEYS", "COMPARISON_KEYS", "DEFINITIONS", "session_summary", "compare", "pick_baseline",
           "comparison_plan", "run_totals"]

SUMMARY_KEYS: tuple[str, ...] = (
    "session_id", "mode", "world_size", "gpu_count", "duration_s", "total_steps",
    "steps_per_second", "samples_per_second", "total_batch_size", "final_loss",
    "basis", "basis_detail", "logged_steps", "total_batch_size_from", "final_loss_from", "kind",
)
COMPARISON_KEYS: tuple[str, ...] = (
    "baseline", "candidate", "speedup", "scaling_efficiency", "regime", "step_rate_ratio",
)
DEFINITIONS: dict[str, str] = {
    "samples_per_second": "sum of total_batch_size / sum of step_time_s over rank 0's optimizer steps "
                          "(whole-job training throughput, set-up excluded); the run's totals (summary.json, "
                          "results.json) when the step lines are sampled; 'basis' says which",
    "steps_per_second": "optimizer steps / sum of step_time_s over rank 0's steps (or the run's totals, as for "
                        "samples_per_second)",
    "final_loss": "the last logged loss (by step); the run's final loss when the step lines are sampled",
    "total_batch_size": "the logged global batch (samples per optimizer step); derived as samples/s / steps/s "
                        "when only those are known",
    "speedup": "candidate samples/s / baseline samples/s (throughput ratio)",
    "scaling_efficiency": "speedup / (candidate ranks / baseline ranks)",
    "regime": "strong: same global batch; weak: same per-rank batch; mixed: neither",
    "step_rate_ratio": "candidate steps/s / baseline steps/s",
    **GROUP_DEFINITIONS,
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


def _isna(value) -> bool:
    try:
        return bool(value is None or value != value or str(value) == "<NA>")
    except TypeError:
        return True


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


def run_totals(session) -> dict:
    """The run's own totals, as the run wrote them at its end: {source, total_steps, final_loss,
    steps_per_second, samples_per_second, total_batch_size} (None where not written)."""
    meta = session.meta
    doc = meta.get("summary") if isinstance(meta.get("summary"), dict) else {}
    formats = set(meta.get("formats") or [])

    def pick(key):
        value = doc.get(key)
        return value if value is not None else meta.get(key)

    if doc:
        source = "summary.json"
    elif "results_json" in formats or meta.get("duration_from") == "results.json":
        source = "results.json"
    elif "trainer_state" in formats:
        source = "trainer_state.json"
    elif "legacy_summary" in formats:
        source = "summary.json (first version)"
    elif meta.get("duration_from") == "session_end":
        source = "session_end"
    else:
        source = "the run's logged totals"
    return {"source": source, "total_steps": _int(pick("total_steps")), "final_loss": _finite(pick("final_loss")),
            "steps_per_second": _finite(pick("steps_per_second")),
            "samples_per_second": _finite(pick("samples_per_second")),
            "total_batch_size": _int(pick("total_batch_size"))}


def _logged_steps(steps) -> int:
    if steps.empty:
        return 0
    numbered = steps["step"].dropna()
    return int(numbered.nunique()) if len(numbered) == len(steps) else len(steps)


def _last_loss(steps) -> tuple[float | None, int | None]:
    """The last logged finite loss (by step; in log order where steps are not numbered) and its step."""
    if steps.empty:
        return None, None
    rows = steps[steps["loss"].notna()]
    if rows.empty:
        return None, None
    if rows["step"].notna().all():
        rows = rows.sort_values("step", kind="stable")
    last = rows.iloc[-1]
    step = _int(last["step"]) if not _isna(last["step"]) else None
    return float(last["loss"]), step


def _derive_batch(samples_per_second, steps_per_second) -> int | None:
    ratio = _ratio(samples_per_second, steps_per_second)
    if ratio is None or ratio < 0.5:
        return None
    return max(1, int(round(ratio)))


def session_summary(session) -> dict:
    """Headline figures of one session, with exactly the keys of ``SUMMARY_KEYS`` (see module doc).

    ``basis``: ``steps`` (rank 0's timed step rows cover the run), ``run totals`` (the run's own
    summary: no step times, or step lines that are sampled), ``sampled steps`` (sampled step lines
    and no run totals: the figures estimate the run from the lines), or None (nothing logged);
    ``basis_detail`` says it in a sentence. ``logged_steps``: step rows of rank 0.
    """
    meta = session.meta
    out = dict.fromkeys(SUMMARY_KEYS)
    out.update({
        "session_id": meta.get("session_id"),
        "mode": meta.get("mode"),
        "world_size": _int(meta.get("world_size")),
        "gpu_count": _int(meta.get("gpu_count")),
        "duration_s": _finite(meta.get("duration_s")),
        "kind": session_kind(session),
    })
    steps = _main_rank_steps(session)
    run = run_totals(session)
    logged = _logged_steps(steps)
    out["logged_steps"] = logged
    timed = steps[steps["step_time_s"].notna() & (steps["step_time_s"] > 0)] if not steps.empty else steps
    max_step = _int(steps["step"].max()) if not steps.empty and steps["step"].notna().any() else None
    last_loss, last_step = _last_loss(steps)
    sampled = bool(logged) and run["total_steps"] is not None and logged < run["total_steps"]
    rank = _int(steps["rank"].min()) if not steps.empty and steps["rank"].notna().any() else 0

    batch_rows = timed["total_batch_size"].astype("Float64") if not timed.empty else None
    common = batch_rows.dropna().mode() if batch_rows is not None else []
    batch = int(common.min()) if len(common) else (run["total_batch_size"] or _int(meta.get("total_batch_size")))
    out["total_batch_size"] = batch
    out["total_batch_size_from"] = "logged" if batch is not None else None

    def from_rows():
        b = batch_rows.fillna(batch) if batch is not None else batch_rows
        total_time = float(timed["step_time_s"].sum())
        out["steps_per_second"] = len(timed) / total_time
        out["samples_per_second"] = float(b.sum()) / total_time if b.notna().all() else None

    if not timed.empty and not sampled:
        from_rows()
        out["basis"] = "steps"
        out["basis_detail"] = f"rank {rank}'s {len(timed)} timed step(s): sum of batch sizes / sum of step times"
        out["total_steps"] = max_step if max_step is not None else run["total_steps"]
    else:
        out["total_steps"] = run["total_steps"] if run["total_steps"] is not None else max_step
        out["steps_per_second"] = run["steps_per_second"]
        out["samples_per_second"] = run["samples_per_second"]
        if out["samples_per_second"] is None and out["total_steps"] and batch:
            out["samples_per_second"] = _ratio(out["total_steps"] * batch, out["duration_s"])
        if out["steps_per_second"] is None:
            out["steps_per_second"] = _ratio(out["total_steps"], out["duration_s"])
        have_run = out["samples_per_second"] is not None or out["steps_per_second"] is not None
        if sampled and not have_run and not timed.empty:
            from_rows()
            out["basis"] = "sampled steps"
            out["basis_detail"] = (f"{len(timed)} sampled step line(s) of {run['total_steps']} steps: "
                                   "sum of batch sizes / sum of their step times (an estimate)")
        elif have_run:
            out["basis"] = "run totals"
            why = (f"the step lines are sampled: {logged} of {run['total_steps']} steps logged" if sampled
                   else "no step times logged")
            out["basis_detail"] = f"run totals from {run['source']} ({why})"
        elif not timed.empty:  # step times, but more steps than the header claims: use them
            from_rows()
            out["basis"] = "steps"
            out["basis_detail"] = f"rank {rank}'s {len(timed)} timed step(s): sum of batch sizes / sum of step times"
    if out["total_batch_size"] is None:
        derived = _derive_batch(out["samples_per_second"], out["steps_per_second"])
        if derived is not None:
            out["total_batch_size"] = derived
            out["total_batch_size_from"] = "derived: samples/s / steps/s"
    if sampled and run["final_loss"] is not None:
        out["final_loss"], out["final_loss_from"] = run["final_loss"], f"{run['source']}; the step lines are sampled"
    elif last_loss is not None:
        out["final_loss"] = last_loss
        out["final_loss_from"] = f"last logged loss, step {last_step}" if last_step is not None \
            else "last logged loss"
    elif run["final_loss"] is not None:
        out["final_loss"], out["final_loss_from"] = run["final_loss"], run["source"]
    return out


def _start_key(session) -> tuple:
    return session.start_key()


def _ranks(summary: dict) -> int:
    return summary["world_size"] if summary["world_size"] else 1


def pick_baseline(sessions: list, summaries: list[dict] | None = None, members=None) -> int | None:
    """Index of the baseline among ``members`` (default: all sessions): fewest ranks (world_size),
    ties broken by the earliest start; sessions with a throughput figure (samples_per_second)
    first, so a GPU capture or an nccl-tests table never becomes the baseline of training runs."""
    members = list(range(len(sessions)) if members is None else members)
    if not members:
        return None
    summaries = summaries or [session_summary(s) for s in sessions]
    return min(members, key=lambda i: (summaries[i]["samples_per_second"] is None, summaries[i]["kind"] != "training",
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


_KIND_REASONS = {"gpu_capture": "a GPU capture (nvidia-smi / gpustat / monitor_gpu), not a training run",
                 "nccl_tests": "an nccl-tests benchmark, not a training run"}


def comparison_plan(sessions: list, summaries: list[dict] | None = None) -> dict:
    """Who is compared with whom: {"groups": [{key, label, members (session ids), baseline}],
    "pairs": [(baseline index, candidate index, group label)], "not_compared": [{session_id, reason}]}."""
    summaries = summaries or [session_summary(s) for s in sessions]
    groups, pairs, not_compared = [], [], []
    for s in summaries:
        if s["kind"] in _KIND_REASONS:
            not_compared.append({"session_id": s["session_id"], "reason": _KIND_REASONS[s["kind"]]})
    for g in group_sessions(sessions):
        members = g["members"]
        with_tput = [i for i in members if summaries[i]["samples_per_second"] is not None]
        for i in members:
            if summaries[i]["samples_per_second"] is None:
                not_compared.append({"session_id": summaries[i]["session_id"],
                                     "reason": "no throughput logged (no step times, no samples/s in a summary)"})
        base = pick_baseline(sessions, summaries, with_tput) if with_tput else None
        entry = {"key": g["key"], "label": g["label"], "members": [summaries[i]["session_id"] for i in members],
                 "baseline": summaries[base]["session_id"] if base is not None else None}
        groups.append(entry)
        if len(with_tput) == 1:
            not_compared.append({"session_id": summaries[base]["session_id"],
                                 "reason": f"no other run of {g['label']} with a throughput to compare with"})
        for i in with_tput:
            if i != base:
                pairs.append((base, i, g["label"]))
    order = {s["session_id"]: k for k, s in enumerate(summaries)}
    not_compared.sort(key=lambda r: order.get(r["session_id"], 0))
    return {"groups": groups, "pairs": pairs, "not_compared": not_compared}


def compare(sessions: list, summaries: list[dict] | None = None) -> list[dict]:
    """Each compared run against its group's baseline (``comparison_plan``); keys ``COMPARISON_KEYS``
    first, then ``group`` and ``basis`` ("whole run": these figures include warm-up).

    ``speedup`` = candidate samples_per_second / baseline samples_per_second;
    ``scaling_efficiency`` = speedup / (candidate world_size / baseline world_size);
    ``step_rate_ratio`` = candidate steps_per_second / baseline steps_per_second.
    """
    summaries = summaries or [session_summary(s) for s in sessions]
    out = []
    for b, c, label in comparison_plan(sessions, summaries)["pairs"]:
        base, cand = summaries[b], summaries[c]
        speedup = _ratio(cand["samples_per_second"], base["samples_per_second"])
        out.append({
            "baseline": base["session_id"],
            "candidate": cand["session_id"],
            "speedup": speedup,
            "scaling_efficiency": _ratio(speedup, _ranks(cand) / _ranks(base)),
            "regime": _regime(base, cand),
            "step_rate_ratio": _ratio(cand["steps_per_second"], base["steps_per_second"]),
            "group": label,
            "basis": "whole run",
        })
    return out
