"""LLaMA-Factory's own files and lines.

- ``trainer_log.jsonl`` (``LogCallback.on_log``: one JSON object per logging step, rank 0 only):
  ``current_steps``, ``total_steps``, ``loss``, ``lr`` (``learning_rate`` before 0.9), ``epoch``,
  ``eval_loss``, ``percentage``, ``elapsed_time`` / ``remaining_time`` (``h:mm:ss``, whole seconds),
  ``throughput`` / ``total_tokens`` (with ``include_num_input_tokens_seen``). An entry without a loss is
  progress only (an evaluation's or a prediction run's: ``on_prediction_step`` writes every fifth step).
  -> ``steps`` (rank 0, ``time_s``: the elapsed time), ``evals``, meta (``max_steps``, ``total_steps``,
  ``final_loss``, ``progress``, ``framework``).
- its log lines (``running_log.txt`` and the console): the prefix of its formatter,
  ``[INFO|2025-04-29 14:29:06] logging.py:143 >> message`` (0.9 on), beside transformers' explicit
  format ``[INFO|trainer.py:2134] 2024-06-06 10:00:00,123 >> message`` that it switches on
  (``peel``); its per-process banner is read with the Trainer's (``hf_trainer_lines``).
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from logkit.ingest.readers.base import Read, ReadResult, iter_lines
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.hf_trainer_lines import seconds
from logkit.schema.values import as_int, to_float

_LEVEL = r"(?P<level>DEBUG|INFO|WARNING|WARN|ERROR|CRITICAL)"
_STAMP = r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:[,.]\d+)?"
# LLaMA-Factory's formatter: [LEVEL|time] name:line >> message
_OURS = re.compile(rf"^\[{_LEVEL}\|(?P<date>{_STAMP})\] (?P<where>\S+:\d+) >> ?(?P<msg>.*)$")
# transformers' explicit format: [LEVEL|file:line] time >> message
_EXPLICIT = re.compile(rf"^\[{_LEVEL}\|(?P<where>[\w.-]+:\d+)\] (?P<date>{_STAMP}) >> ?(?P<msg>.*)$")


def peel(text: str) -> tuple[str, str, str, str] | None:
    """(framework, level, time stamp, message) of a line in LLaMA-Factory's or transformers' explicit log
    format; None for any other line."""
    if not text.startswith("[") or ">>" not in text:
        return None
    if (m := _OURS.match(text)) is not None:
        return "llamafactory", m["level"], m["date"], m["msg"]
    if (m := _EXPLICIT.match(text)) is not None:
        return "transformers", m["level"], m["date"], m["msg"]
    return None


def read_trainer_log(path: Path, rank: int | None = None) -> ReadResult:
    """``trainer_log.jsonl`` -> steps and evals of rank 0, progress and totals in meta."""
    read = Read(Path(path), FileFormat.LLAMAFACTORY_LOG, time_base="elapsed")
    last_loss, last_step, total, progress = None, None, None, None
    for number, line in iter_lines(read.path, read):
        if not line.strip():
            continue
        read.lines += 1
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError:
            read.unmatched(number, line)  # a torn or foreign line: counted with the lines no grammar reads
            continue
        if not isinstance(entry, dict) or "current_steps" not in entry:
            read.unmatched(number, line)
            continue
        read.used += 1
        step, total = as_int(entry.get("current_steps")), as_int(entry.get("total_steps")) or total
        elapsed = entry.get("elapsed_time")
        t = seconds(elapsed) if isinstance(elapsed, str) else None
        progress = {"step": step, "total": total, "line": number}
        if "epoch" in entry and step is not None:  # a training entry (an evaluation's or prediction's has none)
            last_step = step
        if "loss" in entry:
            row = read.step(number, {
                "rank": 0, "step": step, "time_s": t, "loss": to_float(entry.get("loss")),
                "learning_rate": to_float(entry.get("lr", entry.get("learning_rate"))),
                "grad_norm": to_float(entry.get("grad_norm")), "epoch": to_float(entry.get("epoch")),
                "tokens_seen": to_float(entry.get("total_tokens"))})
            last_loss = row["loss"]
        if "eval_loss" in entry:
            read.rows["evals"].append({"step": step, "name": "eval_loss", "value": to_float(entry["eval_loss"]),
                                       "rank": 0, "time_s": t, "epoch": to_float(entry.get("epoch"))})
    read.meta.update(framework="llamafactory", progress=progress, max_steps=total, total_steps=last_step,
                     final_loss=last_loss)
    return read.result()
