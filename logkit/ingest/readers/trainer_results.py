"""transformers' ``Trainer.save_metrics`` documents: ``train_results.json``, ``eval_results.json``,
``predict_results.json`` and ``all_results.json`` (all of them merged), which the example scripts,
LLaMA-Factory, TRL and axolotl write at a run's end: ``train_runtime`` (seconds), ``train_loss`` (the
mean loss over the run), ``train_samples_per_second``, ``train_steps_per_second``, ``epoch``,
``total_flos``, ``num_input_tokens_seen``, ``eval_*`` (the last evaluation), ``predict_*``.

-> meta (``duration_s`` from ``train_runtime``, stated; ``train_loss``; the rates; ``epoch``), and the
``eval_*`` values as an ``evals`` row each (its step unknown).
"""

from __future__ import annotations

from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.json_docs import _Numbers, load_doc

# key of the document -> meta key
_META = {"train_runtime": "duration_s", "train_loss": "train_loss", "train_samples_per_second": "samples_per_second",
         "train_steps_per_second": "steps_per_second", "epoch": "epoch", "total_flos": "total_flos"}


def read_trainer_results(path: Path, rank: int | None = None) -> ReadResult:
    """One of ``*_results.json``: its run totals as meta, its evaluation as evals rows."""
    read = Read(Path(path), FileFormat.TRAINER_RESULTS, time_base="elapsed")
    doc = load_doc(read)
    if doc is None:
        return read.result()
    num = _Numbers(read, doc)
    for key, name in _META.items():
        if key in doc and (value := num.float(key)) is not None:
            read.meta[name] = value
    if read.meta.duration_s is not None:  # where it came from, in the words of the facts' provenance
        read.meta.duration_from = f"stated: train_runtime ({read.label})"
    for key in doc:
        if str(key).startswith("eval_") and key not in ("eval_runtime", "eval_samples_per_second",
                                                         "eval_steps_per_second"):
            read.rows["evals"].append({"step": None, "name": str(key), "value": num.float(key), "rank": 0})
    return read.result()
