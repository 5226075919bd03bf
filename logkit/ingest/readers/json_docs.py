"""JSON documents that describe a whole run: transformers' ``trainer_state.json``, the
``results.json`` a training script writes beside a run folder, and the nested
``*_summary.json`` of an older logging system (session{}, training_metrics[], ...).

Each gives meta (and, where it holds them, step/eval/gpu/comm rows at rank 0).
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import orjson

from logkit.ingest.readers.base import Read, ReadResult, read_bytes
from logkit.ingest.readers.formats import FileFormat
from logkit.schema.files import RESULTS_JSON
from logkit.schema.values import as_float, as_int, as_text, check
from logkit.schema.vocab import Mode, Status

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


def line_of(read: Read, key: str, after: str | None = None, top: bool = False) -> int | None:
    """The line the document as it lies on disk first writes ``key`` on (its text: ``'"stage"'``): the first
    at or after the line that holds ``after``, where given; ``top``: only at the top level of ``json.dump(indent=2)``
    (one key a line, two spaces before it)."""
    started = after is None
    text = read_bytes(read.path, Read(read.path, read.format)).decode("utf-8", errors="replace")  # no notes twice
    for number, line in enumerate(text.splitlines(), 1):
        started = started or after in line
        if started and (line.startswith("  " + key) and line[2] != " " if top else key in line):
            return number
    return None


def normal_mode(mode, device=None, world_size=None) -> str | None:
    """Other spellings ("multi-gpu", "single_gpu") as the contract's Mode values."""
    if not isinstance(mode, str):
        return None
    m = mode.strip().upper().replace("_", "-")
    if device == "cpu" and "GPU" in m:
        m = Mode.MULTI_CPU if (world_size or 1) > 1 or m.startswith("MULTI") else Mode.CPU
    return m


class _Numbers:
    """The numbers of one object of a document, each read by its type (``as_float``, ``as_int``); a value
    there that is no such number (text, an integer beyond 64 bits) is noted, never a crash later."""

    def __init__(self, read: Read, doc: dict, where: str = "") -> None:
        self.read, self.doc, self.where = read, doc, where

    def _got(self, key: str, value, kind: type):
        raw = self.doc.get(key)
        if value is None and raw is not None:
            self.read.note(None, f"{self.where}{key}: {check(raw, kind) or f'not read ({raw!r:.40})'}: left unknown")
        return value

    def float(self, key: str) -> float | None:
        return self._got(key, as_float(self.doc.get(key)), float)

    def int(self, key: str) -> int | None:
        return self._got(key, as_int(self.doc.get(key)), int)


def read_trainer_state(path: Path, rank: int | None = None) -> ReadResult:
    """``log_history`` -> steps (entries with ``loss``) and evals (``eval_*``); the final summary
    entry and the top-level keys -> meta. Older versions lack some keys: they stay None."""
    read = Read(Path(path), FileFormat.TRAINER_STATE, time_base="elapsed")
    doc = load_doc(read)
    if doc is None:
        return read.result()
    history = doc.get("log_history")
    if not isinstance(history, list):
        read.note(None, "trainer_state.json without a log_history list")
        history = []
    for i, entry in enumerate(history):
        if not isinstance(entry, dict):
            read.note(None, f"log_history[{i}] is not an object", str(entry)[:200])
            continue
        num = _Numbers(read, entry, f"log_history[{i}].")
        step = num.int("step")
        if "loss" in entry:
            read.step(None, {"rank": 0, "step": step, "loss": num.float("loss"),
                             "learning_rate": num.float("learning_rate"), "grad_norm": num.float("grad_norm"),
                             "epoch": num.float("epoch"), "tokens_seen": num.float("num_input_tokens_seen")})
        elif any(str(k).startswith("eval_") for k in entry):
            for key in entry:
                if str(key).startswith("eval_"):
                    read.rows["evals"].append({"step": step, "name": str(key), "value": num.float(key), "rank": 0})
        elif any(k in entry for k in _SUMMARY_KEYS):
            read.meta.update({
                "training_time_s": num.float("train_runtime"),
                "samples_per_second": num.float("train_samples_per_second"),
                "steps_per_second": num.float("train_steps_per_second"),
                "train_loss": num.float("train_loss"),
            })
    top = _Numbers(read, doc)
    read.meta.update({
        "total_steps": top.int("global_step"), "max_steps": top.int("max_steps"),
        "logging_steps": top.int("logging_steps"), "train_batch_size": top.int("train_batch_size"),
        "total_flos": top.float("total_flos"), "best_metric": top.float("best_metric"),
        "num_train_epochs": top.float("num_train_epochs"), "epoch": top.float("epoch"),
    })
    losses = [r["loss"] for r in read.rows["steps"] if r["loss"] is not None]
    if losses:
        read.meta.final_loss = losses[-1]
    return read.result()


def read_results_json(path: Path, rank: int | None = None) -> ReadResult:
    """A run folder's ``results.json``: mode, duration, steps/s, total steps, GPU count -> meta."""
    read = Read(Path(path), FileFormat.RESULTS_JSON, time_base="elapsed")
    doc = load_doc(read)
    if doc is None:
        return read.result()
    v = RESULTS_JSON.read(doc, note=lambda text: read.note(None, text))
    world = v["num_processes"] or v["world_size"] or v["gpu_count"]
    read.meta.update({"mode": normal_mode(v["mode"], v["device"], world), "world_size": world})
    read.meta.update({k: v[k] for k in ("gpu_count", "duration_s", "steps_per_second", "samples_per_second",
                                        "total_steps", "final_loss", "model", "config", "session", "optimizations")})
    read.meta.status = Status.COMPLETED
    if read.meta.duration_s is not None:
        read.meta.duration_from = "results.json"
    return read.result()


def read_legacy_summary(path: Path, rank: int | None = None) -> ReadResult:
    """An older logging system's nested summary: session{}, training_metrics[], gpu_snapshots[],
    communication_logs[]."""
    read = Read(Path(path), FileFormat.LEGACY_SUMMARY, time_base="elapsed")
    doc = load_doc(read)
    if doc is None:
        return read.result()
    session = doc.get("session") if isinstance(doc.get("session"), dict) else {}
    gpus = as_int(session.get("gpu_count"))
    read.meta.update({
        "session_id": as_text(session.get("id")) or as_text(session.get("session_id")),
        "mode": normal_mode(session.get("mode")), "duration_s": as_float(session.get("duration_seconds")),
        "gpu_count": gpus, "world_size": gpus, "model": as_text(session.get("model")),
        "start_time": as_text(session.get("start_time")), "end_time": as_text(session.get("end_time")),
    })
    for item in _objects(read, doc, "training_metrics"):
        read.rows["steps"].append({
            "rank": 0, "step": as_int(item.get("step")), "loss": as_float(item.get("loss")),
            "learning_rate": as_float(item.get("learning_rate")), "step_time_s": as_float(item.get("step_time")),
            "epoch": as_float(item.get("epoch"))})
    for i, snap in enumerate(_objects(read, doc, "gpu_snapshots")):
        devices = snap.get("gpus") if isinstance(snap.get("gpus"), list) else []
        for j, dev in enumerate(d for d in devices if isinstance(d, dict)):
            index = as_int(dev.get("index"))
            read.rows["gpu"].append({
                "time_s": as_float(snap.get("elapsed_s")), "host": "", "gpu": j if index is None else index,
                "utilization_pct": as_float(dev.get("utilization")),
                "memory_usage_pct": as_float(dev.get("memory_percent")),
                "memory_used_mb": as_float(dev.get("memory_used_mb")),
                "memory_total_mb": as_float(dev.get("memory_total_mb")),
                "temperature_c": as_float(dev.get("temperature")), "power_w": as_float(dev.get("power")), "sample": i,
                "timestamp": as_text(snap.get("timestamp")),
            })
    for item in _objects(read, doc, "communication_logs"):
        size_mb = as_float(item.get("data_size_mb"))
        read.rows["comm"].append({"rank": as_int(item.get("rank")) or 0, "step": as_int(item.get("step")),
                                  "op": as_text(item.get("operation")),
                                  "size_bytes": round(size_mb * 1e6) if _finite(size_mb) else None,
                                  "duration_ms": as_float(item.get("duration_ms")), "source": read.label})
    return read.result()


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


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
