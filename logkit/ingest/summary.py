"""Read rank 0's ``<sid>_summary.json`` (LOG_FORMATS.md, summary.json) into meta fields."""

from __future__ import annotations

from pathlib import Path

import orjson

from logkit.ingest.jsonl import diagnostic

__all__ = ["read_summary", "summary_meta"]


def read_summary(path: str | Path) -> tuple[dict | None, list[dict]]:
    """The summary document (or None) and diagnostics; never raises on content."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        return None, [diagnostic(str(path), None, f"unreadable: {exc}")]
    try:
        doc = orjson.loads(data.decode("utf-8", errors="replace"))
    except orjson.JSONDecodeError as exc:
        text = data[:200].decode("utf-8", errors="replace")
        return None, [diagnostic(str(path), getattr(exc, "lineno", None), f"invalid JSON: {exc}", text)]
    if not isinstance(doc, dict):
        return None, [diagnostic(str(path), 1, f"not a JSON object ({type(doc).__name__})")]
    return doc, []


def summary_meta(doc: dict) -> dict:
    """Meta fields from a summary document, named as ``Session.meta`` names them."""
    return {
        "session_id": doc.get("session_id"),
        "mode": doc.get("mode"),
        "world_size": doc.get("world_size"),
        "gpu_count": doc.get("gpu_count"),
        "model": doc.get("model"),
        "backend": doc.get("backend"),
        "start_time": doc.get("start_time"),
        "end_time": doc.get("end_time"),
        "duration_s": doc.get("duration_seconds"),
        "status": doc.get("status"),
        "total_batch_size": doc.get("total_batch_size"),
        "total_steps": doc.get("total_steps"),
        "final_loss": doc.get("final_loss"),
        "steps_per_second": doc.get("steps_per_second"),
        "samples_per_second": doc.get("samples_per_second"),
    }
