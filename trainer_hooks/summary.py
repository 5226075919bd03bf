"""summary.json and summary.txt: rank 0's account of the session, written at the end.

summary.json's keys are ``logkit.schema.files.SUMMARY``'s; the start and end records are read
through their specs, so a key renamed in the schema is renamed here too.
"""

from __future__ import annotations

import math
import os
from pathlib import Path

from logkit.schema.files import SUMMARY
from logkit.schema.records import GPU_DEVICE, SESSION_END, SESSION_START
from logkit.schema.values import per_second

# the gpu_snapshot device keys the summary averages (each interval's mean, and its peak)
_UTIL, _MEM = GPU_DEVICE["utilization_pct"].raw[-1], GPU_DEVICE["memory_usage_pct"].raw[-1]
_UTIL_MAX = _UTIL + "_max"


class GpuStats:
    """Per GPU, over the sampler's intervals: utilization means, their peaks, memory use means."""

    def __init__(self) -> None:
        self.by_index: dict[int, dict[str, list[float]]] = {}

    def add(self, devices: list[dict]) -> None:
        """One interval's devices (a ``gpu_snapshot``'s ``devices``)."""
        for dev in devices:
            stats = self.by_index.setdefault(GPU_DEVICE["gpu"].get(dev) or 0, {"util": [], "util_max": [], "mem": []})
            for key, raw in (("util", _UTIL), ("util_max", _UTIL_MAX), ("mem", _MEM)):
                if dev.get(raw) is not None:
                    stats[key].append(dev[raw])

    def summary(self, gpus: list[dict]) -> list[dict]:
        """Per GPU of ``gpus`` (session_start's) and of the intervals: mean utilization, its peak,
        and mean memory use."""
        names = {g.get("index"): g.get("name") for g in gpus}
        out = []
        for index in sorted(set(names) | set(self.by_index)):
            s = self.by_index.get(index, {})
            peaks = s.get("util_max") or s.get("util") or []
            out.append({"index": index, "name": names.get(index), "avg_util": _mean(s.get("util") or []),
                        "peak_util": round(max(peaks), 2) if peaks else None,
                        "avg_memory_pct": _mean(s.get("mem") or [])})
        return out


def _rate(amount, seconds):
    rate = per_second(amount, seconds)
    return None if rate is None else round(rate, 4)


def build_summary(start: dict, end: dict, training_time_s: float, comm_stats: dict,
                  gpu_stats: GpuStats | None = None) -> dict:
    """The summary.json from rank 0's start and end records.

    ``steps_per_second`` and ``samples_per_second`` are over training time (the sum of
    optimizer-step times), not over the session's wall time, which includes loading.
    ``comm_stats``: ``{op: CommStats}`` from the record builder.
    """
    steps = SESSION_END["steps_logged"].get(end) or 0
    samples = SESSION_END["samples_seen"].get(end) or 0
    values = {name: SESSION_START[name].get(start)
              for name in ("session_id", "mode", "gpu_count", "world_size", "model", "backend")}
    values.update(
        start_time=SESSION_START["timestamp"].get(start), end_time=SESSION_END["timestamp"].get(end),
        duration_s=SESSION_END["duration_s"].get(end), training_time_s=round(training_time_s, 6),
        total_steps=SESSION_END["total_steps"].get(end), final_loss=SESSION_END["final_loss"].get(end),
        steps_per_second=_rate(steps, training_time_s), samples_per_second=_rate(samples, training_time_s),
        total_batch_size=SESSION_START["total_batch_size"].get(start),
        gpus=(gpu_stats or GpuStats()).summary(SESSION_START["gpus"].get(start) or []),
        communication={op: _comm(c, training_time_s) for op, c in comm_stats.items()},
        status=SESSION_END["status"].get(end),
    )
    return SUMMARY.build(**values)


def _comm(c, training_time_s: float) -> dict:
    """One collective's totals; a bandwidth average is over the records whose bandwidth is known.

    ``total_time_s`` sums the operations' durations: gradient buckets overlap (each waits behind
    the ones launched before it), so it can exceed the time they took. ``in_flight_s`` is that
    time: per step, the union of its buckets' launch-to-completion spans, summed over the steps
    whose buckets were all timed; ``share_of_training_time`` = in_flight_s / training time, a share
    of wall time (at most 1; None where no step's buckets were all timed)."""
    share = None
    if c.in_flight_steps and training_time_s > 0:
        share = round(min(1.0, c.in_flight_s / training_time_s), 6)  # device and host clocks: never above 1
    return {
        "count": int(c.count),
        "total_mb": round(c.bytes / 1e6, 6),
        "avg_mb": round(c.bytes / 1e6 / c.count, 6) if c.count else 0.0,
        "avg_algbw_mb_s": round(c.algbw_sum / c.algbw_n, 4) if c.algbw_n else None,
        "avg_busbw_mb_s": round(c.busbw_sum / c.busbw_n, 4) if c.busbw_n else None,
        "total_time_s": round(c.seconds, 6),
        "in_flight_s": round(c.in_flight_s, 6) if c.in_flight_steps else None,
        "share_of_training_time": share,
    }


def _mean(values):
    return round(sum(values) / len(values), 2) if values else None


def _fmt(value, spec: str = "", unit: str = "") -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "n/a"
    return f"{value:{spec}}{unit}"


def summary_text(s: dict) -> str:
    """The same facts for a person."""
    v = {f.name: f.get(s) for f in SUMMARY}
    duration = v["duration_s"]
    lines = [
        "TRAINING SESSION SUMMARY",
        "=" * 60,
        f"Session ID:        {v['session_id']}",
        f"Status:            {v['status']}",
        f"Mode:              {v['mode']}",
        f"World size:        {v['world_size']}",
        f"GPU count:         {v['gpu_count']}",
        f"Model:             {v['model']}",
        f"Duration:          {_fmt(duration, '.1f', 's')} ({_fmt(duration / 60 if duration else None, '.1f', 'min')})",
        f"Training time:     {_fmt(v['training_time_s'], '.1f', 's')} (sum of optimizer-step times)",
        f"Total steps:       {v['total_steps']}",
        f"Final loss:        {_fmt(v['final_loss'], '.4f')}",
        f"Steps/sec:         {_fmt(v['steps_per_second'], '.3f')}",
        f"Samples/sec:       {_fmt(v['samples_per_second'], '.2f')}",
        f"Total batch size:  {v['total_batch_size']}",
    ]
    for g in v["gpus"] or []:
        lines.append(f"GPU {g['index']}: {g.get('name')}: {_fmt(g.get('avg_util'), '.1f', '%')} avg util, "
                     f"{_fmt(g.get('peak_util'), '.1f', '%')} peak, {_fmt(g.get('avg_memory_pct'), '.1f', '%')} avg memory")
    if v["communication"]:
        lines.append("")
        lines.append("Communication (rank 0):")
        for op, c in v["communication"].items():
            lines.append(f"  {op}: {c['count']} operations, {c['total_mb']:.2f}MB total, {c['avg_mb']:.4f}MB avg, "
                         f"algbw {_fmt(c.get('avg_algbw_mb_s'), '.2f', 'MB/s')}, "
                         f"busbw {_fmt(c.get('avg_busbw_mb_s'), '.2f', 'MB/s')}, "
                         f"{_in_flight(c.get('share_of_training_time'))}")
    return "\n".join(lines) + "\n"


def _in_flight(share) -> str:
    if share is None:
        return "time in flight not measured"
    return (f"in flight {share * 100:.1f}% of training time (wall time with at least one bucket in flight, "
            "overlapping buckets counted once)")


def write_whole(path: Path, data: bytes) -> None:
    """``data`` as the file ``path``, whole or not at all: written beside it, then renamed over
    it. A full disk leaves no empty or cut summary.json (a reader would take it for the run's
    account); raises the ``OSError`` after removing what it wrote."""
    part = path.with_name(f".{path.name}.part")
    try:
        with open(part, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(part, path)
    except OSError:
        part.unlink(missing_ok=True)
        raise
