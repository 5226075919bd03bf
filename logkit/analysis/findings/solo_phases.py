"""What work outside the steps a rank was doing, in words: from a timed phase's name, or from a Python
stack (a stall record's) whose frames are a framework's saving or evaluation code. Shared by the
``solo_work`` finding and the hang's culprit (a rank saving alone while the others wait in a collective).
"""

from __future__ import annotations

import re

SAVE, EVAL = "save", "eval"
# a phase name -> (what it did, what it was doing)
PHASE_WORDS = {SAVE: ("saved a checkpoint", "saving a checkpoint"),
               EVAL: ("evaluated", "evaluating")}
# The functions of saving and evaluation code, by the frame name a Python stack prints ("in NAME"): the
# Trainer (transformers/trainer.py), accelerate (accelerator.py), DeepSpeed (runtime/engine.py), Lightning
# (trainer/connectors, loops), torch.distributed.checkpoint, and torch.save itself (serialization.py).
_STACK = (
    (SAVE, re.compile(r"\bin (?:_save_checkpoint|save_model|_save|save_pretrained|save_state|save_checkpoint|"
                      r"_save_zero_checkpoint|dump_checkpoint|_save_to_state_dict|save_file|_save_state_dict)\b|"
                      r"serialization\.py\", line \d+, in save\b|distributed/checkpoint/.*\bin save\b")),
    (EVAL, re.compile(r"\bin (?:evaluate|evaluation_loop|prediction_loop|prediction_step|_evaluate|"
                      r"_run_evaluate|run_evaluation|_evaluation_step|validation_step|_run_validation)\b")),
)


def phase_words(name: str) -> tuple[str, str]:
    """(what it did, what it was doing) for the phase ``name``: ('saved a checkpoint', 'saving a checkpoint')."""
    return PHASE_WORDS.get(name, (f"ran its {name} phase", f"in its {name} phase"))


def phase_of_stack(stack) -> str | None:
    """``save`` or ``eval`` when a frame of ``stack`` (traceback.format_stack's text) is saving or evaluation
    code (the innermost such frame decides), else None."""
    if not isinstance(stack, str):
        return None
    for line in reversed(stack.splitlines()):
        for phase, pattern in _STACK:
            if pattern.search(line):
                return phase
    return None
