"""Figures as pure functions over arrays and frames: each figure family defined once, called by every way of running the analysis."""
