"""Timing of FSDP2 (``fully_shard``) collectives: each all-gather and reduce-scatter, at the call that
issues it.

FSDP2 issues every collective of a parameter group through two objects the group holds,
``FSDPParamGroup._all_gather_comm`` (``foreach_all_gather``: the forward unshard, and the backward one
when the group resharded after forward) and ``_reduce_scatter_comm`` (``foreach_reduce``: the gradients
after backward); both are called with the output and input tensors, the group and, for the
all-gather, ``async_op`` (torch ``distributed/fsdp/_fully_shard/_fsdp_collectives.py``). ``install``
puts a timing wrapper around each group's two objects; it delegates everything to the object it
wraps (a custom one set with ``set_custom_all_gather`` too), so the collective is the same call.

Per call the wrapper notes the exact bytes (nccl-tests' convention: the all-gather's output, the
reduce-scatter's input, each ``world x`` the padded shard), the phase (``backward`` while autograd
runs a graph task, else ``forward``) and the time from launch to completion: on CPU (gloo) wall time
around the call (a blocking call) or to its future's completion (``async_op``); on CUDA a pair of
events on the stream FSDP issues the collective on (start before the call; end after a blocking call,
or from the work's future callback, which runs on a stream synchronised with the kernel), read later
with ``query()`` so the training stream never waits. The training thread appends a tuple; the step's
record (its collectives listed, one object each) is built on the writer thread at step end.

The step's phases for the breakdown: ``sync_s`` = the time the rank spent in the step's collectives
(where an early rank waits for the last), ``compute_s`` = step start to the last reduce-scatter's
launch less the collectives' time before it (``_ReduceScatterSync``).
"""

from __future__ import annotations

import time

from trainer_hooks.commhook import CommTimer, _seconds, _StepSync, outer_call, union_length
from trainer_hooks.strategy import fsdp2_modules, param_groups

ALL_GATHER, REDUCE_SCATTER = "all_gather", "reduce_scatter"


class FsdpCommTimer(CommTimer):
    """Per-collective timings of an FSDP2 model, and per step its reduce-scatters' phases.

    ``pending`` items: (unit, bytes, start, end, seq, op, phase); ``collect`` gives
    ``(step, unit, op, phase, bytes, seconds)`` per collective (``RecordBuilder.collectives``).
    """

    records_by = "collectives"
    phases_op = REDUCE_SCATTER

    def __init__(self) -> None:
        super().__init__()
        self.last_op: str | None = None
        self.last_phase: str | None = None
        self.calling: tuple | None = None  # (op, unit) of the collective call the training thread is in

    def step_begin(self) -> None:
        super().step_begin()
        self.calling = None

    def start(self, tensor):
        """The start mark of a collective on ``tensor``, taken just before the call issues it."""
        if tensor.is_cuda:
            import torch

            self.timing_source = "cuda_event"
            mark = torch.cuda.Event(enable_timing=True)
            mark.record()  # on the stream FSDP issues the collective on
            return mark
        return _clock()

    def issued(self, op: str, unit: int, size: int, start, work) -> None:
        """The collective ``op`` of ``unit`` was issued (``work``: its Work where async, else None):
        its end is marked now (a blocking call) or when its future completes. Hot path: a tuple."""
        phase = "backward" if _graph_task_id() != -1 else "forward"
        seq = self.launched
        self.launched, self.last_bucket, self.last_op, self.last_phase = seq + 1, unit, op, phase
        pending = self.pending
        if work is None:
            pending.append((unit, size, start, _clock() if start.__class__ is float else _cuda_mark(), seq, op, phase))
            self.done += 1
            return
        cuda = start.__class__ is not float

        def done(fut):
            try:
                fut.wait()
            except Exception:
                return  # the collective failed: it is not done (the training thread sees the error)
            pending.append((unit, size, start, _cuda_mark() if cuda else _clock(), seq, op, phase))
            self.done += 1

        work.get_future().add_done_callback(done)

    # the item shape ``absorb``'s one pass reads (a subclass with items of its own reads them one by one)
    one_pass = True

    def absorb(self, step: int, launched: list, anchor, begin: float | None,
               wait: bool = False) -> tuple[list[tuple], list[tuple]]:
        """``CommTimer.absorb``; on CPU (wall clock: every collective taken is complete) the step's
        collectives are read together, not one by one through the tracker (``_ReduceScatterSync``, which
        GPUs need: their events complete late and out of order); both take the phases from ``step_figures``."""
        if not self.one_pass or self._in_flight or not launched or launched[0][2].__class__ is not float:
            return super().absorb(step, launched, anchor, begin, wait)
        ready = [(step, unit, op, phase, size, end - start) for unit, size, start, end, _, op, phase in launched]
        gradients = [(seq, start, end) for _, _, start, end, seq, op, _ in launched if op == REDUCE_SCATTER]
        if not gradients:  # a step without reduce-scatters (no_sync) has no phases
            return ready, []
        first, last = min(gradients), max(gradients)
        spans = [(start, end) for _, _, start, end, *_ in launched]
        ref = anchor if anchor.__class__ is float else None
        compute, first_ready, sync = step_figures(spans, first[1], last[1], ref)
        in_flight = union_length([(start, end) for _, start, end in gradients])
        return ready, [(step, begin, compute, first_ready, sync, len(gradients), in_flight)]

    def _step_sync(self, count: int, anchor=None, begin: float | None = None) -> _ReduceScatterSync:
        return _ReduceScatterSync(anchor, begin, count)

    def _is_gradient(self, op: str, phase: str) -> bool:
        """Whether the collective reduces the step's gradients (its phases are measured from them)."""
        return op == REDUCE_SCATTER

    def _read(self, item: tuple, ready: list, phases: list) -> None:
        step, unit, size, start, end, seq, op, phase = item
        ready.append((step, unit, op, phase, size, end - start if start.__class__ is float else _seconds(start, end)))
        sync = self._steps.get(step)
        if sync is not None and sync.add_op(seq, start, end, self._is_gradient(op, phase)):
            del self._steps[step]
            if sync.first is not None:  # a step without reduce-scatters (no_sync) has no phases
                phases.append((step, sync.begin, *sync.figures(), sync.reduce_scatters, sync.in_flight()))

    def where(self) -> tuple[str | None, str | None]:
        """``collective`` while the last launched collective is not done (the rank waits in it: a hang's
        waiting rank), its detail starting with the op and phase (``hang.collective_of`` reads it)."""
        calling = self.calling
        if calling is not None:  # in a blocking call
            phase = "backward" if _graph_task_id() != -1 else "forward"
            return "collective", (f"{calling[0]} ({phase}) of FSDP unit {calling[1]} in flight: {self.launched} "
                                  f"collectives of the step done before it")
        if not self.launched:
            return None, None
        counts = f"{self.launched} of {self.expected or '?'} collectives launched, {self.done} done"
        if self.done < self.launched:
            return "collective", f"{self.last_op} ({self.last_phase}) of FSDP unit {self.last_bucket} in flight: {counts}"
        detail = f"{self.last_op} ({self.last_phase}) of FSDP unit {self.last_bucket} launched last: {counts}"
        if self.expected is not None and self.done >= self.expected:
            return "optimizer", detail
        return ("gradient_sync" if self.last_op == REDUCE_SCATTER else "forward_backward"), detail


_clock = time.perf_counter


def _graph_task_id() -> int:
    """Autograd's current graph task (-1 outside backward): torch's, bound at the first call."""
    global _graph_task_id
    import torch

    _graph_task_id = torch._C._current_graph_task_id
    return _graph_task_id()


def _cuda_mark():
    import torch

    mark = torch.cuda.Event(enable_timing=True)
    mark.record()  # after a blocking call the current stream waits for the kernel; in a future's callback,
    return mark  # the callback's stream is synchronised with the collective


class _ReduceScatterSync(_StepSync):
    """One step's collectives as they are read (all of them, to know when the step is complete): every
    collective's span, the reduce-scatters' apart (their time in flight, the summary's under their op),
    and the first and last launched reduce-scatter (the gradients' ready times).

    The step's phases (``figures``), for the breakdown and the straggler by arrival: in FSDP a rank that
    arrives early at any collective (a forward or backward all-gather, a reduce-scatter) waits there
    for the last one, so ``sync_s`` is the time the rank spent in collectives during the step (the
    union of their spans: its exposed communication plus its waits; the rank that arrived last at each
    waited least), and ``compute_s`` is the step start to the last reduce-scatter's launch less the
    collectives' time before it (its own forward and backward)."""

    __slots__ = ("reduce_scatters", "all_spans")

    def __init__(self, anchor, begin, count: int) -> None:
        super().__init__(anchor, begin, count)
        self.reduce_scatters = 0
        self.all_spans: list[tuple] = []

    def add_op(self, seq: int, start, end, is_reduce_scatter: bool) -> bool:
        self.read += 1
        self.all_spans.append((start, end))
        if is_reduce_scatter:
            self.spans.append((start, end))
            self.reduce_scatters += 1
            if self.first is None or seq < self.first[0]:
                self.first = (seq, start, end)
            if self.last is None or seq > self.last[0]:
                self.last = (seq, start, end)
        return self.read >= self.count

    def figures(self) -> tuple[float | None, float | None, float]:
        """(compute_s, first_ready_s, sync_s) as the class doc defines them (``step_figures``)."""
        ref = self.anchor
        if ref is None or isinstance(ref, float) != isinstance(self.last[1], float):
            ref = None  # no anchor of the spans' kind (a GPU's first step): the sync alone
        base = ref if ref is not None else self.all_spans[0][0]  # a union's length does not depend on it
        spans = [(_seconds(base, a), _seconds(base, b)) for a, b in self.all_spans]
        return step_figures(spans, _seconds(base, self.first[1]), _seconds(base, self.last[1]),
                            0.0 if ref is not None else None)


def step_figures(spans: list[tuple[float, float]], first_launch: float, last_launch: float,
                 anchor: float | None) -> tuple[float | None, float | None, float]:
    """A sharded step's (compute_s, first_ready_s, sync_s) from its collectives' spans and its first and last
    reduce-scatter's launch, all on one clock, the step starting at ``anchor`` (None: the sync alone):
    sync_s the time in collectives (the union of the spans), compute_s the anchor to the last reduce-scatter's
    launch less the collectives' time before it, first_ready_s the anchor to the first one's launch."""
    sync = union_length(spans)
    if anchor is None:
        return None, None, sync
    before = union_length([(a, b if b < last_launch else last_launch) for a, b in spans if a < last_launch])
    return last_launch - anchor - before, first_launch - anchor, sync


class _Timed:
    """A FSDP comm object (``AllGather`` / ``ReduceScatter``) whose calls are timed; anything else is
    the wrapped object's."""

    def __init__(self, inner, timer: FsdpCommTimer, op: str, unit: int) -> None:
        self.inner, self.timer, self.op, self.unit = inner, timer, op, unit

    def allocate(self, *args, **kwargs):
        return self.inner.allocate(*args, **kwargs)

    def __call__(self, output_tensor, input_tensor, *args, **kwargs):
        timer = self.timer
        # the bytes nccl-tests counts: the all-gather's whole output, the reduce-scatter's whole input
        counted = output_tensor if self.op == ALL_GATHER else input_tensor
        size = counted.numel() * counted.element_size()
        start = timer.start(counted)
        # a blocking call returns when done: where() sees the wait, and the call an error left
        timer.calling = (self.op, self.unit)
        with outer_call():
            work = self.inner(output_tensor, input_tensor, *args, **kwargs)
        timer.calling = None
        timer.issued(self.op, self.unit, size, start, None if work is None or not hasattr(work, "get_future") else work)
        return work

    def __getattr__(self, name):
        return getattr(self.inner, name)


def install(model, timer: FsdpCommTimer) -> str | None:
    """Wrap the comm objects of every ``fully_shard`` parameter group of ``model``; None, or why not."""
    groups = [g for m in fsdp2_modules(model) for g in param_groups(m)]
    if not groups:
        return "No fully_shard parameter group found: FSDP collectives are not timed"
    for unit, group in enumerate(groups):
        for attr, op in (("_all_gather_comm", ALL_GATHER), ("_reduce_scatter_comm", REDUCE_SCATTER)):
            comm = getattr(group, attr, None)
            if comm is None:
                return f"FSDP collectives not timed: this torch's FSDPParamGroup has no {attr}"
            if not isinstance(comm, _Timed):
                setattr(group, attr, _Timed(comm, timer, op, unit))
    size = getattr(getattr(groups[0], "mesh_info", None), "shard_mesh_size", None)
    if isinstance(size, int):
        timer.group_size = size
    return None
