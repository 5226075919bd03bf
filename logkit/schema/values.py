"""Values as the contract reads them: one place that says what counts as a number.

Two readings, named by where a value comes from:

- ``as_float`` / ``as_int`` / ``as_text``: a value of a JSON document (a record, summary.json,
  a trainer_state.json). Its type is the writer's word: ``true`` is no number, ``"3.5"`` is
  text, and a float NaN or Inf (Python's json writes them) stays what it is, since a NaN loss
  is a finding.
- ``to_float``: anything a figure may come from (text of a log line, numpy and pandas
  scalars, a missing value); what ``float()`` takes, else None. ``finite=True`` also turns
  NaN and Inf into None: a figure that is not finite is not known.

A number beyond the range it is kept in (an integer past 64 bits, past a float's range) is no
number either: every output (the frames, JSON, the cache) holds 64-bit integers and floats.

What a value may be besides its type is its ``Domain`` (a count is at least 1, a rank or a
step at least 0, a duration a finite, non-negative number of seconds): ``check(value, type,
domain)`` says why a value cannot be right (None when it can), and the meta keys
(``schema.meta``) declare theirs, so that every source of a session's meta is read through
them: a value that cannot be right is a diagnostic, never an impossible fact.

    >>> as_float(True), as_float(2), as_float("2"), as_int(3.0), as_int(3.5), as_int(2**70)
    (None, 2.0, None, 3, None, None)
    >>> to_float("2.5"), to_float(float("nan"), finite=True), to_float(None), to_float(10**400)
    (2.5, None, None, None)
    >>> check(0, int, COUNT), check(-1.0, float, SECONDS), check("16", int), check(8, int, COUNT)
    ('0 is not a count (at least 1)', '-1.0 is not a duration (finite, at least 0 s)', "not a number ('16')", None)
"""

from __future__ import annotations

import math
import numbers

__all__ = ["as_float", "as_int", "as_text", "to_float", "to_int", "per_second", "Domain", "COUNT", "RANKS", "INDEX",
           "NON_NEGATIVE", "SECONDS", "check", "in_int64", "plain_json", "INT64_MAX"]

INT64_MAX = 2**63 - 1


def in_int64(value: int) -> bool:
    """Whether an integer fits the 64 bits every frame, JSON output and cache entry holds."""
    return -INT64_MAX - 1 <= value <= INT64_MAX


def as_float(value, finite: bool = False) -> float | None:
    """A JSON number as float (numpy numbers too); anything else (bool, text, null, a dict, an integer
    past a float's range) is None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    try:
        out = float(value)
    except OverflowError:
        return None
    return None if finite and not math.isfinite(out) else out


def as_int(value) -> int | None:
    """An integral JSON number within 64 bits as int (3.0 included); anything else is None."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        return None
    if isinstance(value, numbers.Integral):
        value = int(value)
        return value if in_int64(value) else None
    value = float(value)
    return int(value) if value.is_integer() and abs(value) <= INT64_MAX else None


def as_text(value) -> str | None:
    """A JSON string as text any output takes (a lone surrogate from a ``\\ud800`` escape written as
    that escape); anything else is None."""
    if not isinstance(value, str):
        return None
    try:
        value.encode("utf-8")
        return value
    except UnicodeEncodeError:
        return value.encode("utf-8", "backslashreplace").decode("utf-8")


def to_float(value, finite: bool = False) -> float | None:
    """Whatever ``float()`` takes (text, numpy and pandas scalars) as float; None for the rest,
    for bools, for pandas' missing values and for numbers past a float's range."""
    if value is None or isinstance(value, bool):
        return None
    try:
        out = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return None if finite and not math.isfinite(out) else out


def to_int(value) -> int | None:
    """An integral value (``to_float`` of it is a whole, finite number) within 64 bits as int, else None."""
    out = to_float(value, finite=True)
    return int(out) if out is not None and out.is_integer() and abs(out) <= INT64_MAX else None


class Domain:
    """What a number may be besides its type: at least ``low`` (a count: 1), at most ``high``, finite or not."""

    __slots__ = ("name", "low", "high", "finite", "unit")

    def __init__(self, name: str, low: float | None = None, finite: bool = True, unit: str = "",
                 high: float | None = None) -> None:
        self.name, self.low, self.high, self.finite, self.unit = name, low, high, finite, unit

    def why_not(self, value) -> str | None:
        bad = (isinstance(value, float) and self.finite and not math.isfinite(value)) \
            or (self.low is not None and value < self.low) or (self.high is not None and value > self.high)
        return f"{value} is not {self.name} ({self._bounds(value)})" if bad else None

    def _bounds(self, value) -> str:
        unit = f" {self.unit}" if self.unit else ""
        said = ["finite"] if self.finite and isinstance(value, float) else []
        said += [f"at least {self.low:,}{unit}"] if self.low is not None else []
        said += [f"at most {self.high:,}{unit}"] if self.high is not None else []
        return ", ".join(said)

    def __repr__(self) -> str:
        return f"Domain({self.name!r})"


COUNT = Domain("a count", 1)  # GPUs of a host, samples in a batch, steps between logs
RANKS = Domain("a number of ranks", 1, high=1 << 24)  # a world size, nodes, ranks of a host: no job has 16M
INDEX = Domain("an index", 0)  # a rank, a step, a device
NON_NEGATIVE = Domain("a non-negative number", 0)  # a rate, a total
SECONDS = Domain("a duration", 0, unit="s")
_TYPES = {int: "an integer", float: "a number", str: "text", list: "a list", dict: "an object", bool: "true or false"}


def check(value, kind: type | tuple = object, domain: Domain | None = None) -> str | None:
    """Why ``value`` cannot be a value of ``kind`` in ``domain`` (None: it can, or it is None)."""
    if value is None:
        return None
    kinds = kind if isinstance(kind, tuple) else (kind,)
    number = any(k in (int, float) for k in kinds)
    if isinstance(value, bool) and bool not in kinds:
        return f"not {_TYPES.get(kinds[0], kinds[0].__name__)} ({value!r})"
    if number and isinstance(value, numbers.Real) and not isinstance(value, bool):
        if isinstance(value, numbers.Integral) and not in_int64(int(value)):
            return f"an integer of {len(str(abs(int(value))))} digits, beyond 64 bits"
        if int in kinds and float not in kinds and not isinstance(value, numbers.Integral):
            if not float(value).is_integer():
                return f"not an integer ({value!r})"
            if abs(value) > INT64_MAX:
                return f"{value!r} is beyond 64 bits"
        return domain.why_not(value) if domain is not None else None
    if object in kinds or isinstance(value, kinds):
        return None
    shown = repr(value) if isinstance(value, (str, int, float)) else type(value).__name__
    return f"not {'a number' if number else _TYPES.get(kinds[0], kinds[0].__name__)} ({shown[:60]})"


def plain_json(value, depth: int = 0):
    """A JSON value every output takes: integers beyond 64 bits as None, text escaped where it holds lone
    surrogates, nesting past 64 levels cut (None)."""
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if in_int64(value) else None
    if isinstance(value, str):
        return as_text(value)
    if depth >= 64:
        return None
    if isinstance(value, dict):
        return {as_text(k) if isinstance(k, str) else k: plain_json(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain_json(v, depth + 1) for v in value]
    return value


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
    rate = amount / seconds
    return rate if math.isfinite(rate) else None  # past a float's range: no rate
