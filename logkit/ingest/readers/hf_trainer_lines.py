"""transformers' Trainer in a console log (alone, or run by LLaMA-Factory, TRL, axolotl, unsloth): what
its lines state, line by line.

- the ``***** Running training *****`` block (``Num examples``, ``Num Epochs``, ``Instantaneous batch size
  per device``, ``Total train batch size (w. parallel, distributed & accumulation)``, ``Gradient
  Accumulation steps``, ``Total optimization steps``, ``Number of trainable parameters``); the same
  keys under ``***** Running Evaluation *****`` / ``Prediction`` are the evaluation's, not the run's;
- the ``***** train metrics *****`` block ``log_metrics`` prints (``train_runtime = 0:36:58.55``,
  ``train_loss``, ``train_samples_per_second``, ...);
- the example scripts' and LLaMA-Factory's per-process banner ``Process rank: 0, [world size: 8, ]device:
  cuda:0, n_gpu: 1, distributed training: True, ...``: ``n_gpu`` is the GPUs of that one process, never
  the run's count;
- the lines it logs that carry nothing logkit keeps (loading files, saving checkpoints, "Training
  completed"), and the dumps that span lines (``Model config LlamaConfig {`` ... ``}``,
  ``TrainingArguments(`` ... ``)``): recognised, so they are no "not understood" diagnostics.

The printed log dicts (``{'loss': ...}``) are read by ``console_blocks.hf_dict``.
"""

from __future__ import annotations

import re

from logkit.ingest.readers.stated_facts import Facts

# "  Total train batch size (w. parallel, distributed & accumulation) = 112" -> the meta key it fills
TRAIN_BLOCK = {"Num examples": "num_examples", "Num Epochs": "num_train_epochs",
               "Instantaneous batch size per device": "per_device_batch_size",
               "Total train batch size (w. parallel, distributed & accumulation)": "total_batch_size",
               "Gradient Accumulation steps": "gradient_accumulation_steps", "Total optimization steps": "max_steps",
               "Number of trainable parameters": None, "Total num train samples": None,
               "Training with DataParallel so batch size has been adjusted to": None}
# the key starts the message: the line's, or after a log prefix the console reader does not know ("] - ")
_BLOCK_LINE = re.compile(r"(?:^|[>\]-] )\s*(?P<key>[A-Z][\w .,&()-]+?) = (?P<value>[\d,.]+)\s*$")
_BANNER = re.compile(r"\*{5} (?P<what>Running training|Running Evaluation|Running Prediction|Running Predict"
                     r"|train metrics|eval metrics|predict metrics|test metrics) \*{5}")
# "  train_runtime            = 0:36:58.55" (log_metrics): key, value
_METRIC = re.compile(r"^\s+(?P<key>[a-z][\w/-]*)\s+=\s+(?P<value>\S+)\s*$")
_HMS = re.compile(r"^(?P<h>\d+):(?P<m>\d\d):(?P<s>\d\d(?:\.\d+)?)$")
# the per-process banner: transformers' example scripts (n_gpu glued to "distributed training" in some),
# LLaMA-Factory's (", compute dtype: ..."), with a world size since LLaMA-Factory 0.9
_PROCESS = re.compile(r"Process rank: (?P<rank>-?\d+),(?: world size: (?P<world>\d+),)? device: (?P<device>[^,\s]+?),?"
                      r"(?: n_gpu: (?P<n>\d+))?[,;]?\s*distributed training: (?P<dist>True|False)"
                      r"(?:, (?:compute dtype|16-bits training): (?P<dtype>\S+))?")
# what it logs that carries nothing logkit keeps
_NOTHING = re.compile(r"^(?:loading (?:file|configuration file|weights file)|Model weights saved in|Saving model checkpoint"
                      r"|(?:tokenizer|Configuration|chat template|Special tokens) (?:config )?file saved in"
                      r"|Special tokens have been added|All (?:model checkpoint weights|the weights of)"
                      r"|Instantiating \w+ model|Generate config|Using (?:auto half precision|cuda_amp|\w+) (?:backend|half)"
                      r"|Training completed|Deleting older checkpoint|Dropping the following result"
                      r"|If your task is similar|You are resizing|Some weights of|- This IS|Gradient checkpointing"
                      r"|PyTorch: setting up devices|The following columns in the|Loading model from|Continuing training"
                      r"|  Continuing training|  Will skip|  Batch size = \d+|  Num examples = |Attempted to log scalar"
                      r"|Training/evaluation parameters|Dropping |Trainer\.tokenizer is now deprecated"
                      r"|Generation config file not found|Configuration saved in|Some non-default generation parameters"
                      r"|Non-default generation parameters|Removed shared tensor)")
# a dump that spans lines: what closes it
_DUMP_OPEN = re.compile(r"(?:config \w*Config \{|GenerationConfig \{|Arguments\($|Config \{)\s*$")


class HfTrainer:
    """The state of one file's Trainer lines: which ``*****`` block the keys belong to."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.block: str | None = None

    def line(self, number: int, text: str) -> str | bool:
        """Whether ``text`` is the Trainer's (a fact noted); ``"}"``/``")"``: it opens a dump that closes with it."""
        if "*****" in text and (m := _BANNER.search(text)) is not None:
            self.block = m["what"]
            self.facts.saw("transformers", number)
            return True
        if " = " in text:
            if self._block_line(number, text):
                return True
        if "Process rank" in text and (m := _PROCESS.search(text)) is not None:
            self._process(number, m)
            return True
        stripped = text.strip()
        if _DUMP_OPEN.search(stripped):
            return "}" if stripped.endswith("{") else ")"
        return bool(_NOTHING.match(text) or _NOTHING.match(stripped))

    def _block_line(self, number: int, text: str) -> bool:
        # the keys are the run's under its banner, or where the log lost the banner (never under an evaluation's)
        if self.block in (None, "Running training") and (m := _BLOCK_LINE.search(text)) is not None \
                and m["key"] in TRAIN_BLOCK:
            key = TRAIN_BLOCK[m["key"]]
            if key is not None:
                value = m["value"].replace(",", "")
                number_value = float(value) if key == "num_train_epochs" else _int(value)
                self.facts.state(key, number_value, f"{m['key']} {m['value']} (transformers' Running training)", number)
            return True
        if self.block is not None and self.block.endswith("metrics") and (m := _METRIC.match(text)) is not None:
            if self.block == "train metrics":
                self._metric(number, m["key"], m["value"])
            return True
        if self.block in ("Running Evaluation", "Running Prediction", "Running Predict") and _BLOCK_LINE.search(text):
            return True  # the evaluation's sizes, not the run's
        return False

    def _metric(self, number: int, key: str, value: str) -> None:
        what = f"{key} {value} (transformers' train metrics)"
        if key == "train_runtime":
            self.facts.state("duration_s", seconds(value), what, number)
        elif key == "train_loss":
            self.facts.state("train_loss", _float(value), what, number)
        elif key == "train_samples_per_second":
            self.facts.state("samples_per_second", _float(value), what, number)
        elif key == "train_steps_per_second":
            self.facts.state("steps_per_second", _float(value), what, number)
        elif key == "epoch":
            self.facts.state("epoch", _float(value), what, number)

    def _process(self, number: int, m: re.Match) -> None:
        facts, rank = self.facts, int(m["rank"])
        facts.saw("llamafactory" if m["dtype"] and m["dtype"].startswith("torch.") else "transformers", number)
        facts.rank_seen(rank, f"Process rank: {rank}", number)
        if m["world"]:
            facts.state("world_size", int(m["world"]), f"world size: {m['world']} (the per-process banner)", number)
        if m["n"]:
            facts.state("gpus_per_process", int(m["n"]), f"n_gpu: {m['n']}", number)
        if m["dist"] == "False" and rank == -1:
            facts.derive("world_size", 1, "distributed training: False, process rank -1: one process", number)
        if m["dist"] == "True":
            facts.state("distributed", True, "distributed training: True", number)


def seconds(text: str) -> float | None:
    """``0:36:58.55`` (h:mm:ss) or ``2219.5`` as seconds."""
    if (m := _HMS.match(text)) is not None:
        return int(m["h"]) * 3600 + int(m["m"]) * 60 + float(m["s"])
    return _float(text)


def _float(text: str) -> float | None:
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return None


def _int(text: str) -> int | None:
    try:
        return int(text)
    except ValueError:
        return None
