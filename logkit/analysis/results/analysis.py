"""What the analysis returns: frozen dataclasses, and frames with declared columns.

Renderers read these fields; they never decide what counts as a scaling comparison, which
figure is the headline, or how severities order: those decisions are made once, here or in
the analysis that fills the field. ``Analysis.to_dict()`` is the one serializer (the JSON
document of ``analyze_logs --json`` is a selection of it). The result types live beside it by
concern (``scaling.py``, ``health.py``, ``performance.py``, ``findings.py``, ``curves.py``);
``plain`` in ``values.py``; the frames' row types in ``frames.py``.

A frame is read through ``rows`` (typed rows: attribute access, None for a missing value) or
``frame`` (the frame with its declared columns); both raise ``MissingColumns`` when a declared
column is missing:

    >>> a = Analysis.empty()
    >>> a.rows("gpus"), list(a.frame("stragglers").columns[:3])
    ([], ['session_id', 'rank', 'median_step_s'])
    >>> [(s.value, n) for s, n in a.severity_counts]
    [('critical', 0), ('error', 0), ('warning', 0), ('info', 0)]
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from logkit.analysis.results.curves import Curves
from logkit.analysis.results.findings import Finding, severity_counts
from logkit.analysis.results.frames import ROWS
from logkit.analysis.results.health import Health, LossParity
from logkit.analysis.results.ledger import LedgerRow
from logkit.analysis.results.performance import Mfu, StragglerCall
from logkit.analysis.results.rows import ALL, declared, typed_rows
from logkit.analysis.results.scaling import Scaling
from logkit.analysis.results.values import plain
from logkit.schema.findings import Severity

__all__ = ["Analysis"]

_DICT_KEYS = ("verdict", "scaling", "communication", "nccl_tests", "communication_peaks", "run_links", "performance",
              "stragglers", "step_breakdown", "gpus", "mfu", "health", "loss_parity", "findings", "definitions",
              "ledger", "forecast", "counterfactual")


def _empty(name: str) -> pd.DataFrame:
    return pd.DataFrame(columns=list(ROWS[name].COLUMNS))


@dataclass(frozen=True)
class Analysis:
    """Every result of ``analyze``.

    Frames (columns declared where they are made; ``frames.ROWS`` names each one's row type):
    ``communication`` (per session, rank and op), ``nccl_tests`` (per nccl-tests op and placement),
    ``communication_peaks`` (the reference table), ``run_links`` (the links of that table, or of the
    network, the sessions' communication was judged against), ``performance`` (step-time spread per rank),
    ``stragglers`` (by arrival at the gradient sync where the phases were timed, else by step time;
    ``straggler_calls`` says which, per session), ``step_breakdown`` (per rank: data, compute,
    exposed communication, wait), ``gpus`` (per GPU), ``diagnostics`` (the sessions' parse
    diagnostics). ``mfu`` and ``health`` by session id; ``findings`` most severe first;
    ``definitions`` of every figure; ``curves`` what the plots draw; ``verdict`` the sentences every
    report opens with.

    Derived from the fields above when the analysis is made (so ``dataclasses.replace`` keeps them
    right): ``severity_counts`` (every severity, most severe first, with its number of findings)
    and ``training_mfu`` (the MFU of the training runs: a capture has no model).
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
    step_breakdown: pd.DataFrame = field(default_factory=lambda: _empty("step_breakdown"))
    diagnostics: pd.DataFrame = field(default_factory=lambda: _empty("diagnostics"))
    run_links: pd.DataFrame = field(default_factory=lambda: _empty("run_links"))
    straggler_calls: Mapping[str, StragglerCall] = field(default_factory=dict)
    ledger: tuple[LedgerRow, ...] = ()  # where each session's hours went (kernels/ledger.py)
    forecast: pd.DataFrame = field(default_factory=lambda: _empty("forecast"))
    counterfactual: pd.DataFrame = field(default_factory=lambda: _empty("counterfactual"))
    severity_counts: tuple[tuple[Severity, int], ...] = field(init=False)
    training_mfu: Mapping[str, Mfu] = field(init=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "severity_counts", severity_counts(self.findings))
        training = {sid: m for sid, m in self.mfu.items()
                    if (s := self.scaling.session_summary(sid)) is None or s.is_training}
        object.__setattr__(self, "training_mfu", training)

    @classmethod
    def empty(cls, **fields) -> Analysis:
        """An analysis of nothing (every frame empty, with its declared columns); ``fields`` set."""
        base = {"scaling": Scaling(), **{name: _empty(name) for name in ROWS}, "mfu": {}, "health": {},
                "loss_parity": (), "findings": (), "definitions": {}}
        return cls(**{**base, **fields})

    def frame(self, name: str) -> pd.DataFrame:
        """The result frame ``name`` (a key of ``frames.ROWS``) with its declared columns, in their
        order; ``MissingColumns`` when one is missing."""
        return declared(getattr(self, name), ROWS[name].COLUMNS, f"Analysis.{name}")

    def rows(self, name: str, session_id: Any = ALL, head: int | None = None) -> list:
        """The rows of the result frame ``name`` as its row type (``frames.ROWS``): every session's,
        or ``session_id``'s; the first ``head`` when given. ``MissingColumns`` when a declared column
        is missing."""
        return typed_rows(getattr(self, name), ROWS[name], session_id, head)

    def to_dict(self) -> dict:
        """Every result as JSON-able values (frames as lists of row dicts of their declared columns, NaN
        as None)."""
        return {k: plain(self.frame(k) if k in ROWS else getattr(self, k)) for k in _DICT_KEYS}
