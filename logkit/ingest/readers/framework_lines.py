"""The lines fine-tuning frameworks and their launchers write into a console log, for the console reader:
each family's grammar in a module of its own (``hf_trainer_lines``: transformers' Trainer, run by
LLaMA-Factory, TRL, axolotl, unsloth; ``llamafactory``: its log format; ``unsloth_lines``;
``axolotl_lines``; ``deepspeed_lines``; ``accelerate_lines``), the facts they state gathered in one
``stated_facts.Facts`` and written to meta at the file's end.

A line of a known framework that carries nothing logkit keeps is recognised all the same (it is no "not
understood" diagnostic), and so are the dumps that span lines (a model's config ``{ ... }``, a
``TrainingArguments( ... )``, DeepSpeed's JSON): a dump runs to the line that closes it at its first column,
or to ``MAX_DUMP_LINES``, or to a line that opens with a log prefix (a dump cut short).
"""

from __future__ import annotations

import re

from logkit.ingest.readers import accelerate_lines, axolotl_lines, deepspeed_lines, unsloth_lines
from logkit.ingest.readers.hf_trainer_lines import HfTrainer
from logkit.ingest.readers.llamafactory import peel
from logkit.ingest.readers.stated_facts import Facts
from logkit.schema.meta import SessionMeta

MAX_DUMP_LINES = 5000
# a command a person ran, pasted with its shell prompt or alone: the tool says the framework
_COMMAND = re.compile(r"^(?:\S*[$#] ?)?(?P<tool>llamafactory-cli|axolotl|accelerate|deepspeed|torchrun|swift)"
                      r" (?:train|launch|env|sft|pt|rlhf|preprocess|--\w+|\S+\.py)\b")
_TOOLS = {"llamafactory-cli": "llamafactory", "axolotl": "axolotl", "accelerate": "accelerate",
          "deepspeed": "deepspeed", "torchrun": "torchrun", "swift": "ms-swift"}
# the keys a Trainer's printed log dict carries only under one framework (the dict itself is console_blocks')
_DICT_KEYS = (("'memory/max_mem_active(gib)'", "axolotl"), ("'mean_token_accuracy'", "trl"), ("'rewards/", "trl"),
              ("'logps/", "trl"), ("'completion_length'", "trl"), ("'loss'", "transformers"),
              ("'train_runtime'", "transformers"))
_LOGGED = re.compile(r"^\[(?:\d{4}-\d\d-\d\d|[A-Z]+\|)|^\d{4}-\d\d-\d\d[ T]\d\d:|^\d\d/\d\d/\d{4} ")


class FrameworkLines:
    """The framework lines of one file (``label``: how its lines are cited)."""

    def __init__(self, label: str) -> None:
        self.facts = Facts(label)
        self.trainer = HfTrainer(self.facts)
        self.accelerate = accelerate_lines.Accelerate(self.facts)
        self.dump: tuple[str, str, int] | None = None  # (closing line, whose, lines so far)

    def peel(self, number: int, text: str) -> tuple[str, str, str] | None:
        """(level, time stamp, message) of a line in LLaMA-Factory's (or transformers' explicit) log format."""
        found = peel(text)
        if found is None:
            return None
        framework, level, stamp, message = found
        self.facts.saw(framework, number)
        return level, stamp, message

    def in_dump(self, number: int, text: str) -> bool:
        """Whether ``text`` belongs to an open dump (the line that closes it included)."""
        if self.dump is None:
            return False
        closing, whose, count = self.dump
        if count >= MAX_DUMP_LINES or _LOGGED.match(text):
            self.dump = None
            return False
        self.dump = (closing, whose, count + 1)
        if whose == "deepspeed":
            deepspeed_lines.json_line(self.facts, number, text)
        if text.rstrip() == closing or text.startswith(closing) and not text[:1].isspace():
            self.dump = None
        return True

    def line(self, number: int, text: str) -> tuple[bool, int | None]:
        """(whether ``text``, a message without its log prefix, is a framework's, the rank it names)."""
        if self.in_dump(number, text):
            return True, None
        if text.startswith("{'"):  # a printed log dict: whose keys are these (read as rows elsewhere)
            for key, framework in _DICT_KEYS:
                if key in text:
                    self.facts.saw(framework, number)
                    break
            return False, None
        first = text[:1]
        if first == "[":
            used, rank = axolotl_lines.line(self.facts, number, text)
            if used:
                return True, rank
        found = deepspeed_lines.line(self.facts, number, text)
        if found:
            self._open(found, "deepspeed")
            return True, None
        if (c := _COMMAND.match(text)) is not None:
            self.facts.saw(_TOOLS[c["tool"]], number)
            return True, None
        if unsloth_lines.line(self.facts, number, text):
            return True, None
        if self.accelerate.line(number, text):
            return True, None
        found = self.trainer.line(number, text)
        if found:
            self._open(found, "transformers")
            return True, None
        return False, None

    def _open(self, found, whose: str) -> None:
        if isinstance(found, str):
            self.dump = (found, whose, 0)

    def write(self, meta: SessionMeta) -> None:
        self.facts.write(meta)
