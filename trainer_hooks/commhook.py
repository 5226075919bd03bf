"""Timing of DDP gradient synchronisation, one measurement per bucket.

A DDP communication hook does what DDP's default all-reduce does (divide by the world
size, all-reduce, hand the tensor back) and notes, per bucket, the exact bytes and the
time from launch to completion. The training thread only appends a tuple; records are
built later, at step end.
"""

from __future__ import annotations

import gc
import time

__all__ = ["CommTimer", "find_ddp", "install_comm_hook"]


class CommTimer:
    """Collects ``(bucket_index, size_bytes, start, end)`` tuples in ``perf_counter`` seconds."""

    timing_source = "wall"

    def __init__(self) -> None:
        self.pending: list[tuple[int, int, float, float]] = []
        self.group_size = 1

    def drain(self) -> list[tuple[int, int, float, float]]:
        """The measurements since the last drain. Called at step end, when DDP has
        already waited for every bucket of the step."""
        items, self.pending = self.pending, []
        return items

    def hook(self, process_group, bucket):
        # Same arithmetic as torch's default allreduce_hook.
        import torch.distributed as dist

        start = time.perf_counter()
        group = process_group if process_group is not None else dist.group.WORLD
        tensor = bucket.buffer()
        size_bytes = tensor.numel() * tensor.element_size()
        index = bucket.index()
        tensor.div_(dist.get_world_size(group))
        fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()
        pending = self.pending

        def done(f):
            pending.append((index, size_bytes, start, time.perf_counter()))
            return f.value()[0]

        return fut.then(done)


def find_ddp(model):
    """The DistributedDataParallel wrapper holding ``model``, or None.

    transformers' Trainer hands callbacks the unwrapped model; its DDP wrapper is found
    through the garbage collector's referrers (DDP keeps the model in its ``_modules``),
    once, at train begin.
    """
    try:
        from torch.nn.parallel import DistributedDataParallel as DDP
    except Exception:
        return None
    if isinstance(model, DDP):
        return model
    # model <- DDP._modules <- (DDP.__dict__ on Python versions that materialise it) <- DDP
    frontier = [model]
    for _ in range(3):
        dicts = []
        for holder in gc.get_referrers(*frontier):  # one scan of the heap per level
            if isinstance(holder, DDP) and holder.module is model:
                return holder
            if isinstance(holder, dict) and holder is not frontier:
                dicts.append(holder)
        frontier = dicts
    return None


def install_comm_hook(ddp_model, timer: CommTimer) -> str | None:
    """Register the timing hook; returns None, or why it could not (another hook is there)."""
    import torch.distributed as dist

    try:
        group = getattr(ddp_model, "process_group", None)
        timer.group_size = dist.get_world_size(group) if group is not None else dist.get_world_size()
        ddp_model.register_comm_hook(group, timer.hook)
        return None
    except Exception as exc:  # e.g. accelerate already registered a compression hook
        return f"gradient sync not timed: {exc}"
