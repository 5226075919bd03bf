"""Performance results beside the frames: MFU."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Mfu"]


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

