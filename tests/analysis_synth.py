"""In-memory sessions for the analysis tests: frames built directly, no files."""

from __future__ import annotations

import numpy as np

from logkit.ingest.session import Session, make_frame

__all__ = ["session", "step_rows", "comm_rows", "gpu_rows", "event_rows", "noisy"]


def step_rows(times, *, rank=0, batch=8, losses=None, data=None, tokens=None, start_step=1) -> list[dict]:
    """One steps-frame row per step time."""
    rows = []
    for i, t in enumerate(times):
        rows.append({"rank": rank, "step": start_step + i, "step_time_s": t, "total_batch_size": batch,
                     "loss": None if losses is None else losses[i],
                     "data_time_s": None if data is None else data[i],
                     "tokens_per_s": None if tokens is None else tokens / t})
    return rows


def comm_rows(sizes, durations_ms, *, rank=0, op="gradient_sync", group=2) -> list[dict]:
    rows = []
    for i, (b, d) in enumerate(zip(sizes, durations_ms, strict=True)):
        alg = b / 1e6 / (d / 1000)
        factor = 2 * (group - 1) / group if op in ("gradient_sync", "allreduce") else 1.0
        rows.append({"rank": rank, "step": i + 1, "op": op, "size_bytes": b, "duration_ms": d,
                     "algbw_mb_s": alg, "busbw_mb_s": alg * factor, "group_size": group})
    return rows


def gpu_rows(utils: dict[int, list[float]], *, mem_pct=50.0, host="h") -> list[dict]:
    rows = []
    for gpu, values in utils.items():
        for i, u in enumerate(values):
            rows.append({"time_s": float(i), "host": host, "gpu": gpu, "utilization_pct": u,
                         "memory_used_mb": mem_pct * 800, "memory_total_mb": 80000.0})
    return rows


def event_rows(*events: dict) -> list[dict]:
    return [dict({"level": "ERROR", "message": e.get("kind", ""), "time_s": float(i)}, **e)
            for i, e in enumerate(events)]


def session(sid="s", *, world_size=1, steps=(), comm=(), gpu=(), events=(), **meta) -> Session:
    """A Session with the given rows (lists of dicts) and meta."""
    m = {"session_id": sid, "world_size": world_size, "status": "completed",
         "files": [f"{sid}/{sid}_rank{r}.jsonl" for r in range(world_size)]}
    m.update(meta)
    return Session(meta=m, steps=make_frame("steps", list(steps)), comm=make_frame("comm", list(comm)),
                   gpu=make_frame("gpu", list(gpu)), events=make_frame("events", list(events), extra_columns=True))


def noisy(n, mean, sd=0.0, seed=0, warm=()) -> list[float]:
    """n step times around ``mean`` (+ leading warm-up times)."""
    rng = np.random.default_rng(seed)
    body = mean + sd * rng.standard_normal(n - len(warm))
    return list(warm) + [float(x) for x in body]
