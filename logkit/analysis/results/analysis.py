"""What the analysis returns: frozen dataclasses, and frames with declared columns.

Renderers read these fields; they never decide what counts as a scaling comparison, which
figure is the headline, or how severities order: those decisions are made once, here or in
the analysis that fills the field. ``Analysis.to_dict()`` is the one serializer (the JSON
document of ``analyze_logs --json`` is a selection of it). The result types live beside it by
concern (``scaling.py``, ``health.py``, ``performance.py``, ``findings.py``, ``curves.py``);
``plain`` in ``values.py``.

    >>> c = Ratios(speedup=1.8, scaling_efficiency=0.9, step_rate_ratio=0.9)
    >>> plain({"c": c, "x": float("nan")})
    {'c': {'speedup': 1.8, 'scaling_efficiency': 0.9, 'step_rate_ratio': 0.9}, 'x': None}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import pandas as pd

from logkit.analysis.results.curves import Curves, _frame
from logkit.analysis.results.findings import Finding
from logkit.analysis.results.health import Health, LossParity
from logkit.analysis.results.performance import Mfu
from logkit.analysis.results.scaling import Ratios, Scaling
from logkit.analysis.results.values import plain

__all__ = ["Analysis"]
_EXAMPLE = Ratios  # the module doc's example


_DICT_KEYS = ("verdict", "scaling", "communication", "nccl_tests", "communication_peaks", "performance",
              "stragglers", "step_breakdown", "gpus", "mfu", "health", "loss_parity", "findings", "definitions")


@dataclass(frozen=True)
class Analysis:
    """Every result of ``analyze``.

    Frames (columns declared where they are made): ``communication`` (per session, rank and op),
    ``nccl_tests`` (per nccl-tests op and placement), ``communication_peaks`` (the reference table),
    ``performance`` (step-time spread per rank), ``stragglers`` (by arrival at the gradient sync where
    the phases were timed, else by step time), ``step_breakdown`` (per rank: data, compute, exposed
    communication, wait), ``gpus`` (per GPU), ``diagnostics``
    (the sessions' parse diagnostics). ``mfu`` and ``health`` by session id; ``findings`` most
    severe first; ``definitions`` of every figure; ``curves`` what the plots draw; ``verdict`` the
    sentences every report opens with.
    """

    scaling: Scaling
    communication: pd.DataFrame
    nccl_tests: pd.DataFrame
    communication_peaks: pd.DataFrame
    performance: pd.DataFrame
    stragglers: pd.DataFrame
    gpus: pd.DataFrame
    mfu: Mapping[str, Mfu]
    health: Mapping[str, Health]
    loss_parity: tuple[LossParity, ...]
    findings: tuple[Finding, ...]
    definitions: Mapping[str, str]
    curves: Curves = field(default_factory=Curves)
    verdict: tuple[str, ...] = ()
    step_breakdown: pd.DataFrame = field(default_factory=lambda: _frame(
        "session_id", "rank", "steps", "data_s", "compute_s", "comm_exposed_s", "wait_s", "other_s", "step_s"))
    diagnostics: pd.DataFrame = field(
        default_factory=lambda: pd.DataFrame(columns=["session_id", "file", "line", "reason", "text"]))

    def to_dict(self) -> dict:
        """Every result as JSON-able values (frames as lists of row dicts, NaN as None)."""
        return {k: plain(getattr(self, k)) for k in _DICT_KEYS}
