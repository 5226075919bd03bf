"""Timing of DDP gradient synchronisation, one measurement per bucket.

A DDP communication hook does what DDP's default all-reduce does (divide by the world
size, all-reduce, hand the tensor back) and notes, per bucket, the exact bytes and the
time from launch to completion. Gradient-accumulation micro-steps under ``no_sync`` never
call the hook, so only real synchronisations are counted. The training thread only
appends a tuple; records are built later, at step end.
"""

from __future__ import annotations

import gc
import threading
import time
from collections import deque

_local = threading.local()  # .depth: timed collectives this thread is inside


class outer_call:
    """Marks a collective timed here (the DDP comm hook, an FSDP2 comm object): the torch.distributed
    functions it calls are not timed again by the ``torch_distributed`` source (``dist_timing``)."""

    __slots__ = ()

    def __enter__(self):
        _local.depth = getattr(_local, "depth", 0) + 1

    def __exit__(self, *exc):
        _local.depth -= 1


class CommTimer:
    """Per-bucket timings of gradient synchronisation, and per step when its gradients were ready.

    On CUDA a pair of CUDA events brackets each bucket's all-reduce (start: the bucket is
    ready on the compute stream; end: recorded on a stream synchronised with the NCCL
    kernel), read back later with ``query()`` so the training stream never stalls; an event
    recorded at the step's start anchors the buckets' ready times (device time). On CPU
    (gloo) it is wall time from launch to completion, on the host's monotonic clock.

    The training thread's own state (``launched``, ``done``, ``last_bucket``, ``expected``)
    says where the step is: what a stall or an exception reports.
    """

    # the RecordBuilder method that makes its records, and the op its per-step phases are totalled under
    records_by = "comm"
    phases_op = "gradient_sync"

    def __init__(self) -> None:
        self.pending: list[tuple] = []  # launched since the last collect: (bucket, bytes, start, end, seq)
        self._in_flight: deque = deque()  # (step, bucket, bytes, start, end, seq) awaiting the GPU
        self._steps: dict[int, _StepSync] = {}  # steps whose buckets are not all read yet
        self.group_size = 1
        self.timing_source = "wall"
        self.anchor = None  # the current step's start: a perf_counter reading, or a CUDA event
        self.begin: float | None = None  # the current step's start on the host's monotonic clock
        self.launched = self.done = 0  # buckets of the current step launched, completed
        self.expected: int | None = None  # buckets per step (the last step's count)
        self.last_bucket: int | None = None

    def step_begin(self) -> None:
        """A step starts (training thread): its buckets' ready times are measured from here."""
        if self.launched:
            self.expected = self.launched
        self.launched = self.done = 0
        self.last_bucket = None
        self.begin = time.perf_counter()
        if self.timing_source == "cuda_event":
            import torch

            self.anchor = torch.cuda.Event(enable_timing=True)
            self.anchor.record()
        else:
            self.anchor = self.begin

    def hook(self, process_group, bucket):
        # Same arithmetic as torch's default allreduce_hook.
        import torch
        import torch.distributed as dist

        group = process_group if process_group is not None else dist.group.WORLD
        tensor = bucket.buffer()
        size_bytes = tensor.numel() * tensor.element_size()
        index = bucket.index()
        pending = self.pending
        seq = self.launched
        self.launched, self.last_bucket = seq + 1, index
        if tensor.is_cuda:
            self.timing_source = "cuda_event"
            start = torch.cuda.Event(enable_timing=True)
            start.record()
        else:
            start = time.perf_counter()
        tensor.div_(dist.get_world_size(group))
        with outer_call():
            fut = dist.all_reduce(tensor, group=group, async_op=True).get_future()

        def done(f):
            value = f.value()[0]  # raises when the all-reduce failed: then it is not done
            if tensor.is_cuda:
                end = torch.cuda.Event(enable_timing=True)
                end.record()  # on a stream that waits for the all-reduce kernel
            else:
                end = time.perf_counter()
            pending.append((index, size_bytes, start, end, seq))
            self.done += 1
            return value

        return fut.then(done)

    def collect(self, step: int, wait: bool = False) -> tuple[list[tuple], list[tuple]]:
        """Measurements ready now: ``(step, bucket, bytes, seconds)`` per bucket, and per step
        whose buckets are all read ``(step, begin, compute_s, first_ready_s, sync_s, buckets,
        in_flight_s)`` (``begin``: the step's start on the host's monotonic clock;
        ``in_flight_s``: the time at least one of its buckets was in flight). The
        buckets launched since the last call belong to ``step``. ``wait=True`` (session end)
        waits for the GPU. ``take`` then ``absorb``, in one call."""
        return self.absorb(*self.take(step), wait=wait)

    def take(self, step: int) -> tuple:
        """The training thread's half of ``collect``, at a step's end: the operations launched since the
        last call (they belong to ``step``) with the step's anchor, for ``absorb``. The emitter reads
        them on its writer thread: reading each operation and the step's phases is not training's work."""
        launched, self.pending = self.pending, []
        return step, launched, self.anchor, self.begin

    def absorb(self, step: int, launched: list, anchor, begin: float | None,
               wait: bool = False) -> tuple[list[tuple], list[tuple]]:
        """The reading half of ``collect`` (one thread at a time: the writer thread while the session runs)."""
        if launched:
            self._steps[step] = self._step_sync(len(launched), anchor, begin)
            self._in_flight.extend((step, *item) for item in launched)
        ready, phases = [], []
        while self._in_flight:
            item = self._in_flight[0]
            end = item[4]
            if not isinstance(end, float) and not end.query():
                if not wait:
                    break  # the GPU is still on it: read it at a later step
                end.synchronize()
            self._in_flight.popleft()
            self._read(item, ready, phases)
        return ready, phases

    def _step_sync(self, count: int, anchor=None, begin: float | None = None) -> _StepSync:
        """The tracker of one step's ``count`` operations, anchored at the step's start."""
        return _StepSync(anchor, begin, count)

    def _read(self, item: tuple, ready: list, phases: list) -> None:
        step, index, size, start, end, seq = item
        ready.append((step, index, size, _seconds(start, end)))
        sync = self._steps.get(step)
        if sync is not None and sync.add(seq, start, end):
            del self._steps[step]
            phases.append((step, sync.begin, *sync.figures(), sync.count, sync.in_flight()))

    def finish(self, step: int, wait: bool) -> tuple[list[tuple], list[tuple], int]:
        """Session end: every measurement left, as ``collect`` gives them, and how many were
        dropped. ``wait=True`` waits for the GPU; ``wait=False`` never touches a device
        synchronisation (a signal handler, a failing run): unfinished events are dropped."""
        if wait:
            return (*self.collect(step, wait=True), 0)
        ready, phases = self.collect(step)
        dropped = 0
        while self._in_flight:  # behind an unfinished bucket: read the finished ones, drop the rest
            item = self._in_flight.popleft()
            try:
                done = isinstance(item[4], float) or item[4].query()
            except Exception:
                done = False
            if done:
                self._read(item, ready, phases)
            else:
                dropped += 1
        return ready, phases, dropped

    def where(self) -> tuple[str | None, str | None]:
        """The step's phase as the buckets say (None before any is launched) and its detail."""
        if not self.launched:
            return None, None
        detail = (f"bucket {self.last_bucket} launched last: {self.launched} of {self.expected or '?'} launched, "
                  f"{self.done} done")
        if self.expected is not None and self.done >= self.expected:
            return "optimizer", detail
        return "gradient_sync", detail


def _seconds(start, end) -> float:
    return end - start if isinstance(start, float) else start.elapsed_time(end) / 1e3


class _StepSync:
    """One step's buckets as they are read: the first launched's ready time, the last launched's
    ready time and its all-reduce, measured from the step's anchor, and every bucket's span."""

    __slots__ = ("anchor", "begin", "count", "read", "first", "last", "spans")

    def __init__(self, anchor, begin: float | None, count: int) -> None:
        self.anchor, self.begin, self.count, self.read = anchor, begin, count, 0
        self.first = self.last = None  # (seq, start, end)
        self.spans: list[tuple] = []  # (start, end) of every bucket read

    def add(self, seq: int, start, end) -> bool:
        """One bucket read; True when it was the step's last."""
        self.read += 1
        self.spans.append((start, end))
        if self.first is None or seq < self.first[0]:
            self.first = (seq, start, end)
        if self.last is None or seq > self.last[0]:
            self.last = (seq, start, end)
        return self.read >= self.count

    def figures(self) -> tuple[float | None, float | None, float]:
        """(compute_s, first_ready_s, sync_s): the last bucket's ready time from the step's start,
        the first's, and the last's all-reduce."""
        sync = _seconds(self.last[1], self.last[2])
        anchor = self.anchor
        if anchor is None or isinstance(anchor, float) != isinstance(self.last[1], float):
            return None, None, sync
        return _seconds(anchor, self.last[1]), _seconds(anchor, self.first[1]), sync

    def in_flight(self) -> float:
        """The wall time (device time on GPUs) during which at least one of the step's buckets was
        in flight: the length of the union of their launch-to-completion spans. Buckets overlap
        (each waits behind the ones launched before it), so the sum of their durations can exceed
        the step; this cannot."""
        ref = self.anchor
        if ref is None or isinstance(ref, float) != isinstance(self.first[1], float):
            ref = self.first[1]  # the first launched bucket's start: no bucket starts before it
        return union_length([(_seconds(ref, start), _seconds(ref, end)) for start, end in self.spans])


def union_length(spans: list[tuple[float, float]]) -> float:
    """The total length covered by the intervals ``spans`` ((start, end) pairs), overlaps counted once."""
    total, lo, hi = 0.0, None, None
    for start, end in sorted(spans):
        if hi is None or start > hi:
            total += (hi - lo) if hi is not None else 0.0
            lo, hi = start, end
        else:
            hi = max(hi, end)
    return total + ((hi - lo) if hi is not None else 0.0)


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
