"""What work outside the steps a rank was doing, in words: from a timed phase's name, or from a Python
stack (a stall record's) whose frames are a framework's saving or evaluation code. Shared by the
``solo_work`` finding and the hang's culprit (a rank saving alone while the others wait in a collective).
"""

from __future__ import annotations

import re

from logkit.schema.values import to_int

SAVE, EVAL = "save", "eval"
# what to do about work one rank does alone while the others wait: the solo_work finding, the hang's culprit
# and the watchdog timeout's last-seen rank say it alike
ALONE_ADVICE = ("Work one rank does alone while the others wait in a collective ends the run with a watchdog "
                "timeout when it outlasts the process group's timeout (torch's NCCL default 10 min, the Trainer's "
                "ddp_timeout 30 min): save or evaluate on every rank or behind a barrier, or raise the timeout above "
                "its longest duration (`timeout=` of init_process_group, accelerate's InitProcessGroupKwargs).")
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


def last_seen(phase_rows, timed_out) -> tuple[str, list[str], int] | None:
    """What a console's ``last_phase`` event says of a watchdog timeout whose ranks ``timed_out`` are listed:
    (a sentence, its evidence, the rank) when the rank that printed it (unprefixed: the main process, rank 0)
    is not one that timed out, else None."""
    if phase_rows is None or not len(phase_rows):
        return None
    row = phase_rows.iloc[-1]
    rank = to_int(row["rank"])
    who = rank if rank is not None else 0
    waited = sorted({r for r in (to_int(x) for x in timed_out) if r is not None})
    if who in waited:
        return None
    source = str(row["source"])
    line = source.rsplit(":", 1)[-1] if ":" in source else "?"
    name = f"Rank {who}" if rank is not None else "The main process (rank 0, the one that prints)"
    others = ", ".join(map(str, waited)) or "the others"
    text = (f" {name} was last seen {phase_words(str(row['phase']))[1]} (line {line}: {str(row['message'])[:120]!r}), "
            f"and is not among the ranks that timed out: it was doing that alone while rank(s) {others} waited in "
            f"the collective. {ALONE_ADVICE}")
    return text, [source], who
