"""Pure functions from sessions to results: no printing, no files.

``analyze(sessions) -> Analysis`` is the facade (``results.py`` declares what it returns);
one module per concern: ``summary`` (a session's headline figures), ``throughput`` (rates,
warm-up, bootstrap), ``scaling`` (comparison groups, speedup, flags) with ``amdahl``,
``communication`` and ``nccl_tests`` (with ``peaks``), ``performance`` and ``mfu``, ``health``,
``diagnose`` with ``log_findings``, ``curves`` (what the plots draw), ``gates`` (CI exit
statuses); ``definitions`` and ``thresholds`` hold every figure's definition and threshold once.
"""

from __future__ import annotations

from logkit.analysis.analyze import analyze
from logkit.analysis.results import Analysis

__all__ = ["analyze", "Analysis"]
