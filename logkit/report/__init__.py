"""Renderers of an ``Analysis``: console text, JSON, HTML, PNG plots; and exports of sessions' frames.

    >>> from logkit.report import write_html, render_compare, render_json   # doctest: +SKIP

Renderers read the analysis' fields and never parse a log or decide a figure.
"""

from __future__ import annotations

import importlib

# name -> the module that defines it (loaded on first use: importing logkit.report stays cheap)
_PUBLIC = {
    "render_compare": "logkit.report.console", "render_communication": "logkit.report.console",
    "render_performance": "logkit.report.console", "render_diagnose": "logkit.report.console",
    "render_json": "logkit.report.json_report", "analysis_document": "logkit.report.json_report",
    "render_html": "logkit.report.html", "write_html": "logkit.report.html",
    "render_plots": "logkit.report.plots", "write_plots": "logkit.report.plots", "PLOTS": "logkit.report.plots",
    "export_sessions": "logkit.report.export",
}
__all__ = sorted(_PUBLIC)


def __getattr__(name: str):
    if name in _PUBLIC:
        return getattr(importlib.import_module(_PUBLIC[name]), name)
    raise AttributeError(f"module 'logkit.report' has no attribute {name!r}")
