"""Renderers only: console text, JSON and HTML from a ``ComparisonReport``; no parsing here."""

from __future__ import annotations

__all__ = ["console", "json_report", "html"]
