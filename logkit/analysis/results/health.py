"""Training health: NaN/Inf points, divergence, the final loss, and loss parity between runs."""

from __future__ import annotations

from dataclasses import dataclass

from logkit.analysis.results.values import plain
from logkit.schema.vocab import LossAxis

__all__ = ["NanPoint", "Divergence", "Health", "LossParity"]


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

