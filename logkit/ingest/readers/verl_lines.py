"""verl's trainer records in a console log (``verl.utils.tracking``'s console logger, printed by the Ray
``TaskRunner`` actor, whose ``(TaskRunner pid=N)`` prefix the normalising layer takes off)::

    step:2 - global_seqlen/min:538646.000 - ... - actor/pg_loss:0.000 - actor/grad_norm:0.006 - ...
    - actor/lr:0.000 - training/epoch:2.000 - ... - timing_s/step:96.551 - ...

One record per training step, dash-separated ``key:value`` pairs. A record is long (a hundred pairs) and a
terminal or a paste often breaks it, even inside a key (``response_length/cl`` / ``ip_ratio:0.004``): a line
of such pairs alone, right after a record, is read as its rest (a pair whose key was cut is not kept).

-> a steps row: ``step``, ``loss`` (``actor/pg_loss``, the policy loss), ``grad_norm`` (``actor/grad_norm``),
``learning_rate`` (``actor/lr``), ``epoch`` (``training/epoch``), ``step_time_s`` (``timing_s/step``).
"""

from __future__ import annotations

import re

_NUM = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|nan|inf|-inf"
_PAIR = re.compile(rf"(?:^|(?<= - ))(?P<key>[A-Za-z_][\w/@.-]*):(?P<value>{_NUM})(?= - |\s*$)")
_RECORD = re.compile(r"^step:(?P<step>\d+) - ")
# a line of pairs alone (the rest of a broken record): at least three "key:value" joined by " - "
_REST = re.compile(rf"^[\w/@.-]*:(?:{_NUM})(?: - [\w/@.-]+:(?:{_NUM})){{2,}}")
_COLUMNS = {"actor/pg_loss": "loss", "actor/grad_norm": "grad_norm", "actor/lr": "learning_rate",
            "training/epoch": "epoch", "timing_s/step": "step_time_s"}


def record(text: str) -> dict | None:
    """A record's first line: its step and the columns of its pairs; None for another line."""
    m = _RECORD.match(text)
    if m is None:
        return None
    return {"step": int(m["step"]), **values(text[m.end():], first_whole=True)}


def rest(text: str) -> dict | None:
    """The columns of a line of pairs alone (a broken record's rest; its first key may be cut), or None."""
    return values(text, first_whole=False) if _REST.match(text) else None


def values(text: str, first_whole: bool) -> dict:
    out = {}
    for i, m in enumerate(_PAIR.finditer(text)):
        if i == 0 and not first_whole and m.start() == 0:
            continue  # its key may be the tail of a key cut at the line's end before it
        if (column := _COLUMNS.get(m["key"])) is not None:
            out[column] = float(m["value"])
    return out
