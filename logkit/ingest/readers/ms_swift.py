"""ms-swift's own output files (``swift sft`` / ``swift rlhf`` / ``swift pt``), in its run folder
(``<output_dir>/v0-<time>/``):

- ``logging.jsonl`` (``swift.trainers``' log callback: one JSON object per logging step, rank 0 only): the
  Trainer's log dict (``loss``, ``grad_norm``, ``learning_rate``, ``epoch``, ``eval_*`` of an evaluation,
  ``train_runtime`` / ``train_loss`` / the rates of the summary) with ms-swift's own keys,
  ``global_step/max_steps`` (``"430/438"``), ``percentage``, ``elapsed_time`` / ``remaining_time``
  (``"46m 13s"``), ``memory(GiB)``, ``train_speed(iter/s)`` (2.x: an integer ``global_step`` alone, each
  record written twice); then, at the end, a record of the run's
  results (dataset sizes, ``last_model_checkpoint``, ``best_metric``, ``log_history`` again: not read twice).
  -> ``steps`` (rank 0; ``time_s`` the elapsed time), ``evals``, meta (the summary's figures, progress,
  ``max_steps``, ``total_steps``, ``final_loss``, ``framework``).
- ``args.json`` (its arguments, written at start): ``global_world_size`` (the job's processes: the world
  size, stated with its line), the batch sizes, the model.
"""

from __future__ import annotations

import re
from pathlib import Path

import orjson

from logkit.ingest.readers.base import Read, ReadResult, iter_lines
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.json_docs import _Numbers, line_of, load_doc
from logkit.schema.values import as_int, to_float

FRAMEWORK = "ms-swift"
_PROGRESS = re.compile(r"^\s*(?P<step>\d+)\s*/\s*(?P<total>\d+)\s*$")
_DURATION = re.compile(r"(?P<n>\d+(?:\.\d+)?)\s*(?P<unit>[dhms])\b")
_UNIT_S = {"d": 86400, "h": 3600, "m": 60, "s": 1}
# the summary's keys -> meta keys (as transformers' *_results.json: trainer_results)
_SUMMARY = {"train_runtime": "duration_s", "train_loss": "train_loss", "train_samples_per_second": "samples_per_second",
            "train_steps_per_second": "steps_per_second", "total_flos": "total_flos"}
# the Trainer's keys a logging record of 2.x holds beside its integer global_step
_TRAINER_KEYS = {"loss", "eval_loss", "train_runtime"}
_EVAL_RATES = ("eval_runtime", "eval_samples_per_second", "eval_steps_per_second")
# args.json key -> (meta key, type)
_ARGS = {"per_device_train_batch_size": "per_device_batch_size", "gradient_accumulation_steps": "gradient_accumulation_steps"}


def seconds(text) -> float | None:
    """``"1h 2m 3s"``, ``"46m 13s"``, ``"6s"`` (ms-swift's ``format_time``) in seconds; None for other text."""
    if not isinstance(text, str) or not text.strip():
        return None
    parts = _DURATION.findall(text)
    if not parts or _DURATION.sub("", text).strip():
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _entry(read: Read, number: int, line: str) -> dict | None:
    """The line's JSON object, else None (a torn or foreign line: not understood)."""
    try:
        entry = orjson.loads(line)
    except orjson.JSONDecodeError:
        entry = None
    if not isinstance(entry, dict):
        read.unmatched(number, line)
        return None
    return entry


def _step_of(read: Read, entry: dict, number: int, line: str) -> tuple[int, int | None] | None:
    """(step, total) of a logging record (2.x: no total); None for the run's results record (its best
    metric read) or a record of another kind (not understood)."""
    m = _PROGRESS.match(str(entry.get("global_step/max_steps", "")))
    if m is not None:
        return int(m["step"]), int(m["total"])
    if isinstance(entry.get("global_step"), int) and _TRAINER_KEYS & entry.keys():
        return entry["global_step"], None  # 2.x: the step alone, the total nowhere in the record
    if "global_step" in entry or "last_model_checkpoint" in entry:  # the run's results record
        read.used += 1
        if (best := to_float(entry.get("best_metric"))) is not None:
            read.meta.best_metric = best
    else:
        read.unmatched(number, line)
    return None


def _evals(read: Read, entry: dict, step: int, t: float | None, epoch: float | None) -> None:
    for key, value in entry.items():
        if key.startswith("eval_") and key not in _EVAL_RATES and (v := to_float(value)) is not None:
            read.rows["evals"].append({"step": step, "name": key, "value": v, "rank": 0, "time_s": t, "epoch": epoch})


def _summary(read: Read, entry: dict, number: int, epoch: float | None) -> None:
    """The Trainer's summary at the run's end: its figures in meta, the runtime stated with its line."""
    for key, name in _SUMMARY.items():
        if (v := to_float(entry.get(key))) is not None:
            read.meta[name] = v
    if read.meta.duration_s is not None:
        read.meta.duration_from = f"stated: train_runtime ({read.label}:{number})"
    if epoch is not None:
        read.meta.epoch = epoch


def read_logging_jsonl(path: Path, rank: int | None = None) -> ReadResult:
    """``logging.jsonl`` -> steps and evals of rank 0, the run's summary, progress and totals in meta."""
    read = Read(Path(path), FileFormat.MS_SWIFT_LOG, time_base="elapsed")
    last_loss = last_step = total = progress = first = seen = None
    for number, line in iter_lines(read.path, read):
        if not line.strip():
            continue
        read.lines += 1
        if (entry := _entry(read, number, line)) is None or (at := _step_of(read, entry, number, line)) is None:
            continue
        step, total = at[0], at[1] if at[1] is not None else total
        read.used += 1
        first = first or number
        key = tuple(entry.get(k) for k in ("loss", "grad_norm", "learning_rate", "eval_loss", "train_runtime"))
        if (step, key) == seen:
            continue  # 2.x writes each record twice (only its train_speed differs): once is the record
        seen = (step, key)
        t, epoch = seconds(entry.get("elapsed_time")), to_float(entry.get("epoch"))
        if total is not None:  # how far the run got of how far it was to go (2.x says no total)
            progress = {"step": step, "total": total, "line": number}
        if "loss" in entry:
            row = read.step(number, {
                "rank": 0, "step": step, "time_s": t, "loss": to_float(entry.get("loss")),
                "learning_rate": to_float(entry.get("learning_rate")), "grad_norm": to_float(entry.get("grad_norm")),
                "epoch": epoch})
            last_loss, last_step = row["loss"], step
        _evals(read, entry, step, t, epoch)
        if "train_runtime" in entry:
            last_step = step
            _summary(read, entry, number, epoch)
    if first is not None:
        read.meta.update(framework=FRAMEWORK, facts_source={"framework": f"{read.label}:{first}"},
                         progress=progress, max_steps=total, total_steps=last_step, final_loss=last_loss)
    return read.result()


def read_args_json(path: Path, rank: int | None = None) -> ReadResult:
    """``args.json`` -> the world size (``global_world_size``, stated with its line), the batch sizes, the model."""
    read = Read(Path(path), FileFormat.MS_SWIFT_ARGS)
    doc = load_doc(read)
    if doc is None:
        return read.result()
    num = _Numbers(read, doc)
    world_line = line_of(read, '"global_world_size"', top=True)
    world = as_int(doc.get("global_world_size"))
    if world is not None and world >= 1:
        read.meta.state("world_size", world, "stated", f"global_world_size {world} (ms-swift's args.json)",
                        f"{read.label}:{world_line}" if world_line else read.label)
    for key, name in _ARGS.items():
        if (v := num.int(key)) is not None and v >= 1:
            read.meta[name] = v
    if isinstance(doc.get("model"), str) and doc["model"]:
        read.meta.model = doc["model"]
    read.meta.framework = FRAMEWORK
    read.meta.facts_source = {**(read.meta.facts_source or {}), "framework": read.label}
    return read.result()
