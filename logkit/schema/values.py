"""Values as the contract reads them: one place that says what counts as a number.

Two readings, named by where a value comes from:

- ``as_float`` / ``as_int`` / ``as_text``: a value of a JSON document (a record, summary.json,
  a trainer_state.json). Its type is the writer's word: ``true`` is no number, ``"3.5"`` is
  text, and a float NaN or Inf (Python's json writes them) stays what it is, since a NaN loss
  is a finding.
- ``to_float``: anything a figure may come from (text of a log line, numpy and pandas
  scalars, a missing value); what ``float()`` takes, else None. ``finite=True`` also turns
  NaN and Inf into None: a figure that is not finite is not known.

    >>> as_float(True), as_float(2), as_float("2"), as_int(3.0), as_int(3.5)
    (None, 2.0, None, 3, None)
    >>> to_float("2.5"), to_float(float("nan"), finite=True), to_float(None)
    (2.5, None, None)
"""

from __future__ import annotations

import math
import numbers

__all__ = ["as_float", "as_int", "as_text", "to_float", "to_int", "per_second"]


def as_float(value, finite: bool = False) -> float | None:
    """A JSON number as float (numpy numbers too); anything else (bool, text, null, a dict) is None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    out = float(value)
    return None if finite and not math.isfinite(out) else out


def as_int(value) -> int | None:
    """An integral JSON number as int (3.0 included); anything else is None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    if isinstance(value, numbers.Integral):
        return int(value)
    value = float(value)
    return int(value) if value.is_integer() else None


def as_text(value) -> str | None:
    return value if isinstance(value, str) else None


def to_float(value, finite: bool = False) -> float | None:
    """Whatever ``float()`` takes (text, numpy and pandas scalars) as float; None for the rest,
    for bools and for pandas' missing values."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError):
        return None
    return None if finite and not math.isfinite(out) else out


def to_int(value) -> int | None:
    """An integral value (``to_float`` of it is a whole, finite number) as int, else None."""
    out = to_float(value, finite=True)
    return int(out) if out is not None and out.is_integer() else None


def per_second(amount, seconds) -> float | None:
    """A rate: ``amount`` / ``seconds`` (samples/s = samples / their step time, steps/s = steps /
    their time); None when either is unknown or the time is not positive. The one definition
    of every throughput figure, on both halves.

    >>> per_second(64, 8.0), per_second(64, 0.0), per_second(None, 1.0)
    (8.0, None, None)
    """
    amount, seconds = to_float(amount, finite=True), to_float(seconds, finite=True)
    if amount is None or seconds is None or seconds <= 0:
        return None
    return amount / seconds
