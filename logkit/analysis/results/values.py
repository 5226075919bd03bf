"""How results become JSON-able values: ``plain``.

    >>> plain({"x": float("nan"), "n": 2, "k": (1.5, None)})
    {'x': None, 'n': 2, 'k': [1.5, None]}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import pandas as pd

from logkit.schema.findings import Severity

__all__ = ["plain"]


def plain(value: Any) -> Any:
    """JSON-able values: NaN and <NA> -> None, numpy scalars -> Python, non-text keys -> text, frames ->
    lists of row dicts, dataclasses -> dicts (their own ``to_dict`` where they have one)."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Severity):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_dict"):
            return value.to_dict()
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, pd.DataFrame):
        return [{str(k): plain(v) for k, v in row.items()} for row in value.to_dict("records")]
    if hasattr(value, "tolist") and not hasattr(value, "item"):  # numpy arrays
        return plain(value.tolist())
    if hasattr(value, "item"):
        try:
            return plain(value.item())
        except (TypeError, ValueError):
            pass
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value

