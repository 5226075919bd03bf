"""summary.json and summary.txt: rank 0's account of the session, written at the end."""

from __future__ import annotations

import math

__all__ = ["build_summary", "summary_text"]


def build_summary(start: dict, end: dict, training_time_s: float, comm_stats: dict,
                  gpu_stats: dict | None = None) -> dict:
    """The summary.json of LOG_FORMATS.md from rank 0's start and end records.

    ``steps_per_second`` and ``samples_per_second`` are over training time (the sum of
    optimizer-step times), not over the session's wall time, which includes loading.
    """
    steps = end.get("steps_logged") or 0
    samples = end.get("samples_seen") or 0

    def per_sec(x):
        return round(x / training_time_s, 4) if training_time_s > 0 else None

    communication = {}
    for op, (count, total_bytes, sum_algbw, sum_busbw, sum_seconds) in comm_stats.items():
        communication[op] = {
            "count": int(count),
            "total_mb": round(total_bytes / 1e6, 6),
            "avg_mb": round(total_bytes / 1e6 / count, 6) if count else 0.0,
            "avg_algbw_mb_s": round(sum_algbw / count, 4) if count else None,
            "avg_busbw_mb_s": round(sum_busbw / count, 4) if count else None,
            "total_time_s": round(sum_seconds, 6),
            "share_of_training_time": round(sum_seconds / training_time_s, 6) if training_time_s > 0 else None,
        }
    return {
        "session_id": start.get("session_id"),
        "mode": start.get("mode"),
        "gpu_count": start.get("gpu_count"),
        "world_size": start.get("world_size"),
        "model": start.get("model_name"),
        "backend": start.get("backend"),
        "start_time": start.get("timestamp"),
        "end_time": end.get("timestamp"),
        "duration_seconds": end.get("duration_s"),
        "training_time_seconds": round(training_time_s, 6),
        "total_steps": end.get("total_steps"),
        "final_loss": end.get("final_loss"),
        "steps_per_second": per_sec(steps),
        "samples_per_second": per_sec(samples),
        "total_batch_size": start.get("total_batch_size"),
        "gpus": _gpus(start.get("gpus") or [], gpu_stats or {}),
        "communication": communication,
        "status": end.get("status"),
    }


def _mean(values):
    return round(sum(values) / len(values), 2) if values else None


def _gpus(gpus: list[dict], stats: dict) -> list[dict]:
    """Per GPU: mean utilization, its peak, and mean memory use, over the sampler's intervals."""
    names = {g.get("index"): g.get("name") for g in gpus}
    out = []
    for index in sorted(set(names) | set(stats)):
        s = stats.get(index, {})
        peaks = s.get("util_max") or s.get("util") or []
        out.append({"index": index, "name": names.get(index), "avg_util": _mean(s.get("util") or []),
                    "peak_util": round(max(peaks), 2) if peaks else None, "avg_memory_pct": _mean(s.get("mem") or [])})
    return out


def _fmt(value, spec: str = "", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:{spec}}{unit}"


def summary_text(s: dict) -> str:
    """The same facts for a person."""
    duration = s.get("duration_seconds")
    lines = [
        "TRAINING SESSION SUMMARY",
        "=" * 60,
        f"Session ID:        {s['session_id']}",
        f"Status:            {s.get('status')}",
        f"Mode:              {s.get('mode')}",
        f"World size:        {s.get('world_size')}",
        f"GPU count:         {s.get('gpu_count')}",
        f"Model:             {s.get('model')}",
        f"Duration:          {_fmt(duration, '.1f', 's')} ({_fmt(duration / 60 if duration else None, '.1f', 'min')})",
        f"Training time:     {_fmt(s.get('training_time_seconds'), '.1f', 's')} (sum of optimizer-step times)",
        f"Total steps:       {s.get('total_steps')}",
        f"Final loss:        {_fmt(s.get('final_loss'), '.4f')}",
        f"Steps/sec:         {_fmt(s.get('steps_per_second'), '.3f')}",
        f"Samples/sec:       {_fmt(s.get('samples_per_second'), '.2f')}",
        f"Total batch size:  {s.get('total_batch_size')}",
    ]
    for g in s.get("gpus") or []:
        lines.append(f"GPU {g['index']}: {g.get('name')}: {_fmt(g.get('avg_util'), '.1f', '%')} avg util, "
                     f"{_fmt(g.get('peak_util'), '.1f', '%')} peak, {_fmt(g.get('avg_memory_pct'), '.1f', '%')} avg memory")
    if s.get("communication"):
        lines.append("")
        lines.append("Communication (rank 0):")
        for op, c in s["communication"].items():
            lines.append(f"  {op}: {c['count']} operations, {c['total_mb']:.2f}MB total, {c['avg_mb']:.4f}MB avg, "
                         f"algbw {_fmt(c.get('avg_algbw_mb_s'), '.2f', 'MB/s')}, "
                         f"busbw {_fmt(c.get('avg_busbw_mb_s'), '.2f', 'MB/s')}, "
                         f"{_fmt((c.get('share_of_training_time') or 0) * 100, '.1f', '%')} of training time")
    return "\n".join(lines) + "\n"
