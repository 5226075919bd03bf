"""The JSON document of a comparison: ``{"sessions": [...], "comparisons": [...]}``."""

from __future__ import annotations

import math

import orjson

__all__ = ["render_json"]


def _default(value):
    # pandas' <NA> and other stray scalars: null, or their plain value.
    if hasattr(value, "item"):
        return value.item()
    try:
        if value != value:  # NA-like values are not equal to themselves
            return None
    except TypeError:
        return None
    return str(value)


def _nan_to_none(obj):
    if isinstance(obj, float) and not math.isfinite(obj):
        return None
    if isinstance(obj, dict):
        return {k: _nan_to_none(v) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_nan_to_none(v) for v in obj]
    return obj


def render_json(report) -> str:
    """The report as indented JSON text; NaN and infinities become null."""
    doc = _nan_to_none(report.to_dict())
    return orjson.dumps(doc, default=_default, option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY).decode()
