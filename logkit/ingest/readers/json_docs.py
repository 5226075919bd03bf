"""JSON documents that describe a whole run: transformers' ``trainer_state.json``, seed 002's
``results.json``, and the first seed system's nested ``*_summary.json``.

Each gives meta (and, where it holds them, step/eval/gpu/comm rows at rank 0).
"""

from __future__ import annotations

import json
from pathlib import Path

import orjson

from logkit.ingest.readers.base import Read, read_bytes
from logkit.ingest.records import integer, num, text

__all__ = ["load_doc", "read_trainer_state", "read_results_json", "read_legacy_summary", "normal_mode"]

_SUMMARY_KEYS = ("train_runtime", "train_samples_per_second", "train_steps_per_second", "train_loss", "total_flos")


def load_doc(read: Read) -> dict | None:
    """The file's JSON object, or None with a diagnostic (NaN/Infinity literals accepted)."""
    data = read_bytes(read.path, read)
    if not data:
        return None
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        try:  # Python's json writes NaN and Infinity, which orjson refuses
            doc = json.loads(data.decode("utf-8", errors="replace"))
        except (ValueError, RecursionError) as exc:
            read.note(getattr(exc, "lineno", None), f"invalid JSON: {exc}", data[:200].decode("utf-8", "replace"))
            return None
    if not isinstance(doc, dict):
        read.note(1, f"not a JSON object ({type(doc).__name__})")
        return None
    return doc


def normal_mode(mode, device=None, world_size=None) -> str | None:
    """Seed spellings ("multi-gpu", "single_gpu") as the contract's Mode values."""
    if not isinstance(mode, str):
        return None
    m = mode.strip().upper().replace("_", "-")
    if device == "cpu" and "GPU" in m:
        m = "MULTI-CPU" if (world_size or 1) > 1 or m.startswith("MULTI") else "CPU"
    return m


def read_trainer_state(path: Path, rank: int | None = None) -> Read:
    """``log_history`` -> steps (entries with ``loss``) and evals (``eval_*``); the final summary
    entry and the top-level keys -> meta. Older versions lack some keys: they stay None."""
    read = Read(Path(path), "trainer_state", time_base="elapsed")
    doc = load_doc(read)
    if doc is None:
        return read
    history = doc.get("log_history")
    if not isinstance(history, list):
        read.note(None, "trainer_state.json without a log_history list")
        history = []
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            read.note(None, f"log_history[{i}] is not an object", str(entry))
            continue
        step = integer(entry.get("step"))
        if "loss" in entry:
            read.step(None, {"rank": 0, "step": step, "loss": num(entry.get("loss")),
                             "learning_rate": num(entry.get("learning_rate")),
                             "grad_norm": num(entry.get("grad_norm")), "epoch": num(entry.get("epoch")),
                             "tokens_seen": num(entry.get("num_input_tokens_seen"))})
        elif any(str(k).startswith("eval_") for k in entry):
            for key, value in entry.items():
                if str(key).startswith("eval_"):
                    read.rows["evals"].append({"step": step, "name": str(key), "value": num(value), "rank": 0})
        elif any(k in entry for k in _SUMMARY_KEYS):
            read.meta.update({
                "training_time_s": num(entry.get("train_runtime")),
                "samples_per_second": num(entry.get("train_samples_per_second")),
                "steps_per_second": num(entry.get("train_steps_per_second")),
                "train_loss": num(entry.get("train_loss")),
            })
    read.meta.update({
        "total_steps": integer(doc.get("global_step")), "max_steps": integer(doc.get("max_steps")),
        "logging_steps": integer(doc.get("logging_steps")), "train_batch_size": integer(doc.get("train_batch_size")),
        "total_flos": num(doc.get("total_flos")), "best_metric": num(doc.get("best_metric")),
        "num_train_epochs": num(doc.get("num_train_epochs")), "epoch": num(doc.get("epoch")),
    })
    losses = [r["loss"] for r in read.rows["steps"] if r["loss"] is not None]
    if losses:
        read.meta["final_loss"] = losses[-1]
    return read


def read_results_json(path: Path, rank: int | None = None) -> Read:
    """Seed 002's ``results.json``: mode, duration, steps/s, total steps, GPU count -> meta."""
    read = Read(Path(path), "results_json", time_base="elapsed")
    doc = load_doc(read)
    if doc is None:
        return read
    gpus = integer(doc.get("num_gpus"))
    world = integer(doc.get("num_processes")) or integer(doc.get("world_size")) or gpus
    read.meta.update({
        "mode": normal_mode(doc.get("mode"), text(doc.get("device")), world),
        "world_size": world, "gpu_count": gpus, "duration_s": num(doc.get("duration_seconds")),
        "steps_per_second": num(doc.get("steps_per_second")),
        "samples_per_second": num(doc.get("samples_per_second")),
        "total_steps": integer(doc.get("total_steps")), "final_loss": num(doc.get("final_loss")),
        "model": text(doc.get("model_name")), "config": doc.get("config"), "session": text(doc.get("session")),
        "optimizations": doc.get("optimizations"), "status": "completed",
    })
    if read.meta["duration_s"] is not None:
        read.meta["duration_from"] = "results.json"
    return read


def read_legacy_summary(path: Path, rank: int | None = None) -> Read:
    """The first seed system's nested summary: session{}, training_metrics[], gpu_snapshots[],
    communication_logs[]."""
    read = Read(Path(path), "legacy_summary", time_base="elapsed")
    doc = load_doc(read)
    if doc is None:
        return read
    session = doc.get("session") if isinstance(doc.get("session"), dict) else {}
    gpus = integer(session.get("gpu_count"))
    read.meta.update({
        "session_id": text(session.get("id")) or text(session.get("session_id")),
        "mode": normal_mode(session.get("mode")), "duration_s": num(session.get("duration_seconds")),
        "gpu_count": gpus, "world_size": gpus, "model": text(session.get("model")),
        "start_time": text(session.get("start_time")), "end_time": text(session.get("end_time")),
    })
    for item in _objects(read, doc, "training_metrics"):
        read.rows["steps"].append({"rank": 0, "step": integer(item.get("step")), "loss": num(item.get("loss")),
                                   "learning_rate": num(item.get("learning_rate")),
                                   "step_time_s": num(item.get("step_time")), "epoch": num(item.get("epoch"))})
    for i, snap in enumerate(_objects(read, doc, "gpu_snapshots")):
        devices = snap.get("gpus") if isinstance(snap.get("gpus"), list) else []
        for j, dev in enumerate(d for d in devices if isinstance(d, dict)):
            index = integer(dev.get("index"))
            read.rows["gpu"].append({
                "time_s": num(snap.get("elapsed_s")), "host": "", "gpu": j if index is None else index,
                "utilization_pct": num(dev.get("utilization")), "memory_usage_pct": num(dev.get("memory_percent")),
                "memory_used_mb": num(dev.get("memory_used_mb")), "memory_total_mb": num(dev.get("memory_total_mb")),
                "temperature_c": num(dev.get("temperature")), "power_w": num(dev.get("power")), "sample": i,
                "timestamp": text(snap.get("timestamp")),
            })
    for item in _objects(read, doc, "communication_logs"):
        size_mb = num(item.get("data_size_mb"))
        read.rows["comm"].append({"rank": integer(item.get("rank")) or 0, "step": integer(item.get("step")),
                                  "op": text(item.get("operation")),
                                  "size_bytes": round(size_mb * 1e6) if size_mb is not None else None,
                                  "duration_ms": num(item.get("duration_ms")), "source": read.label})
    return read


def _objects(read: Read, doc: dict, key: str) -> list[dict]:
    items = doc.get(key)
    if items is None:
        return []
    if not isinstance(items, list):
        read.note(None, f"{key} is not a list")
        return []
    bad = sum(1 for x in items if not isinstance(x, dict))
    if bad:
        read.note(None, f"{bad} entries of {key} are not objects")
    return [x for x in items if isinstance(x, dict)]
