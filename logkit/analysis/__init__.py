"""Pure functions from sessions to results: no printing, no files.

``analyze.analyze(sessions) -> Analysis`` is the facade; one module per concern: ``scaling``
(summaries, speedup), ``steady`` (warm-up, bootstrap), ``scaling_report`` (steady figures,
flags, Amdahl fit), ``performance``, ``communication`` (with ``peaks``), ``health``,
``diagnose``; ``comparison`` and ``gpu`` serve the older renderers.
"""

from __future__ import annotations

__all__ = ["analyze", "scaling", "steady", "scaling_report", "performance", "communication", "peaks", "health",
           "diagnose", "gpu", "comparison"]
