"""JSON documents of the analyses: one document per run of the CLI, NaN and infinities as null.

``analysis_document(analysis, sections)`` picks the sections asked for from ``Analysis.to_dict()``:

- ``compare``: ``sessions``, ``comparisons``, ``groups``, ``not_compared``, ``fit``, ``fits``,
  ``loss_parity``, ``health``, ``gpus`` (and ``baseline``)
- ``communication``: ``communication`` (one row per session, rank and op), ``nccl_tests`` (one row
  per nccl-tests op and placement)
- ``performance``: ``performance``, ``stragglers``, ``step_breakdown``, ``gpus``, ``mfu``
- ``diagnose``: ``findings``
- ``ledger``: ``ledger`` (per session: ``wall_s``, ``seconds`` and ``shares`` by category)
- ``forecast``: ``forecast`` (per group and world size asked), ``counterfactual`` (the run against its
  baseline, then the forecast's sizes, in hours, GPU-hours and money)
- ``all``: every section

and always adds ``verdict`` (the sentences every report opens with) and ``definitions`` (the
definition of every figure).
"""

from __future__ import annotations

import orjson

from logkit.analysis.results import Analysis, plain
from logkit.schema.values import plain_json

SECTION_KEYS: dict[str, tuple[str, ...]] = {
    "compare": ("sessions", "comparisons", "groups", "not_compared", "fit", "fits", "loss_parity", "health", "gpus"),
    "communication": ("communication", "nccl_tests"),
    "performance": ("performance", "stragglers", "step_breakdown", "gpus", "mfu"),
    "diagnose": ("findings",),
    "ledger": ("ledger",),
    "forecast": ("forecast", "counterfactual"),
}
_SCALING_KEYS = ("sessions", "comparisons", "groups", "not_compared", "fit", "fits")


def analysis_document(analysis: Analysis, sections=("all",)) -> dict:
    """The JSON document (a dict of plain values) of ``sections`` of ``analysis``."""
    whole = analysis.to_dict()
    wanted: list[str] = []
    for section in sections:
        wanted += [k for keys in SECTION_KEYS.values() for k in keys] if section == "all" else SECTION_KEYS[section]
    doc: dict = {}
    for key in dict.fromkeys(wanted):
        doc[key] = whole["scaling"][key] if key in _SCALING_KEYS else whole[key]
    if whole["scaling"]["baseline"] is not None and "sessions" in doc:
        doc["baseline"] = whole["scaling"]["baseline"]
    doc["verdict"] = whole["verdict"]
    doc["definitions"] = whole["definitions"]
    return doc


def render_json(document) -> str:
    """``document`` (a dict, or an ``Analysis``: all of it) as indented JSON text; NaN and infinities
    become null."""
    doc = plain(document.to_dict() if isinstance(document, Analysis) else document)
    try:
        return orjson.dumps(doc, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
    except TypeError:  # an integer beyond 64 bits, text that is not text: what the readers missed, made plain
        return orjson.dumps(plain_json(doc), option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS).decode()
