"""JSON documents of the analyses: one document per run of the CLI, NaN and infinities as null.

``analysis_document(analysis, sections)`` picks the sections asked for:

- ``compare``: ``sessions``, ``comparisons``, ``groups``, ``not_compared``, ``fit``, ``fits``,
  ``loss_parity``, ``health``, ``gpus``
- ``communication``: ``communication`` (one row per session, rank and op), ``nccl_tests`` (one row
  per nccl-tests op and placement)
- ``performance``: ``performance``, ``stragglers``, ``gpus``, ``mfu``
- ``diagnose``: ``findings``
- ``all``: every section

and always adds ``definitions`` (the definition of every figure).
"""

from __future__ import annotations

import math

import orjson

from logkit.report.view import analysis_view, plain

__all__ = ["render_json", "analysis_document", "SECTION_KEYS"]

SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "compare": ("sessions", "comparisons", "groups", "not_compared", "fit", "fits", "loss_parity", "health", "gpus"),
    "communication": ("communication", "nccl_tests"),
    "performance": ("performance", "stragglers", "gpus", "mfu"),
    "diagnose": ("findings",),
}


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


def analysis_document(analysis, sections=("all",)) -> dict:
    """The JSON document (a dict of plain values) of ``sections`` of ``analysis``."""
    view = analysis_view(analysis)
    wanted: list[str] = []
    for section in sections:
        if section == "all":
            wanted += [k for keys in SECTION_KEYS.values() for k in keys]
        else:
            wanted += SECTION_KEYS[section]
    doc: dict = {}
    for key in dict.fromkeys(wanted):
        if key in ("sessions", "comparisons", "groups", "not_compared", "fit", "fits"):
            doc[key] = view["scaling"].get(key)
        else:
            doc[key] = view.get(key)
    if view["scaling"].get("baseline") is not None and "sessions" in doc:
        doc["baseline"] = view["scaling"]["baseline"]
    doc["definitions"] = view["definitions"]
    return doc


def render_json(report) -> str:
    """``report`` (a dict, or an object with ``to_dict()``) as indented JSON text; NaN and
    infinities become null."""
    doc = report if isinstance(report, dict) else report.to_dict()
    doc = _nan_to_none(plain(doc))
    return orjson.dumps(doc, default=_default,
                        option=orjson.OPT_INDENT_2 | orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_NON_STR_KEYS).decode()
