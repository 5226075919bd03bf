"""Synthetic logkit sessions on disk, written as the emitter writes them (LOG_FORMATS.md)."""

from __future__ import annotations

from datetime import datetime, timedelta
from pathlib import Path

import orjson

__all__ = ["write_session", "rank_file", "summary_file", "append_bytes"]


def rank_file(folder: Path, session_id: str, rank: int) -> Path:
    return folder / f"{session_id}_rank{rank}.jsonl"


def summary_file(folder: Path, session_id: str) -> Path:
    return folder / f"{session_id}_summary.json"


def append_bytes(path: Path, data: bytes) -> None:
    with open(path, "ab") as fh:
        fh.write(data)


class _Stream:
    """One rank's records, stamped with the rank's current ``elapsed`` seconds."""

    def __init__(self, t0: datetime, session_id: str, rank: int, world_size: int) -> None:
        self.t0, self.session_id, self.rank, self.world_size = t0, session_id, rank, world_size
        self.elapsed = 0.0
        self.lines: list[bytes] = []

    def rec(self, type_: str, message: str, level: str = "INFO", step: int | None = None, **fields) -> None:
        r = {
            "timestamp": (self.t0 + timedelta(seconds=self.elapsed)).isoformat(timespec="microseconds"),
            "elapsed_s": round(self.elapsed, 6), "type": type_, "level": level, "message": message,
            "session_id": self.session_id, "rank": self.rank, "world_size": self.world_size,
        }
        if step is not None:
            r["step"] = step
        r.update(fields)
        self.lines.append(orjson.dumps(r))


def write_session(
    root: Path,
    session_id: str,
    *,
    world_size: int = 1,
    step_times: list[float] | tuple[float, ...] = (0.5,) * 10,
    total_batch_size: int = 8,
    losses: list[float | None] | None = None,
    start: str = "2026-11-22T01:40:04.123456+00:00",
    gpu_count: int = 0,
    summary: bool = True,
    jsonl: bool = True,
    end: bool = True,
    message_extra: str = "",
    gpu_util: tuple[float, ...] = (80.0, 90.0),
) -> Path:
    """Write ``root/session_id/`` with one JSONL stream per rank and (optionally) summary.json.

    Every rank logs the same ``step_times``; each step's record carries ``total_batch_size``.
    """
    folder = root / session_id
    folder.mkdir(parents=True, exist_ok=True)
    t0 = datetime.fromisoformat(start)
    n = len(step_times)
    losses = list(losses) if losses is not None else [round(3.0 - 0.1 * i, 4) for i in range(n)]
    cuda = gpu_count > 0
    mode = ("MULTI-GPU" if world_size > 1 else "SINGLE-GPU") if cuda else ("MULTI-CPU" if world_size > 1 else "CPU")
    duration = 1.0 + sum(step_times) + 0.5
    for rank in range(world_size if jsonl else 0):
        out = _Stream(t0, session_id, rank, world_size)
        rec = out.rec
        rec("session_start", f"Session {session_id} started{message_extra}", mode=mode, local_rank=rank,
            hostname="host-a", backend=("nccl" if cuda else "gloo") if world_size > 1 else None,
            mixed_precision="no", model_name="tiny-llama", gpu_count=gpu_count,
            device=f"cuda:{rank}" if cuda else "cpu", per_device_batch_size=total_batch_size // world_size,
            gradient_accumulation_steps=1, total_batch_size=total_batch_size, max_steps=n,
            config={"lr": 1e-4}, versions={"python": "3.11.7", "torch": "2.4.0"},
            gpus=[{"index": i, "name": "NVIDIA H100", "uuid": f"GPU-{i}", "memory_total_mb": 81559.0}
                  for i in range(gpu_count)])
        out.elapsed = 1.0
        for i, st in enumerate(step_times):
            out.elapsed += st
            step = i + 1
            rec("training_step_complete", f"Step {step} completed", step=step, max_steps=n, epoch=step / n,
                timing={"step_time_seconds": st, "avg_step_time_seconds": st, "data_time_seconds": st / 10,
                        "eta_minutes": 0.1, "estimated_completion": None},
                metrics={"loss": losses[i], "learning_rate": 1e-4, "grad_norm": 1.5,
                         "samples_per_second": total_batch_size / st, "tokens_per_second": None,
                         "total_batch_size": total_batch_size})
            if world_size > 1:
                rec("communication", "gradient_sync bucket 0", step=step, op="gradient_sync",
                    size_bytes=4_000_000, duration_ms=2.0, algbw_mb_s=2000.0, busbw_mb_s=2000.0,
                    group_size=world_size, bucket=0, timing_source="wall")
        rec("performance", f"Performance over {n} steps", step=n, window_steps=n,
            avg_step_time_s=sum(step_times) / n, throughput_samples_s=total_batch_size * n / sum(step_times),
            total_batch_size=total_batch_size)
        rec("evaluation", f"Evaluation at step {n}", step=n, metrics={"eval_loss": 2.0, "eval_perplexity": 7.389})
        if cuda:
            for util in gpu_util:
                rec("gpu_snapshot", "GPU snapshot", hostname="host-a", devices=[
                    {"index": rank, "utilization_percent": util, "memory_used_mb": 40000.0,
                     "memory_total_mb": 80000.0, "memory_usage_percent": 50.0, "temperature_c": 60.0,
                     "power_w": 300.0, "sm_clock_mhz": 1900.0}])
        rec("resource_warning", "memory high", level="WARNING", kind="memory_high", value=91.0, threshold=90.0)
        if end:
            out.elapsed = duration
            rec("session_end", f"Session {session_id} completed", status="completed", duration_s=duration,
                total_steps=n, final_loss=losses[-1], training_time_s=sum(step_times),
                samples_seen=total_batch_size * n)
        rank_file(folder, session_id, rank).write_bytes(b"\n".join(out.lines) + b"\n")
    if summary:
        train = sum(step_times)
        doc = {
            "session_id": session_id, "mode": mode, "gpu_count": gpu_count, "world_size": world_size,
            "model": "tiny-llama", "start_time": start,
            "end_time": (t0 + timedelta(seconds=duration)).isoformat(timespec="microseconds"),
            "duration_seconds": duration, "total_steps": n, "final_loss": losses[-1],
            "steps_per_second": n / train, "samples_per_second": n * total_batch_size / train,
            "total_batch_size": total_batch_size,
            "gpus": [{"index": i, "name": "NVIDIA H100", "avg_util": None, "peak_util": None,
                      "avg_memory_pct": None} for i in range(gpu_count)],
            "communication": {}, "status": "completed",
        }
        summary_file(folder, session_id).write_bytes(orjson.dumps(doc, option=orjson.OPT_INDENT_2))
    return folder
