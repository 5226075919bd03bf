"""Findings: their severities, and the kinds the emitter's own checks write.

The emitter writes a finding as an ``anomaly`` or ``resource_warning`` record whose ``kind`` is
one of ``EMITTER_KINDS`` (or a non-finite kind of ``NONFINITE_KINDS``); ``analyze_logs
--diagnose`` reads the same table to title and rank them. ``Severity`` is ordered:
``Severity.CRITICAL > Severity.ERROR > Severity.WARNING > Severity.INFO``.

    >>> sorted([Severity.INFO, Severity.CRITICAL, Severity.WARNING], reverse=True)[0].value
    'critical'
    >>> Severity.parse("high") is Severity.ERROR, SLOW_STEP.severity.value
    (True, 'warning')
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

__all__ = ["Severity", "SEVERITIES", "FindingKind", "EMITTER_KINDS", "NONFINITE_KINDS", "SLOW_STEP",
           "GPU_UTIL_LOW", "MEMORY_HIGH", "GPU_MEMORY_HIGH", "LOSS_SPIKE", "GRAD_EXPLODE", "GRAD_VANISH",
           "NAN_LOSS", "NAN_GRAD", "SAMPLING_DEGRADED", "COMM_TIMINGS_DROPPED", "COMM_NOT_TIMED",
           "EXIT_BEFORE_END"]


class Severity(enum.Enum):
    """How bad a finding is; ordered (a worse severity compares greater)."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for critical ... 3 for info: the order findings are listed in."""
        return _ORDER.index(self)

    def __lt__(self, other: Severity) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank > other.rank

    def __le__(self, other: Severity) -> bool:
        return self == other or self < other

    def __gt__(self, other: Severity) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank < other.rank

    def __ge__(self, other: Severity) -> bool:
        return self == other or self > other

    @classmethod
    def parse(cls, text) -> Severity:
        """A severity from its name (any case; high/medium/low read as error/warning/info)."""
        if isinstance(text, Severity):
            return text
        name = str(text or "").strip().lower()
        return cls(_ALIASES.get(name, name))


_ORDER = (Severity.CRITICAL, Severity.ERROR, Severity.WARNING, Severity.INFO)
_ALIASES = {"high": "error", "medium": "warning", "low": "info"}
SEVERITIES: tuple[str, ...] = tuple(s.value for s in _ORDER)


@dataclass(frozen=True)
class FindingKind:
    """A kind of finding the emitter writes (its record's ``kind``): how ``--diagnose`` titles it,
    how severe it is, and what it means for the run."""

    name: str
    title: str
    severity: Severity
    meaning: str


SLOW_STEP = FindingKind("slow_step", "Slow steps reported by the run", Severity.WARNING,
                        "steps far slower than the run's recent median (the emitter's check)")
GPU_UTIL_LOW = FindingKind("gpu_util_low", "Low GPU utilization reported by the run", Severity.WARNING,
                           "a GPU's utilization fell below the threshold: input pipeline, small batch, or waiting "
                           "on other ranks")
MEMORY_HIGH = FindingKind("memory_high", "Host memory high", Severity.WARNING,
                          "host memory above the threshold: swapping or the OOM killer are next")
GPU_MEMORY_HIGH = FindingKind("gpu_memory_high", "GPU memory high", Severity.WARNING,
                              "GPU memory above the threshold: an out-of-memory error is close (fragmentation, a "
                              "longer batch)")
LOSS_SPIKE = FindingKind("loss_spike", "Loss spikes", Severity.WARNING, "losses far above the recent median")
GRAD_EXPLODE = FindingKind("grad_explode", "Exploding gradients", Severity.WARNING,
                           "a layer's gradient norm jumped above 10x its recent median while carrying at least its "
                           "share of the step's gradient: harmless once; when it repeats or the loss follows, lower "
                           "the learning rate, clip gradients, check the data")
GRAD_VANISH = FindingKind("grad_vanish", "Vanishing gradients", Severity.WARNING,
                          "gradient norms below the threshold: layers stop learning")
EMITTER_KINDS: dict[str, FindingKind] = {k.name: k for k in (
    SLOW_STEP, GPU_UTIL_LOW, MEMORY_HIGH, GPU_MEMORY_HIGH, LOSS_SPIKE, GRAD_EXPLODE, GRAD_VANISH)}

# Non-finite values: the kind of an ``anomaly`` / ``nan_detected`` record (the NaN finding counts them).
NAN_LOSS = "nan_loss"
NAN_GRAD = "nan_grad"
NONFINITE_KINDS: frozenset[str] = frozenset(
    {NAN_LOSS, NAN_GRAD, "nan_grad_norm", "inf_loss", "inf_grad", "inf_grad_norm", "nan"})

# Notes the emitter writes about itself (``resource_warning`` / ``error`` kinds), not findings of the run.
SAMPLING_DEGRADED = "sampling_degraded"
COMM_TIMINGS_DROPPED = "comm_timings_dropped"
COMM_NOT_TIMED = "comm_not_timed"
EXIT_BEFORE_END = "exit_before_end"
