"""Per-GPU utilization of a session: average and peak utilization, average memory use."""

from __future__ import annotations

import math

__all__ = ["gpu_stats"]


def _clean(value) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) else None


def gpu_stats(session) -> list[dict]:
    """One dict per device: host, gpu, name, avg_util, peak_util, avg_memory_pct, samples, source.

    From the ``gpu`` frame (gpu_snapshot records) when it has rows: avg_util / peak_util are
    the mean / max of utilization_pct over snapshots; avg_memory_pct is the mean of
    memory_usage_pct, or of memory_used_mb / memory_total_mb x 100 where that is missing.
    Otherwise from summary.json's gpus[] where it carries figures.
    """
    names = {g.get("index"): g.get("name") for g in session.meta.get("gpus") or [] if isinstance(g, dict)}
    frame = session.gpu
    if not frame.empty and frame["gpu"].notna().any():
        frame = frame[frame["gpu"].notna()].copy()
        derived = frame["memory_used_mb"] / frame["memory_total_mb"].where(frame["memory_total_mb"] > 0) * 100
        frame["mem_pct"] = frame["memory_usage_pct"].fillna(derived)
        out = []
        for (host, gpu), g in frame.groupby(["host", "gpu"], sort=True, dropna=False):
            out.append({
                "host": host, "gpu": int(gpu), "name": names.get(int(gpu)),
                "avg_util": _clean(g["utilization_pct"].mean()),
                "peak_util": _clean(g["utilization_pct"].max()),
                "avg_memory_pct": _clean(g["mem_pct"].mean()),
                "samples": int(len(g)), "source": "gpu_snapshot",
            })
        return out
    summary = session.meta.get("summary")
    gpus = summary.get("gpus") if isinstance(summary, dict) else None
    out = []
    for g in gpus if isinstance(gpus, list) else []:
        if not isinstance(g, dict):
            continue
        figures = {k: _clean(g.get(k)) for k in ("avg_util", "peak_util", "avg_memory_pct")}
        if all(v is None for v in figures.values()):
            continue  # the summary names the device but measured nothing on it
        out.append({"host": "", "gpu": g.get("index"), "name": g.get("name"), **figures,
                     "samples": None, "source": "summary.json"})
    return out
