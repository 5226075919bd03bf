"""Renderers only: console text, JSON, HTML, PNG plots and exports of an analysis; no parsing here.

``view`` turns an ``Analysis`` into plain values; ``console``, ``json_report``, ``html`` and
``plots`` render it; ``export`` writes the sessions' frames (Parquet, CSV, TensorBoard).
"""

from __future__ import annotations

__all__ = ["view", "console", "json_report", "html", "plots", "export"]
