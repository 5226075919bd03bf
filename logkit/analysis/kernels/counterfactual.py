"""The counterfactual: what the run would have cost on its group's baseline, what it cost, and what the
forecast's sizes would cost, in hours, device-hours and (with a price) money.

Definitions (``definitions.COUNTERFACTUAL``):

- the run: the group's comparison with the most ranks against the baseline (the headline one);
  its work W = the samples it processed (session_end's samples_seen, else steps x global batch).
- ``hours`` at a rate r = W / r / 3600: the candidate's and the baseline's rates of that comparison
  (steady state where both have step times, else whole run), a forecast row's ``samples_per_s``.
- ``gpu_hours`` = hours x world_size (rank-hours for a CPU run: ``unit``); ``saved_hours`` = the
  baseline's hours - the run's; ``cost`` = gpu_hours x the price of one GPU-hour, where given.
- a forecast size against the run: ``gpu_hours_ratio`` = its gpu_hours / the run's,
  ``speed_ratio`` = the run's hours / its hours.
"""

from __future__ import annotations

import pandas as pd

COUNTERFACTUAL_COLUMNS = ["group", "session_id", "world_size", "measured", "samples", "samples_per_s", "hours",
                          "gpu_hours", "baseline_world_size", "baseline_hours", "baseline_gpu_hours", "saved_hours",
                          "gpu_hours_ratio", "speed_ratio", "cost", "baseline_cost", "unit", "sentence"]


def duration_text(hours: float) -> str:
    """Hours as a person reads them: seconds under two minutes, minutes under two hours, else hours."""
    seconds = hours * 3600
    if seconds < 120:
        return f"{seconds:.3g} s"
    if seconds < 7200:
        return f"{seconds / 60:.3g} min"
    return f"{hours:.3g} h"


def _money(value: float | None) -> str:
    if value is None:
        return ""
    return f"{value:,.2f}" if abs(value) >= 1 else f"{value:.3g}"


def _headline(scaling, label: str):
    mine = [c for c in scaling.comparisons if c.group == label and c.is_scaling
            and c.baseline_samples_per_second and c.candidate_samples_per_second]
    return max(mine, key=lambda c: c.rank_ratio) if mine else None


def _measured(c, scaling, price: float | None) -> dict | None:
    cand, base = scaling.session_summary(c.candidate), scaling.session_summary(c.baseline)
    work = c.candidate_samples_seen
    if not work or cand is None or base is None:
        return None
    n, m = cand.world_size or 1, base.world_size or 1
    unit = "rank" if cand.on_cpu else "GPU"
    took, would = work / c.candidate_samples_per_second / 3600, work / c.baseline_samples_per_second / 3600
    gpu_h, base_gpu_h = took * n, would * m
    cost = gpu_h * price if price is not None else None
    base_cost = base_gpu_h * price if price is not None else None
    saved = would - took
    plural = "s" if m > 1 else ""
    sentence = (f"On {m} {unit}{plural} this run would have taken {duration_text(would)}; on {n} it took "
                f"{duration_text(took)}: {gpu_h:.3g} {unit}-hours for {duration_text(abs(saved))} "
                f"{'saved' if saved >= 0 else 'lost'}")
    if price is not None:
        sentence += f" ({_money(cost)} at {price:g} a {unit}-hour, against {_money(base_cost)} on {m})"
    return {"group": c.group, "session_id": c.candidate, "world_size": n, "measured": True, "samples": work,
            "samples_per_s": c.candidate_samples_per_second, "hours": took, "gpu_hours": gpu_h,
            "baseline_world_size": m, "baseline_hours": would, "baseline_gpu_hours": base_gpu_h, "saved_hours": saved,
            "gpu_hours_ratio": None, "speed_ratio": None, "cost": cost, "baseline_cost": base_cost, "unit": unit,
            "sentence": sentence + "."}


def _forecast(run: dict, f, price: float | None) -> dict:
    n, unit = int(f.world_size), run["unit"]
    hours = run["samples"] / f.samples_per_s / 3600
    gpu_h = hours * n
    ratio, speed = gpu_h / run["gpu_hours"], run["hours"] / hours
    cost = gpu_h * price if price is not None else None
    sentence = (f"{n} {unit}s (forecast): {duration_text(hours)}, {gpu_h:.3g} {unit}-hours, {ratio:.2g}x the "
                f"{unit}-hours of {run['world_size']} for {speed:.2g}x the speed"
                + (f", {_money(cost)}" if cost is not None else ""))
    return {**run, "session_id": None, "world_size": n, "measured": False, "samples_per_s": f.samples_per_s,
            "hours": hours, "gpu_hours": gpu_h, "saved_hours": run["baseline_hours"] - hours, "gpu_hours_ratio": ratio,
            "speed_ratio": speed, "cost": cost, "sentence": sentence + "."}


def counterfactual_table(scaling, forecast: pd.DataFrame, price: float | None = None) -> pd.DataFrame:
    """``COUNTERFACTUAL_COLUMNS``: per group with a scaling comparison, its headline run against the
    baseline, then each size its forecast gives a rate for (see module doc)."""
    rows = []
    for g in scaling.groups:
        c = _headline(scaling, g.label)
        run = _measured(c, scaling, price) if c is not None else None
        if run is None:
            continue
        rows.append(run)
        mine = forecast[(forecast["group"] == g.label) & forecast["samples_per_s"].notna()] if len(forecast) else forecast
        rows += [_forecast(run, f, price) for f in mine.itertuples(index=False) if f.samples_per_s > 0]
    return pd.DataFrame(rows, columns=COUNTERFACTUAL_COLUMNS) if rows else pd.DataFrame(columns=COUNTERFACTUAL_COLUMNS)


def with_counterfactual(verdict: tuple[str, ...], table: pd.DataFrame, headline_candidate: str | None) -> tuple:
    """The verdict with the headline run's counterfactual first: what the run cost against its baseline is the
    answer a user acts on (hours and GPU-hours, money with a price); the pay-off sentence explains it."""
    if not verdict or table.empty or headline_candidate is None:
        return verdict
    said = table[table["measured"].astype(bool) & (table["session_id"] == headline_candidate)]
    if said.empty:
        return verdict
    return (str(said["sentence"].iloc[0]), *verdict)
