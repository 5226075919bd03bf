"""The lines a training framework prints when its process begins saving a checkpoint or evaluating: what
a console shows of work one rank (usually rank 0, the one that prints) does alone while the others wait
in the next collective. A watchdog timeout after such a line, with no training step between, is how
that work ends a run (the console reader then says so: ``EventKind.LAST_PHASE``).

The phrases, by who prints them (each the start of the work, never its end):

- save: transformers' Trainer ``Saving model checkpoint to DIR``; accelerate's ``save_state``
  ``Saving current state to DIR``; DeepSpeed's ``[Torch] Checkpoint TAG is about to be saved!`` and
  ``Saving model checkpoint: PATH``; Lightning's ModelCheckpoint ``... saving model to 'PATH'``; torchtune's
  ``Saving checkpoint. This may take some time.``; mmengine's ``Saving checkpoint at N epochs``;
  Megatron's ``saving checkpoint at iteration N to DIR``;
- eval: the Trainer's ``***** Running Evaluation *****``; a line that starts ``Evaluating`` (mmdetection's
  ``Evaluating bbox...``, a script's ``Evaluating the results...``); pycocotools' ``Running per image
  evaluation...``; mmengine's validation loop ``Epoch(val) [E][i/n]``; Lightning's ``Validation
  DataLoader 0:`` bar; ``Running evaluation`` / ``Running validation`` / ``Start(ing) evaluation``.
"""

from __future__ import annotations

import re

SAVE, EVAL = "save", "eval"
# cheap tests before the patterns: every phrase holds one of these
HINTS = ("aving", "valuat", "about to be saved", "Epoch(val)", "Validation", "alidation")
_PHASES = (
    (SAVE, re.compile(r"Saving model checkpoint\b|Saving current state to |Checkpoint \S+ is about to be saved"
                      r"|saving model to '|Saving checkpoint\b|saving checkpoint at iteration"
                      r"|\bSaving (?:the )?model (?:to|weights|checkpoint)\b")),
    (EVAL, re.compile(r"\*{5} Running Evaluation \*{5}|(?:^|[\]>:|-] ?)\s*Evaluating\b"
                      r"|\bRunning (?:per image )?evaluation\b|\bRunning validation\b|\bStart(?:ing)? evaluation\b"
                      r"|Epoch\(val\)|^Validation(?: DataLoader \d+)?:", re.I)),
)


def phase_of(text: str) -> str | None:
    """``save`` or ``eval`` when ``text`` is a line that begins saving or evaluating, else None."""
    if not any(h in text for h in HINTS):
        return None
    for phase, pattern in _PHASES:
        if pattern.search(text) is not None:
            return phase
    return None
