"""logkit: read training logs into pandas frames, and tell whether multi-GPU paid off.

Importing ``logkit`` is cheap: pandas, matplotlib and seaborn load only where they are
used, and torch never does.

    >>> import logkit
    >>> sessions = logkit.load_sessions("logs")          # doctest: +SKIP
    >>> sessions[0].steps[["rank", "step", "loss"]]      # doctest: +SKIP
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__", "load_session", "load_sessions", "Session"]


def __getattr__(name: str):
    # Lazy: the training side imports logkit.schema and must not pay for pandas.
    if name in ("load_session", "load_sessions", "Session"):
        from logkit import ingest

        return getattr(ingest, name)
    raise AttributeError(f"module 'logkit' has no attribute {name!r}")
