"""Pure functions from sessions to results: no printing, no files."""

from __future__ import annotations

__all__ = ["scaling", "gpu", "comparison"]
