"""Performance results beside the frames: MFU."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mfu", "StragglerCall", "BY_ARRIVAL", "BY_STEP_TIME"]

# how a session's stragglers are judged (``StragglerCall.basis``)
BY_ARRIVAL = "arrival at the gradient sync"
BY_STEP_TIME = "step time"


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


@dataclass(frozen=True)
class StragglerCall:
    """How one session's stragglers were judged (``basis``: ``BY_ARRIVAL`` where the per-step
    phases were timed, else ``BY_STEP_TIME``) and, when no rank is a straggler, the rank closest to
    being one (``nearest_rank``: the one last to the sync in the most steps, or the slowest; None
    when there is no other rank to compare with). The stragglers themselves are the rows of
    ``Analysis.stragglers`` with ``is_straggler``."""

    session_id: str | None
    basis: str
    nearest_rank: int | None = None

    @property
    def by_arrival(self) -> bool:
        """Judged by arrival at the gradient sync (else by step time)."""
        return self.basis == BY_ARRIVAL
