"""One optimizer step on the training thread: its clock readings, the step handed to the writer
thread as a ``PendingStep``, and the gradient-sync timings queued right behind it.

Hot path: ``step_end`` reads the clock and keeps a handful of numbers; rounding, the derived
figures and the record itself are made by ``RecordBuilder.step`` on the writer thread.
"""

from __future__ import annotations

import math
import statistics
import threading
import time
from collections import deque
from typing import NamedTuple

from logkit.schema.findings import FindingKind
from logkit.schema.records import BATCH_COMPLETE, RESOURCE_WARNING, TRAINING_STEP
from logkit.schema.values import to_float
from trainer_hooks.guard import guarded
from trainer_hooks.timed_phases import between_steps, within_steps


class PendingStep(NamedTuple):
    """A step as the training thread measured it, for ``RecordBuilder.step``. Metrics are
    floats or None; NaN and Inf are kept (they are reported, then written as null)."""

    wall: float  # wall-clock time of the step's end
    elapsed: float  # seconds since the logger started
    step: int
    epoch: float | None
    step_time: float  # previous step end to this step end
    data_time: float | None  # previous step end to this step's begin
    batch: int | None  # samples in the step, all ranks and micro-batches
    tokens: int | None
    avg_step_time: float  # mean step time so far
    loss: float | None
    learning_rate: float | None
    grad_norm: float | None
    extra_metrics: dict | None = None  # any other number the trainer logged for the step
    layer_norms: dict | None = None  # per-layer gradient norms (ultra)


# A trainer log's own step metrics, by the key the trainer (and the record) names them:
# ``add_metrics`` puts them in their fields, any other number in ``extra_metrics``.
_STEP_METRICS = {TRAINING_STEP[name].raw[-1]: name for name in ("loss", "learning_rate", "grad_norm")}


class StepLogging:
    """The per-step methods of ``SessionLogger`` (mixed into it: the session's clock, writer,
    builder and NaN/Inf checks are its own)."""

    def _init_steps(self) -> None:
        self._last_step_end: float | None = None
        self._step_begin: float | None = None
        self._pending: PendingStep | None = None
        self._pending_comm: list | None = None
        self._comm_timed = False  # the DDP hook is installed: communication records will come
        self._step_time_sum = 0.0
        self._samples = 0
        self._steps_done = 0
        self._last_step = 0
        self._final_loss: float | None = None
        self._micro = 0
        self._micro_end: float | None = None
        self._recent_times: deque = deque(maxlen=64)  # for the stall watch's median step
        self._train_thread: int | None = None
        self.clock_offset = 0.0  # this host's monotonic clock minus rank 0's host's

    @guarded
    @between_steps
    def step_begin(self) -> None:
        self.flush_step()
        self._train_thread = threading.get_ident()
        if self._comm_timed:
            self.comm.step_begin()
        self._step_begin = time.perf_counter()
        self._micro = 0
        self._micro_end = None
        self._step_losses = []  # after flush_step: the report of the step before may need them

    @guarded
    @within_steps
    def micro_batch_end(self) -> None:
        """A micro-batch (forward and backward) of the current step is done (a ``batch_complete``
        record at ``ultra``: its index in the step and its duration)."""
        self._micro += 1
        if self.settings.batch_records:
            now = time.perf_counter()
            since = self._micro_end if self._micro_end is not None else self._step_begin
            self._micro_end = now
            self._emit(self._record(BATCH_COMPLETE, f"Micro-batch {self._micro} of step {self._last_step + 1}",
                                    "DEBUG", self._last_step + 1, micro_batch=self._micro,
                                    duration_s=round(now - since, 6) if since is not None else None))

    @guarded
    @between_steps
    def step_end(self, step: int, *, epoch: float | None = None, loss=None, learning_rate=None, grad_norm=None,
                 tokens: int | None = None, total_batch_size: int | None = None, flush: bool = True) -> None:
        """One optimizer step is done. ``flush=False`` keeps the record open for
        ``add_metrics`` (transformers logs the loss just after its step-end callback).

        Hot path: a handful of floats here; the record itself is built on the writer thread.
        """
        now = time.perf_counter()
        self.flush_step()
        prev = self._last_step_end if self._last_step_end is not None else now
        step_time = now - prev
        data_time = (self._step_begin - prev) if self._step_begin is not None else None
        self._last_step_end, self._step_begin = now, None
        batch = total_batch_size or self._total_batch_size
        self._step_time_sum += step_time
        self._recent_times.append(step_time)
        self._steps_done += 1
        self._last_step = step
        if batch:
            self._samples += batch
        # the buckets launched since the last step end belong to this step; their records are
        # queued right after this step's record (multigpu.log: the step line, then its syncs)
        self._pending_comm = self.comm.collect(step) if self._comm_timed else None
        elapsed = now - self._t0
        self._pending = PendingStep(self._wall0 + elapsed, elapsed, step, epoch, step_time, data_time, batch, tokens,
                                    self._step_time_sum / self._steps_done, to_float(loss), to_float(learning_rate),
                                    to_float(grad_norm))
        if flush:
            self.flush_step()

    @guarded
    @between_steps
    def add_metrics(self, step: int, logs: dict) -> None:
        """Merge a trainer log (loss, learning_rate, grad_norm, ...) into step ``step``'s record."""
        pending = self._pending
        if pending is None or pending.step != step:
            return
        own, extra = {}, dict(pending.extra_metrics or {})
        for key, value in logs.items():
            number = to_float(value)
            if number is None:
                continue
            name = _STEP_METRICS.get(key)
            if name is not None:
                own[name] = number
            else:
                extra[key] = number
        self._pending = pending._replace(extra_metrics=extra or None, **own)
        self.flush_step()

    def flush_step(self) -> None:
        """Hand the pending step to the writer thread (after its NaN/Inf report, if it needs one)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        step, loss = pending.step, pending.loss
        for value, kind in ((loss, FindingKind.NAN_LOSS), (pending.grad_norm, FindingKind.NAN_GRAD)):
            if value is not None and not math.isfinite(value):
                self.report_nonfinite(step, kind, model=self._model, loss=loss, losses=self._step_losses)
        if loss is not None and math.isfinite(loss):
            self._final_loss = loss
        if self._layer_norms is not None and self._layer_norms[0] == step:
            pending = pending._replace(layer_norms=self._layer_norms[1])
            self._layer_norms = None
        if self._writer is not None and self._builder is not None:
            self._writer.put_call(self._builder.step, pending)
        comm, self._pending_comm = self._pending_comm, None
        if comm:
            self._put_comm(*comm)

    def _put_comm(self, items: list, phases: list) -> None:
        if (items or phases) and self._writer is not None and self._builder is not None:
            elapsed = time.perf_counter() - self._t0
            timer = self.comm
            if items:
                self._writer.put_call(getattr(self._builder, timer.records_by), self._wall0 + elapsed, elapsed, items,
                                      timer.timing_source, timer.group_size)
            if phases:
                self._writer.put_call(self._builder.phases, self._wall0 + elapsed, elapsed, phases,
                                      timer.timing_source, self.clock_offset, timer.phases_op)

    def where(self) -> tuple[int, str, str | None]:
        """(the step the rank is in, its phase, the phase's detail): ``data`` between steps
        (``setup`` before the first), ``forward_backward`` until a gradient bucket is ready,
        then ``gradient_sync`` and, when every bucket of the step is synchronised, ``optimizer``; inside a
        ``phase()`` block (``eval``, ``save``, ...), that phase."""
        step = self._last_step + 1
        opened = self.open_phase()
        if opened is not None:
            return step, *opened
        if self._step_begin is None:
            return step, "data" if self._steps_done else "setup", None
        phase, detail = self.comm.where() if self._comm_timed else (None, None)
        return step, phase or "forward_backward", detail

    def median_step_time(self) -> float | None:
        times = list(self._recent_times)
        return statistics.median(times) if times else None

    def job_clock(self) -> float:
        """Now on the job clock (the host's monotonic clock minus its offset to rank 0's host)."""
        return time.perf_counter() - self.clock_offset

    def _end_comm(self, wait_device: bool) -> int:
        """The sync timings still unread: all of them (waiting for the GPU) or the ready ones;
        returns how many were dropped unread, said in a record."""
        if not self._comm_timed:
            return 0
        items, phases, dropped = self.comm.finish(self._last_step, wait=wait_device)
        self._put_comm(items, phases)
        if dropped:
            self._emit(self._record(RESOURCE_WARNING, f"{dropped} gradient-sync timings were still on the GPU at the "
                                    "end and were dropped unread (the session did not complete)", "INFO",
                                    self._last_step or None, subkind=FindingKind.COMM_TIMINGS_DROPPED, value=dropped))
        return dropped
