"""logkit: read training logs into pandas frames, and tell whether multi-GPU paid off.

Importing ``logkit`` is cheap: pandas, matplotlib and seaborn load only where they are
used, and torch never does.

    >>> import logkit
    >>> sessions = logkit.load_sessions("logs")          # doctest: +SKIP
    >>> analysis = logkit.analyze(sessions)              # doctest: +SKIP
    >>> analysis.scaling.comparisons[0].speedup          # doctest: +SKIP
    >>> logkit.report.write_html(analysis, "report.html")  # doctest: +SKIP

The public API is what ``__all__`` names here and in ``logkit.report``; every other module
is internal.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__", "load_session", "load_sessions", "Session", "analyze", "Analysis", "report"]

_LAZY = {"load_session": "logkit.run.load", "load_sessions": "logkit.run.load", "Session": "logkit.ingest",
         "analyze": "logkit.analysis", "Analysis": "logkit.analysis"}


def __getattr__(name: str):
    # Lazy: the training side imports logkit.schema and must not pay for pandas.
    import importlib

    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name]), name)
    if name == "report":
        return importlib.import_module("logkit.report")
    raise AttributeError(f"module 'logkit' has no attribute {name!r}")
