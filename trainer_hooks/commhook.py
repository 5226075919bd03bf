"""Timing of DDP gradient synchronisation, one measurement per bucket.

A DDP communication hook does what DDP's default all-reduce does (divide by the world
size, all-reduce, hand the tensor back) and notes, per bucket, the exact bytes and the
time from launch to completion. Gradient-accumulation micro-steps under ``no_sync`` never
call the hook, so only real synchronisations are counted. The training thread only
appends a tuple; records are built later, at step end.
"""

from __future__ import annotations

import gc
import time
from collections import deque


class CommTimer:
    """Per-bucket timings of gradient synchronisation.

    On CUDA a pair of CUDA events brackets each bucket's all-reduce (start: the bucket is
    ready on the compute stream; end: recorded on a stream synchronised with the NCCL
    kernel), read back later with ``query()`` so the training stream never stalls. On CPU
    (gloo) it is wall time from launch to completion.
    """

    def __init__(self) -> None:
        self.pending: list[tuple] = []  # launched since the last collect: (bucket, bytes, start, end)
        self._in_flight: deque = deque()  # (step, bucket, bytes, start, end) awaiting the GPU
        self.group_size = 1
        self.timing_source = "wall"

    def hook(self, process_group, bucket):
        # Same arithmetic as torch's default allreduce_hook.
        import torch
        import torch.distributed as dist

        group = process_group if process_group is not None else dist.group.WORLD
        tensor = bucket.buffer()
        size_bytes = tensor.numel() * tensor.element_size()
        index = bucket.index()
        pending = self.pending
        if tensor.is_cuda:
            self.timing_source = "cuda_event"
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            start = time.perf_counter()
        tensor.div_(dist.get_world_size(group))
        fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()

        def done(f):
            if tensor.is_cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()  # on a stream that waits for the all-reduce kernel
            else:
                end = time.perf_counter()
            pending.append((index, size_bytes, start, end))
            return f.value()[0]

        return fut.then(done)

    def collect(self, step: int, wait: bool = False) -> list[tuple[int, int, int, float]]:
        """Measurements ready now, as ``(step, bucket, bytes, seconds)``; the buckets launched
        since the last call belong to ``step``. ``wait=True`` (session end) waits for the GPU."""
        launched, self.pending = self.pending, []
        self._in_flight.extend((step, *item) for item in launched)
        ready = []
        while self._in_flight:
            item_step, index, size, start, end = self._in_flight[0]
            if isinstance(start, float):
                seconds = end - start
            else:
                if not end.query():
                    if not wait:
                        break  # the GPU is still on it: read it at a later step
                    end.synchronize()
                seconds = start.elapsed_time(end) / 1e3
            self._in_flight.popleft()
            ready.append((item_step, index, size, seconds))
        return ready


    def finish(self, step: int, wait: bool) -> tuple[list[tuple[int, int, int, float]], int]:
        """Session end: every measurement left, as ``collect`` gives them, and how many were
        dropped. ``wait=True`` waits for the GPU; ``wait=False`` never touches a device
        synchronisation (a signal handler, a failing run): unfinished events are dropped."""
        if wait:
            return self.collect(step, wait=True), 0
        ready = self.collect(step)
        dropped = 0
        while self._in_flight:  # behind an unfinished bucket: read the finished ones, drop the rest
            item_step, index, size, start, end = self._in_flight.popleft()
            try:
                done = isinstance(start, float) or end.query()
            except Exception:
                done = False
            if done:
                seconds = end - start if isinstance(start, float) else start.elapsed_time(end) / 1e3
                ready.append((item_step, index, size, seconds))
            else:
                dropped += 1
        return ready, dropped


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
