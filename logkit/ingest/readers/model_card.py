"""The model card transformers' Trainer writes beside a run's output (``README.md``, ``Trainer.create_model_card``;
LLaMA-Factory, TRL and axolotl runs leave one too): its hyperparameter list states the run's shape::

    The following hyperparameters were used during training:
    - train_batch_size: 8
    - distributed_type: multi-GPU
    - num_devices: 8
    - gradient_accumulation_steps: 2
    - total_train_batch_size: 64

``num_devices`` is the Trainer's ``args.world_size`` (written only where it ran distributed), and
``total_train_batch_size`` its ``train_batch_size x world_size x gradient_accumulation_steps`` (written only
where it differs from ``train_batch_size``). -> meta: ``world_size`` and ``gpu_count`` (one process per GPU
under the Trainer), ``total_batch_size``, ``train_batch_size``, ``gradient_accumulation_steps``, stated with
their line. The rest of the card (prose, the results table, the framework versions) carries nothing kept.
"""

from __future__ import annotations

import re
from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.normalise import Grammar, records

HEADING = "The following hyperparameters were used during training:"
_ITEM = re.compile(r"^- (?P<key>[a-z_]+): (?P<value>\S.*?)\s*$")
# how a line of the card begins: a list item, a heading, a table row, prose
GRAMMAR = Grammar(re.compile(r"- |#|\||The following|[A-Za-z<\[]"))
_INTS = ("train_batch_size", "num_devices", "gradient_accumulation_steps", "total_train_batch_size")


def read_model_card(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.MODEL_CARD)
    items: dict[str, tuple[int, int]] = {}  # key -> (value, line)
    inside = False
    for rec in records(read, GRAMMAR):
        # every line is the card's (its prose, tables and versions are read as the card's and carry nothing kept)
        number, line = rec.number, rec.text
        read.used += 1
        text = line.strip()
        if text == HEADING:
            inside = True
            continue
        if not inside:
            continue
        if (m := _ITEM.match(text)) is None:
            inside = False  # the list ends at its first line that is no item
            continue
        if m["key"] in _INTS:
            if m["value"].isdigit():
                items.setdefault(m["key"], (int(m["value"]), number))
            else:
                read.note(number, f"model card: {m['key']} is not a whole number", line)
    _meta(read, items)
    return read.result()


def _meta(read: Read, items: dict[str, tuple[int, int]]) -> None:
    meta, label = read.meta, read.label
    if "num_devices" in items:
        n, number = items["num_devices"]
        for fact in ("world_size", "gpu_count"):
            meta.state(fact, n, "stated", f"num_devices: {n} (the Trainer's model card)", f"{label}:{number}")
    if "total_train_batch_size" in items:
        n, number = items["total_train_batch_size"]
        meta.state("total_batch_size", n, "stated", f"total_train_batch_size: {n} (the Trainer's model card)",
                   f"{label}:{number}")
    for key in ("train_batch_size", "gradient_accumulation_steps"):
        if key in items:
            meta[key] = items[key][0]
