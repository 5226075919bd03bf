"""Result frames read as typed rows.

A frame's columns are declared once, where the frame is made (``COMM_COLUMNS`` ...). ``row_type``
turns such a declaration into a frozen dataclass whose fields are the columns; ``typed_rows``
reads a frame as instances of it, with None for NaN and <NA> and Python scalars for numpy ones
(as ``plain`` writes them), and refuses a frame that lacks a declared column: a renamed column
fails where it is read, and a misspelled field fails on attribute access, instead of printing
"n/a".

    >>> import pandas as pd
    >>> Row = row_type("Row", ["session_id", "rank", "busbw_mb_s"])
    >>> frame = pd.DataFrame({"session_id": ["a", "b"], "rank": [0, 1], "busbw_mb_s": [float("nan"), 2.5]})
    >>> typed_rows(frame, Row)
    [Row(session_id='a', rank=0, busbw_mb_s=None), Row(session_id='b', rank=1, busbw_mb_s=2.5)]
    >>> typed_rows(frame, Row, session_id="b")[0].busbw_mb_s
    2.5
    >>> typed_rows(frame.rename(columns={"rank": "rnk"}), Row)
    Traceback (most recent call last):
    ...
    logkit.analysis.results.rows.MissingColumns: Row: the frame has no column 'rank' (declared: session_id, rank, busbw_mb_s; found: session_id, rnk, busbw_mb_s)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pandas as pd

from logkit.analysis.results.values import plain

__all__ = ["ALL", "MissingColumns", "row_type", "check_columns", "declared", "typed_rows"]


class _All:
    def __repr__(self) -> str:
        return "ALL"


ALL: Any = _All()  # every session's rows (None is a session id: the rows without one)


class MissingColumns(LookupError):
    """A result frame lacks a column its declaration names."""


def row_type(name: str, columns: Sequence[str], module: str | None = None) -> type:
    """A frozen dataclass named ``name`` with one field per column (in order, each None by default,
    so ``Row()`` is a row with nothing in it); ``Row.COLUMNS`` is the declaration."""
    cls = dataclasses.make_dataclass(name, [(c, Any, dataclasses.field(default=None)) for c in columns],
                                     frozen=True, slots=True)
    cls.__module__ = module or __name__
    cls.COLUMNS = tuple(columns)
    cls.__doc__ = f"A row of a frame of {', '.join(columns)} (None where the frame has no value)."
    return cls


def check_columns(frame: pd.DataFrame, columns: Sequence[str], what: str) -> None:
    """Raise ``MissingColumns`` when ``frame`` lacks one of ``columns``."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        names = ", ".join(repr(c) for c in missing)
        raise MissingColumns(f"{what}: the frame has no column{'s' if len(missing) > 1 else ''} {names} "
                             f"(declared: {', '.join(columns)}; found: {', '.join(map(str, frame.columns))})")


def declared(frame: pd.DataFrame, columns: Sequence[str], what: str) -> pd.DataFrame:
    """``frame``'s declared columns, in their declared order (``MissingColumns`` when one is missing)."""
    check_columns(frame, columns, what)
    return frame if list(frame.columns) == list(columns) else frame[list(columns)]


def typed_rows(frame: pd.DataFrame, row: type, session_id: Any = ALL, head: int | None = None) -> list:
    """``frame`` as a list of ``row`` (a ``row_type``): of one session when ``session_id`` is given
    (None: the rows without one), the first ``head`` rows when given."""
    frame = declared(frame, row.COLUMNS, row.__name__)
    if session_id is not ALL:
        ids = frame["session_id"]
        frame = frame[ids.isna()] if session_id is None else frame[ids == session_id]
    if head is not None:
        frame = frame.head(head)
    return [row(*(plain(v) for v in values)) for values in frame.itertuples(index=False, name=None)]
