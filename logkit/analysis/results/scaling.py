"""The comparison section: each session's summary, the groups, each comparison and the fits."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from logkit.analysis.results.values import plain
from logkit.schema.vocab import SessionKind, on_cpu

__all__ = ["Ratios", "Flag", "RunFact", "SessionSummary", "Comparison", "Group", "NotCompared", "Fit", "GroupAverage", "Scaling"]


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
class RunFact:
    """One fact about a run as its logs give it (``SessionSummary.run_facts``): its name, its value, where
    it came from (``stated: ...``, ``derived: ...``, ``inferred (lower bound): ...``; None where the
    fact has no basis of its own) and the file:line it was read at."""

    name: str
    value: Any
    said: str | None = None
    source: str | None = None


# The run facts the reports show, in this order: (fact, its "_from" field or None).
RUN_FACTS = (("world_size", "world_size_from"), ("nodes", "nodes_from"), ("hosts", "hosts_from"),
             ("gpu_count", "gpu_count_from"), ("total_batch_size", "total_batch_size_from"),
             ("network", "network_from"), ("network_fallback", None), ("nics", None), ("transports", None),
             ("nccl_version", None), ("framework", None), ("strategy", "strategy_from"), ("zero_stage", None),
             ("clock_offsets", None))


def _span(values) -> str:
    return ",".join(str(v) for v in values)


def _fact_value(name: str, value):
    """A run fact as the reports show it: each host as one phrase (its ranks, local ranks and GPUs),
    each host's clock offset with its uncertainty; other facts as they are."""
    if name == "hosts" and value and isinstance(value[0], dict):
        return tuple(h["host"] + (" (" + "; ".join(f"{label} {_span(h[key])}" for key, label in (
            ("ranks", "ranks"), ("local_ranks", "local ranks"), ("gpus", "GPUs")) if h.get(key)) + ")"
            if any(h.get(k) for k in ("ranks", "local_ranks", "gpus")) else "") for h in value)
    if name == "clock_offsets" and value:
        return tuple(f"{c['host']} {c['offset_s']:+.6f} s" + (f" ± {c['uncertainty_s']:.6f} s"
                                                             if c.get("uncertainty_s") is not None else "")
                     for c in value if c.get("offset_s") is not None)
    return value


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
    # the run's facts as its logs give them, each with where it came from (schema.meta.provenance) and
    # ``facts_source`` {fact: "file:line"}
    world_size_from: str | None = None
    gpu_count_from: str | None = None
    nodes: int | None = None
    nodes_from: str | None = None
    hosts: tuple[dict, ...] | None = field(default=None, hash=False)  # {host, ranks, local_ranks, gpus}
    hosts_from: str | None = None
    network: str | None = None
    network_from: str | None = None
    network_fallback: str | None = None
    nics: tuple[str, ...] | None = None  # "mlx5_0:1/IB", "eth0"
    nccl_version: str | None = None
    transports: dict | None = field(default=None, hash=False)  # {transport: connections}
    framework: str | None = None
    strategy: str | None = None
    strategy_from: str | None = None
    zero_stage: int | None = None
    # issue 25 (sharded runs): the strategy and its facts in words (kernels.strategy.strategy_words)
    strategy_words: str | None = None
    timing_source: str | None = None  # how the collectives were timed (issue 25), and why not where none
    timing_note: str | None = None
    facts_source: dict | None = field(default=None, hash=False)
    # each host's clock offset to rank 0's host as measured at start: {host, offset_s, uncertainty_s}
    clock_offsets: tuple[dict, ...] | None = field(default=None, hash=False)

    @property
    def run_facts(self) -> tuple[RunFact, ...]:
        """The facts the logs give (``RUN_FACTS``, those known), each with its basis and file:line."""
        where = self.facts_source or {}
        return tuple(RunFact(name, _fact_value(name, getattr(self, name)), getattr(self, said) if said else None,
                             where.get(name))
                     for name, said in RUN_FACTS if getattr(self, name) not in (None, (), {}))

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
    ``per_rank_batch``: the baseline's global batch per rank (what a weak-scaling comparison keeps).
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
    per_rank_batch: float | None = None  # the baseline's global batch / its ranks (the candidate's too when weak)

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
class GroupAverage:
    """The mean figures of a comparison group's single-rank or multi-rank (``multi``) runs: the
    baseline and the candidates compared with it (``definitions: group_average``)."""

    group: str | None
    multi: bool
    sessions: tuple[str, ...]
    steps_per_second: float | None = None
    samples_per_second: float | None = None
    gpu_utilization_pct: float | None = None


@dataclass(frozen=True)
class Scaling:
    """The comparison section: every session's summary, the groups, each comparison, the fits."""

    sessions: tuple[SessionSummary, ...] = ()
    comparisons: tuple[Comparison, ...] = ()
    groups: tuple[Group, ...] = ()
    not_compared: tuple[NotCompared, ...] = ()
    fits: tuple[Fit, ...] = ()
    baseline: str | None = None
    averages: tuple[GroupAverage, ...] = ()

    @property
    def fit(self) -> Fit | None:
        return self.fits[0] if self.fits else None

    @property
    def training(self) -> tuple[SessionSummary, ...]:
        return tuple(s for s in self.sessions if s.is_training)

    def session_summary(self, session_id) -> SessionSummary | None:
        return next((s for s in self.sessions if s.session_id == session_id), None)

    def average(self, group, multi: bool) -> GroupAverage | None:
        """The averages of ``group``'s single-rank (``multi`` False) or multi-rank runs, if it has any."""
        return next((a for a in self.averages if a.group == group and a.multi == multi), None)

    def to_dict(self) -> dict:
        return {"sessions": plain(self.sessions), "comparisons": plain(self.comparisons),
                "groups": plain(self.groups), "not_compared": plain(self.not_compared),
                "fit": plain(self.fit), "fits": plain(self.fits), "baseline": self.baseline}

