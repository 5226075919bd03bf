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

from logkit.schema.vocab import EventKind

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


class LastPhase:
    """A file's last save or evaluation line and how far training had come when it was read (a console
    reader's; ``read``: its ``Read``). The reader hands it every line before reading it (``see``: a save or
    evaluation line is then understood; the first watchdog timeout line is where it looks back)."""

    def __init__(self, read) -> None:
        self.read = read
        self.line: tuple | None = None  # (line, phase, rank, text, time)
        self.then: tuple | None = None
        self.timed_out = False  # the watchdog's first timeout line was read

    def see(self, number: int, text: str, rank: int | None, t: float | None) -> bool:
        """Whether ``text`` begins saving or evaluating (then it is the last such line); the first watchdog
        timeout line (``Watchdog caught collective operation timeout``) closes the watch."""
        if not self.timed_out and "Watchdog caught" in text:
            self.timed_out = True
            self._timeout()
            return False
        phase = phase_of(text)
        if phase is None:
            return False
        self.line, self.then = (number, phase, rank, text.strip()[:300], t), self._progress()
        return True

    def _progress(self) -> tuple:
        """Steps and evaluations read so far, and the training bar's (total, n)."""
        bar = self.read.meta.progress or {}
        return len(self.read.rows["steps"]), len(self.read.rows["evals"]), bar.get("total"), bar.get("step")

    def _timeout(self) -> None:
        """At the first watchdog timeout: the last save or evaluation line, when training made no progress
        since (no step, no evaluation's result, the training bar not moved on), as a ``last_phase`` event."""
        if self.line is None:
            return
        steps, evals, total, n = self._progress()
        steps0, evals0, total0, n0 = self.then
        if steps > steps0 or evals > evals0 or (total == total0 and n is not None and n0 is not None and n > n0):
            return
        number, phase, rank, text, t = self.line
        self.read.event(EventKind.LAST_PHASE, number, rank=rank, level="INFO", time_s=t, phase=phase, message=text)
