"""unsloth's banners in a console log (its sloth drawn down the left of five lines, ``Key = value`` pairs
split by ``|``), as unsloth and unsloth-zoo write them across versions.

The training banner (unsloth-zoo's patched ``_inner_training_loop``)::

    ==((====))==  Unsloth - 2x faster free finetuning | Num GPUs used = 1
       \\\\   /|    Num examples = 6,261 | Num Epochs = 1 | Total steps = 196
    O^O/ \\_/ \\    Batch size per device = 16 | Gradient accumulation steps = 2
    \\        /    Data Parallel GPUs = 1 | Total batch size (16 x 2 x 1) = 32
     "-____-"     Trainable parameters = 66,060,288 of 4,073,997,824 (1.62% trained)

``Num GPUs used`` counts the devices the model's parameters lie on in one process; ``Data Parallel GPUs``
is the Trainer's ``world_size``. Before 2024.x the banner said ``Num GPUs = 8`` (``args.world_size``),
``Total batch size = 64 | Total steps = 99,486`` and ``Number of trainable parameters``. A banner printed
again (unsloth retrying with a smaller batch after running out of memory) replaces the one before it. The model
loading banner (``Unsloth 2025.3.14: Fast Llama patching ...``, ``NVIDIA A100. Num GPUs = 1. Max memory``:
the GPUs visible to the process, not those the run used) and ``Unsloth: ...`` notes carry nothing kept.
"""

from __future__ import annotations

import re

from logkit.ingest.readers.stated_facts import Facts

# the art's own spaces may be collapsed where the banner was pasted (``\\ /|``, ``\/Data Parallel GPUs``):
# a run of spaces counts as one or none
_SLOTH = re.compile(r'^\s*(?:==\(\(====\)\)==|\\\\ */\||O\^O/ *\\_/ *\\|\\ */(?= *[A-Z])|"-____-")\s*')
_PAIR = re.compile(r"^(?P<key>[A-Z][\w ]*?)(?: \([\dx ]+\))? = (?P<value>[\d,]+)\b")
# "Data Parallel GPUs" is the Trainer's world size, which under unsloth (no model parallel) is the data-parallel size
_KEYS = {"Num GPUs used": "gpus_per_process", "Num GPUs": "world_size", "Data Parallel GPUs": ("world_size", "data_parallel_size"),
         "Num examples": "num_examples", "Num Epochs": "num_train_epochs", "Total steps": "max_steps",
         "Batch size per device": "per_device_batch_size", "Gradient accumulation steps": "gradient_accumulation_steps",
         "Gradient Accumulation steps": "gradient_accumulation_steps", "Total batch size": "total_batch_size"}
_NOTES = ("Unsloth", "🦥 Unsloth", "Unsloth:", "Unsloth Zoo")


def line(facts: Facts, number: int, text: str) -> bool:
    """Whether ``text`` is unsloth's (its facts noted)."""
    m = _SLOTH.match(text)
    if m is None:
        return text.lstrip().startswith(_NOTES) and _saw(facts, number)
    facts.saw("unsloth", number)
    body = text[m.end():]
    if "2x faster free finetuning" not in body and ". Num GPUs = " in body:
        return True  # the loading banner: the GPUs the process sees
    for part in body.split(" | "):
        p = _PAIR.match(part.strip())
        if p is None or p["key"] not in _KEYS or (p["key"] == "Num GPUs" and "finetuning" not in body):
            continue
        keys, value = _KEYS[p["key"]], int(p["value"].replace(",", ""))
        what = f"{p['key']} = {p['value']} (unsloth's banner)"
        for key in (keys,) if isinstance(keys, str) else keys:
            # a banner printed again (unsloth retrying with a batch that fits): the later one is what the run went on with
            facts.restate(key, float(value) if key == "num_train_epochs" else value, what, number)
    return True


def _saw(facts: Facts, number: int) -> bool:
    facts.saw("unsloth", number)
    return True
