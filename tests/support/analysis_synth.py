"""In-memory sessions for the analysis tests: frames built directly, no files."""

from __future__ import annotations

import numpy as np

from logkit.ingest.session import Session, make_frame

__all__ = ["session", "step_rows", "comm_rows", "gpu_rows", "event_rows", "noisy", "write_jsonl_session",
           "phased_session"]


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


def write_jsonl_session(root, sid: str, *, world_size: int = 1, step_times=(0.5,) * 20, total_batch_size: int = 8,
                        tokens_per_step: int | None = None, gpus: list[dict] | None = None,
                        model_info: dict | None = None, mode: str | None = None, backend: str | None = None,
                        start: str = "2026-11-22T01:00:00+00:00"):
    """A logkit session folder on disk, one JSONL stream per rank, with the records LOG_FORMATS.md names:
    session_start (gpus), model_info (when given), training_step_complete (tokens_per_second when
    ``tokens_per_step``), session_end. Returns the folder."""
    from datetime import datetime, timedelta
    from pathlib import Path

    import orjson

    folder = Path(root) / sid
    folder.mkdir(parents=True, exist_ok=True)
    t0 = datetime.fromisoformat(start)
    gpus = gpus or []
    mode = mode or (("MULTI-GPU" if world_size > 1 else "SINGLE-GPU") if gpus else "CPU")
    for rank in range(world_size):
        clock = {"elapsed": 0.0}
        lines = []

        def rec(type_, message, step=None, _rank=rank, _lines=lines, _clock=clock, **fields):
            elapsed = _clock["elapsed"]
            r = {"timestamp": (t0 + timedelta(seconds=elapsed)).isoformat(timespec="microseconds"),
                 "elapsed_s": round(elapsed, 6), "type": type_, "level": "INFO", "message": message,
                 "session_id": sid, "rank": _rank, "world_size": world_size}
            if step is not None:
                r["step"] = step
            r.update(fields)
            _lines.append(orjson.dumps(r))

        rec("session_start", f"Session {sid} started", mode=mode, local_rank=rank, hostname="h", backend=backend,
            mixed_precision="bf16", model_name="test-model", gpu_count=len(gpus), total_batch_size=total_batch_size,
            max_steps=len(step_times), config={"seq_len": 2048}, versions={}, gpus=gpus)
        if model_info is not None:
            rec("model_info", "Model parameters", **model_info)
        for i, st in enumerate(step_times):
            clock["elapsed"] += st
            tps = round(tokens_per_step / st, 2) if tokens_per_step else None
            rec("training_step_complete", f"Step {i + 1} completed", step=i + 1, max_steps=len(step_times),
                epoch=(i + 1) / len(step_times),
                timing={"step_time_seconds": st, "avg_step_time_seconds": st, "data_time_seconds": None,
                        "eta_minutes": None, "estimated_completion": None},
                metrics={"loss": 3.0 - 0.01 * i, "learning_rate": 1e-4, "grad_norm": 1.0,
                         "samples_per_second": total_batch_size / st, "tokens_per_second": tps,
                         "total_batch_size": total_batch_size})
        clock["elapsed"] += 0.5
        rec("session_end", "Session completed", status="completed", duration_s=clock["elapsed"],
            total_steps=len(step_times), final_loss=3.0 - 0.01 * (len(step_times) - 1))
        (folder / f"{sid}_rank{rank}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return folder


def phased_session(syncs: dict[int, list[float]], data: dict[int, list[float]], compute: dict[int, list[float]],
                   step: float = 0.1) -> Session:
    """A session of ranks with the given per-step sync, data and compute times (step time ``step``)."""
    s = Session.empty({"session_id": "made_up", "world_size": len(syncs)})
    s.phases = make_frame("phases", [{"rank": r, "step": i + 1, "sync_s": v, "compute_s": compute[r][i]}
                                     for r, vs in syncs.items() for i, v in enumerate(vs)])
    s.steps = make_frame("steps", [{"rank": r, "step": i + 1, "data_time_s": data[r][i], "step_time_s": step}
                                   for r, vs in syncs.items() for i in range(len(vs))])
    return s
