"""PyTorch's Flight Recorder, dumped by the emitter when a rank stalls or fails.

The Flight Recorder (``TORCH_FR_BUFFER_SIZE`` > 0, ``TORCH_NCCL_TRACE_BUFFER_SIZE`` before torch
2.7) keeps the last N collectives each rank enqueued, with their sequence numbers and the stack
that enqueued them. torch writes it itself only on an NCCL watchdog timeout; a rank that hangs
outside a collective (the one the others wait for) never dumps. Here every rank dumps at its
first stall record and at an error, into its session folder, so the post-mortem compares the
ranks' last collectives. Recording off: nothing is done (the dump is torch's to enable: it keeps
its own ring buffer on the hot path).
"""

from __future__ import annotations

import os
from pathlib import Path

from trainer_hooks.summary import write_whole

ENV = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")


def recording() -> bool:
    """Whether torch records collectives in this process (its buffer size is set above 0)."""
    for name in ENV:
        value = os.environ.get(name, "").strip()
        if value.isdigit() and int(value) > 0:
            return True
    return False


def dump_bytes() -> bytes | None:
    """The Flight Recorder's dump (a pickle of plain data), or None where this torch has none."""
    import torch.distributed as dist

    if not dist.is_available() or not dist.is_initialized():
        return None
    from torch._C import _distributed_c10d as c10d

    for name in ("_dump_fr_trace", "_dump_nccl_trace"):  # the name before torch 2.6: NCCL only
        fn = getattr(c10d, name, None)
        if fn is not None:
            return fn()
    return None


def dump_to(path: Path) -> bool:
    """Write the dump to ``path`` (whole or not at all); False when there is none to write."""
    if not recording():
        return False
    data = dump_bytes()
    if not data:
        return False
    write_whole(path, data)
    return True
