"""A training script's own progress lines, written by no framework: a counter line, then a loss line,
each process printing its own in turn (every line behind its launcher's rank prefix)::

    [1,0]<stdout>:Epoch 0/100, Batch 17/29316
    [1,0]<stdout>:Total loss is  29.862733840942383 ETA is  7:37:43.721964

- the counter: ``Epoch e[/E], Batch|Step|Iter[ation] n[/N]`` alone on its line (no loss on it: a line with
  both is ``iteration_lines``' or the epoch summary's);
- the loss: a label of a few words, then ``loss is X`` / ``loss: X`` / ``loss = X`` (``Total loss is 236.6``,
  ``train loss: 0.41``), the rest of the line no other figure of ours (an ETA, a time). A validation's or
  a test's loss is none of the training's.

The loss line becomes a steps row of the process that printed it, at the step that process's last counter
line named: ``e * N + n`` where the counter says how many batches an epoch has (its epoch and batch kept
as they were said), else ``n``; no step where no counter came before.
"""

from __future__ import annotations

import re

from logkit.schema.values import to_float

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf"
_COUNTER = re.compile(r"^\s*[Ee]poch\s*[:=]?\s*(?P<epoch>\d+)\s*(?:/\s*(?P<epochs>\d+))?\s*[,|;]?\s*"
                      r"(?:[Bb]atch|[Ss]tep|[Ii]ter(?:ation)?)\s*[:=]?\s*(?P<n>\d+)\s*(?:/\s*(?P<total>\d+))?\s*$")
_LOSS = re.compile(rf"^\s*(?P<label>(?:[A-Za-z][\w-]*\s+){{0,3}})loss(?:\s+is|\s*[:=])\s*(?P<loss>{_NUM})(?![\w.])"
                   r"(?P<rest>.*)$", re.I)
_NOT_TRAINING = re.compile(r"\b(?:val\w*|eval\w*|test\w*|dev)\b", re.I)


class ScriptLines:
    """Each process's last counter line, and the loss lines read as steps rows."""

    def __init__(self) -> None:
        self.counters: dict[int | None, dict] = {}  # rank -> its last counter

    def line(self, text: str, rank: int | None) -> dict | None | bool:
        """A steps row (``step``, ``epoch``, ``loss``) from a loss line; True for a counter line (kept for the
        process's next loss line); None for neither."""
        if "poch" in text and (c := _COUNTER.match(text)) is not None:
            self.counters[rank] = c.groupdict()
            return True
        if "oss" not in text or (m := _LOSS.match(text)) is None or _NOT_TRAINING.search(m["label"]):
            return None
        if "loss" in m["rest"].lower():
            return None  # a second loss on the line (a validation's beside it): not this simple shape
        loss = to_float(m["loss"])
        if loss is None:
            return None
        counter = self.counters.get(rank)
        if counter is None:
            return {"step": None, "epoch": None, "loss": loss}
        n, epoch = int(counter["n"]), int(counter["epoch"])
        step = epoch * int(counter["total"]) + n if counter["total"] else n
        return {"step": step, "epoch": float(epoch), "loss": loss}
