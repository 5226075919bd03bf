"""What the analysis returns: frozen dataclasses, and frames with declared columns.

Renderers read these fields; they never decide what counts as a scaling comparison, which
figure is the headline, or how severities order: those decisions are made once, here or in
the analysis that fills the field. ``Analysis.to_dict()`` is the one serializer (the JSON
document of ``analyze_logs --json`` is a selection of it).

    >>> c = Ratios(speedup=1.8, scaling_efficiency=0.9, step_rate_ratio=0.9)
    >>> plain({"c": c, "x": float("nan")})
    {'c': {'speedup': 1.8, 'scaling_efficiency': 0.9, 'step_rate_ratio': 0.9}, 'x': None}
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import pandas as pd

from logkit.schema.findings import Severity
from logkit.schema.vocab import LossAxis, SessionKind, on_cpu

MAX_EVIDENCE = 10  # evidence lines a finding keeps (all are counted)

__all__ = ["plain", "Ratios", "Flag", "SessionSummary", "Comparison", "Group", "NotCompared", "Fit", "Scaling",
           "NanPoint", "Divergence", "Health", "LossParity", "Mfu", "Finding", "Curves", "Analysis"]


def plain(value: Any) -> Any:
    """JSON-able values: NaN and <NA> -> None, numpy scalars -> Python, non-text keys -> text, frames ->
    lists of row dicts, dataclasses -> dicts (their own ``to_dict`` where they have one)."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Severity):
        return value.value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        if hasattr(value, "to_dict"):
            return value.to_dict()
        return {f.name: plain(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, Mapping):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, pd.DataFrame):
        return [{str(k): plain(v) for k, v in row.items()} for row in value.to_dict("records")]
    if hasattr(value, "tolist") and not hasattr(value, "item"):  # numpy arrays
        return plain(value.tolist())
    if hasattr(value, "item"):
        try:
            return plain(value.item())
        except (TypeError, ValueError):
            pass
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value


# ---------------------------------------------------------------------------------------
# Scaling
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Ratios:
    """Candidate over baseline, on one basis."""

    speedup: float | None = None
    scaling_efficiency: float | None = None
    step_rate_ratio: float | None = None


@dataclass(frozen=True)
class Flag:
    """A speedup that needs explaining (``slowdown`` below 1, ``superlinear`` above the rank ratio)."""

    kind: str
    cause: str
    causes: tuple[str, ...]
    speedup: float
    rank_ratio: float
    basis: str
    significant: bool


@dataclass(frozen=True)
class SessionSummary:
    """One session's headline figures (``summary.session_summary``) and its steady state."""

    session_id: str | None
    mode: str | None = None
    world_size: int | None = None
    gpu_count: int | None = None
    duration_s: float | None = None
    total_steps: int | None = None
    steps_per_second: float | None = None
    samples_per_second: float | None = None
    total_batch_size: int | None = None
    final_loss: float | None = None
    basis: str | None = None
    basis_detail: str | None = None
    logged_steps: int = 0
    total_batch_size_from: str | None = None
    final_loss_from: str | None = None
    kind: str = SessionKind.TRAINING
    warmup_steps: int = 0
    steady_steps: int = 0
    steady_samples_per_second: float | None = None
    steady_steps_per_second: float | None = None
    # what the reports show beside the figures (from the session's meta)
    status: str | None = None
    model: str | None = None
    start_time: str | None = None
    duration_from: str | None = None
    status_detail: str | None = None  # what the status rests on ("still running (last written 4 s ago)")

    @property
    def is_training(self) -> bool:
        """A training run (not a GPU capture or an nccl-tests benchmark): only these are compared."""
        return self.kind == SessionKind.TRAINING

    @property
    def is_multi(self) -> bool:
        """More than one rank or GPU took part."""
        return (self.world_size or 1) > 1 or (self.gpu_count or 0) > 1

    @property
    def on_cpu(self) -> bool | None:
        """True when the run says it had no GPU, False when it had one, None when it does not say."""
        return on_cpu(self.mode, self.gpu_count)


@dataclass(frozen=True)
class Comparison:
    """A candidate run against its group's baseline.

    ``headline``: the figures to show first (``basis`` says which: the steady state when both
    runs logged step times, else the whole run); ``whole_run`` and ``steady`` beside them.
    ``is_scaling``: the candidate has more ranks than the baseline (else an A/B comparison of
    runs, not a scaling measurement). ``baseline_samples_per_second`` /
    ``candidate_samples_per_second``: each run's throughput on the headline basis.
    """

    baseline: str
    candidate: str
    group: str | None
    regime: str
    basis: str
    basis_detail: str
    headline: Ratios
    whole_run: Ratios
    steady: Ratios | None
    speedup_ci: tuple[float, float] | None
    ci_level: float
    rank_ratio: float
    baseline_samples_per_second: float | None = None
    candidate_samples_per_second: float | None = None
    baseline_basis: str | None = None
    candidate_basis: str | None = None
    baseline_samples_seen: float | None = None
    candidate_samples_seen: float | None = None
    samples_ratio: float | None = None
    note: str | None = None
    flags: tuple[Flag, ...] = ()

    @property
    def is_scaling(self) -> bool:
        return self.rank_ratio > 1

    @property
    def speedup(self) -> float | None:
        return self.headline.speedup

    @property
    def scaling_efficiency(self) -> float | None:
        return self.headline.scaling_efficiency

    def to_dict(self) -> dict:
        steady = self.steady or Ratios()
        return plain({
            "baseline": self.baseline, "candidate": self.candidate, "speedup": self.headline.speedup,
            "scaling_efficiency": self.headline.scaling_efficiency, "regime": self.regime,
            "step_rate_ratio": self.headline.step_rate_ratio, "basis": self.basis,
            "basis_detail": self.basis_detail, "group": self.group,
            "whole_run_speedup": self.whole_run.speedup,
            "whole_run_scaling_efficiency": self.whole_run.scaling_efficiency,
            "whole_run_step_rate_ratio": self.whole_run.step_rate_ratio,
            "steady_speedup": steady.speedup, "steady_scaling_efficiency": steady.scaling_efficiency,
            "steady_step_rate_ratio": steady.step_rate_ratio,
            "speedup_ci": list(self.speedup_ci) if self.speedup_ci else None, "ci_level": self.ci_level,
            "steady_state": self.steady is not None, "rank_ratio": self.rank_ratio, "is_scaling": self.is_scaling,
            "baseline_samples_per_second": self.baseline_samples_per_second,
            "candidate_samples_per_second": self.candidate_samples_per_second,
            "baseline_basis": self.baseline_basis, "candidate_basis": self.candidate_basis,
            "baseline_samples_seen": self.baseline_samples_seen,
            "candidate_samples_seen": self.candidate_samples_seen, "samples_ratio": self.samples_ratio,
            "note": self.note, "flags": self.flags,
        })


@dataclass(frozen=True)
class Group:
    """Runs that may be compared with each other (same model, sequence length, configuration)."""

    key: Mapping[str, Any]
    label: str
    members: tuple[str, ...]
    baseline: str | None


@dataclass(frozen=True)
class NotCompared:
    session_id: str | None
    reason: str


@dataclass(frozen=True)
class Fit:
    """Amdahl fit of a group's speedups, with the Karp-Flatt serial fraction per world size."""

    group: str | None
    serial_fraction: float
    serial_fraction_raw: float
    parallel_fraction: float
    karp_flatt: Mapping[int, float]
    predicted: Mapping[int, float] | None
    r2: float | None
    points: int
    baseline_world_size: int
    reliable: bool
    note: str | None
    superlinear_world_sizes: tuple[int, ...]
    model: str = "amdahl"

    def to_dict(self) -> dict:
        keys = ("group", "model", "serial_fraction", "serial_fraction_raw", "parallel_fraction", "karp_flatt",
                "predicted", "r2", "points", "baseline_world_size", "reliable", "note", "superlinear_world_sizes")
        return {k: plain(getattr(self, k)) for k in keys}


@dataclass(frozen=True)
class Scaling:
    """The comparison section: every session's summary, the groups, each comparison, the fits."""

    sessions: tuple[SessionSummary, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    groups: tuple[Group, ...] = ()
    not_compared: tuple[NotCompared, ...] = ()
    fits: tuple[Fit, ...] = ()
    baseline: str | None = None

    @property
    def fit(self) -> Fit | None:
        return self.fits[0] if self.fits else None

    @property
    def training(self) -> tuple[SessionSummary, ...]:
        return tuple(s for s in self.sessions if s.is_training)

    def summary(self, session_id) -> SessionSummary | None:
        return next((s for s in self.sessions if s.session_id == session_id), None)

    def to_dict(self) -> dict:
        return {"sessions": plain(self.sessions), "comparisons": plain(self.comparisons),
                "groups": plain(self.groups), "not_compared": plain(self.not_compared),
                "fit": plain(self.fit), "fits": plain(self.fits), "baseline": self.baseline}


# ---------------------------------------------------------------------------------------
# Health
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class NanPoint:
    """A rank and step where a loss, gradient or tensor was not finite, and where the log says so."""

    step: int | None
    rank: int | None
    what: str
    source: str | None


@dataclass(frozen=True)
class Divergence:
    kind: str
    min_loss: float
    min_at: float
    final_loss_smoothed: float
    rise: float
    rise_over_drop: float | None
    window: int


@dataclass(frozen=True)
class Health:
    """NaN/Inf and divergence of one session, and its final loss as the run states it."""

    nan_steps: tuple[NanPoint, ...] = ()
    nan_events: int = 0
    divergence: Divergence | None = None
    final_loss: float | None = None
    points: int = 0
    basis: str = LossAxis.SAMPLES_SEEN
    final_loss_from: str | None = None

    @property
    def nan_count(self) -> int:
        return len(self.nan_steps)

    def to_dict(self) -> dict:
        return {"nan_steps": plain(self.nan_steps), "nan_count": self.nan_count, "nan_events": self.nan_events,
                "divergence": plain(self.divergence), "final_loss": plain(self.final_loss),
                "points": self.points, "basis": self.basis, "final_loss_from": self.final_loss_from}


@dataclass(frozen=True)
class LossParity:
    baseline: str | None
    candidate: str | None
    final_loss_diff: float | None = None
    final_loss_rel_diff: float | None = None
    max_abs_diff_aligned: float | None = None
    mean_abs_diff_aligned: float | None = None
    aligned_by: str = LossAxis.STEPS
    points: int = 0
    overlap: tuple[float, float] | None = None


# ---------------------------------------------------------------------------------------
# Performance
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Mfu:
    """Model FLOPs utilization of one session; ``mfu`` None with ``reason`` saying which input is missing."""

    mfu: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    gpu_model: str | None = None
    gpu_name: str | None = None
    flops_per_token: float | None = None
    tokens_per_second: float | None = None
    tokens_rows: int = 0
    n_gpus: int = 1
    parameters_total: float | None = None
    parameters_trainable: float | None = None
    parameters_from: str = "not logged"
    definition: str = ""
    missing: tuple[str, ...] = ()
    reason: str | None = None
    assumptions: tuple[str, ...] = ()


# ---------------------------------------------------------------------------------------
# Findings
# ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Finding:
    """Something wrong (or worth knowing), with the evidence that says so (``file:line`` where a
    line does). ``extra``: kind-specific facts (the sequence number of a timeout, the ops ...)."""

    severity: Severity
    kind: str
    session_id: str | None
    title: str
    detail: str
    evidence: tuple[str, ...] = ()
    evidence_total: int = 0
    ranks: tuple[int, ...] = ()
    extra: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def make(cls, severity, kind: str, session_id, title: str, detail: str, evidence=(), ranks=(),
             **extra) -> Finding:
        """A finding; ``evidence`` (file:line, or a file and a step range) keeps its first
        ``MAX_EVIDENCE`` entries and counts them all; ``ranks`` sorted, unique, missing ones dropped."""
        ev = [str(e) for e in evidence if e]
        return cls(Severity.parse(severity), kind, session_id, title, detail, tuple(ev[:MAX_EVIDENCE]), len(ev),
                   tuple(sorted({int(r) for r in ranks if r is not None and not pd.isna(r)})), extra)

    def to_dict(self) -> dict:
        return {"severity": self.severity.value, "kind": self.kind, "session_id": self.session_id,
                "title": self.title, "detail": self.detail, "evidence": list(self.evidence),
                "evidence_total": self.evidence_total, "ranks": list(self.ranks), **plain(dict(self.extra))}


# ---------------------------------------------------------------------------------------
# What the plots draw
# ---------------------------------------------------------------------------------------
def _frame(*columns: str) -> pd.DataFrame:
    return pd.DataFrame({c: pd.Series(dtype="float64") for c in columns})


@dataclass(frozen=True)
class Curves:
    """Series per session, ready to draw (``curves.py`` says how each is made).

    ``loss``: session_id, x, loss (the lowest rank's finite losses, x on ``loss_axis``);
    ``eval_loss``: session_id, x, value; ``throughput``: session_id, step, samples_per_s;
    ``gpu_utilization``: session_id, host, gpu, time_s, utilization_pct; ``bandwidth``:
    session_id, op, size_mb, busbw_mb_s (median per size), records.
    """

    loss: pd.DataFrame = field(default_factory=lambda: _frame("session_id", "x", "loss"))
    eval_loss: pd.DataFrame = field(default_factory=lambda: _frame("session_id", "x", "value"))
    loss_axis: str = LossAxis.STEP
    throughput: pd.DataFrame = field(default_factory=lambda: _frame("session_id", "step", "samples_per_s"))
    gpu_utilization: pd.DataFrame = field(
        default_factory=lambda: _frame("session_id", "host", "gpu", "time_s", "utilization_pct"))
    bandwidth: pd.DataFrame = field(
        default_factory=lambda: _frame("session_id", "op", "size_mb", "busbw_mb_s", "records"))


# ---------------------------------------------------------------------------------------
# Everything
# ---------------------------------------------------------------------------------------
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
