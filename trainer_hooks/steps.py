"""One optimizer step on the training thread: its clock readings, the step handed to the writer
thread as a ``PendingStep``, and the gradient-sync timings queued right behind it.

Hot path: ``step_end`` reads the clock and keeps a handful of numbers; rounding, the derived
figures and the record itself are made by ``RecordBuilder.step`` on the writer thread.
"""

from __future__ import annotations

import statistics
import threading
import time
from collections import deque
from typing import NamedTuple

from logkit.schema.findings import FindingKind
from logkit.schema.records import BATCH_COMPLETE, RESOURCE_WARNING, TRAINING_STEP
from logkit.schema.values import to_float
from trainer_hooks.guard import guarded
from trainer_hooks.timed_phases import within_steps


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
    layer_norms: dict | tuple | None = None  # per-layer gradient norms (ultra): by name, or (names, norms)
    logs: dict | None = None  # a trainer log for the step: its numbers other than the above go to extra_metrics


# The training thread keeps a step as a list of PendingStep's fields (filled in place, no copies);
# the writer thread makes the PendingStep
_STEP, _LOSS, _GRAD_NORM, _LAYER_NORMS, _LOGS = (PendingStep._fields.index(n)
                                                for n in ("step", "loss", "grad_norm", "layer_norms", "logs"))


# A trainer log's own step metrics, by the key the trainer (and the record) names them:
# ``add_metrics`` puts them in their fields, any other number in ``extra_metrics``.
STEP_METRICS = {TRAINING_STEP[name].raw[-1]: name for name in ("loss", "learning_rate", "grad_norm")}
# (the pending list's slot, the trainer log's key) of those metrics
_OWN_SLOTS = tuple((PendingStep._fields.index(name), key) for key, name in STEP_METRICS.items())
# A trainer log's keys that are no step metric (bookkeeping, and an evaluation's or a run summary's own):
# the callback hands a log over only when it holds another key; the builder leaves them out of extra_metrics.
NOT_STEP_METRICS = frozenset(("epoch", "total_flos", "step"))
NOT_STEP_PREFIXES = ("eval_", "train_", "test_")


def step_metric_key(key: str) -> bool:
    """Whether a trainer log's ``key`` is a step metric (the loss, the learning rate, any other number)."""
    return key not in NOT_STEP_METRICS and not key.startswith(NOT_STEP_PREFIXES)


def _number(value) -> float | None:
    """``to_float`` with the common case (already a float) taken without a call."""
    return value if type(value) is float else to_float(value)


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

    def step_begin(self) -> None:
        # Hot path, written flat: one frame, the guard and the ``between_steps`` sum inline (each
        # wrapper frame and object touched costs microseconds on the caches training left cold)
        began = time.perf_counter()
        try:
            if self._pending is not None:
                self.flush_step()
            self._train_thread = threading.get_ident()
            if self._comm_timed:
                self.comm.step_begin()
            self._micro = 0
            self._micro_end = None
            self._step_losses = []  # after flush_step: the report of the step before may need them
            self._step_begin = now = time.perf_counter()
        except Exception as exc:
            self._fault("SessionLogger.step_begin failed", exc)
            now = time.perf_counter()
        self._log_between += now - began

    def micro_batch_end(self) -> None:
        """A micro-batch (forward and backward) of the current step is done (a ``batch_complete``
        record at ``ultra``: its index in the step and its duration)."""
        self._micro += 1
        if self.settings.batch_records:
            self._batch_record()

    @guarded
    @within_steps
    def _batch_record(self) -> None:
        now = time.perf_counter()
        since = self._micro_end if self._micro_end is not None else self._step_begin
        self._micro_end = now
        if self._writer is not None:  # the record is made on the writer thread
            self._writer.put_call(self._batch_complete, self._micro, self._last_step + 1, since, now)

    def _batch_complete(self, micro: int, step: int, since: float | None, now: float) -> list[dict]:
        return [self._record(BATCH_COMPLETE, f"Micro-batch {micro} of step {step}", "DEBUG", step, at=now,
                             micro_batch=micro, duration_s=round(now - since, 6) if since is not None else None)]

    def step_end(self, step: int, *, epoch: float | None = None, loss=None, learning_rate=None, grad_norm=None,
                 tokens: int | None = None, total_batch_size: int | None = None, flush: bool = True) -> None:
        """One optimizer step is done. ``flush=False`` keeps the record open for
        ``add_metrics`` (transformers logs the loss just after its step-end callback).

        Hot path: a handful of floats into a list here; the record itself is built on the writer
        thread (``RecordBuilder.step``). Guarded and summed inline, as ``step_begin``.
        """
        now = time.perf_counter()
        try:
            if self._pending is not None:
                self.flush_step()
            prev = self._last_step_end
            if prev is None:
                prev = now
            step_time = now - prev
            begin = self._step_begin
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
            # (read on the writer thread: here only the list of launches is taken, with the step's anchor)
            self._pending_comm = (self.comm, self.comm.take(step)) if self._comm_timed else None
            elapsed = now - self._t0
            # PendingStep's fields in order, as a list: add_metrics fills it in place
            self._pending = [self._wall0 + elapsed, elapsed, step, epoch, step_time,
                             begin - prev if begin is not None else None, batch, tokens,
                             self._step_time_sum / self._steps_done, _number(loss), _number(learning_rate),
                             _number(grad_norm), None, None, None]
            if flush:
                self.flush_step()
        except Exception as exc:
            self._fault("SessionLogger.step_end failed", exc)
        self._log_between += time.perf_counter() - now

    def add_metrics(self, step: int, logs: dict) -> None:
        """Merge a trainer log (loss, learning_rate, grad_norm, ...) into step ``step``'s record. The loss,
        learning rate and grad norm are read here (a NaN/Inf report needs them now); the log's other
        numbers are sorted out on the writer thread (a copy of ``logs`` is handed over)."""
        began = time.perf_counter()
        try:
            pending = self._pending
            if pending is not None and pending[_STEP] == step:
                get = logs.get
                for index, key in _OWN_SLOTS:
                    value = get(key)
                    if value is not None:
                        number = _number(value)
                        if number is not None:
                            pending[index] = number
                pending[_LOGS] = dict(logs)
                self.flush_step()
        except Exception as exc:
            self._fault("SessionLogger.add_metrics failed", exc)
        self._log_between += time.perf_counter() - began

    def flush_step(self) -> None:
        """Hand the pending step to the writer thread (after its NaN/Inf report, if it needs one)."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        step, loss, grad_norm = pending[_STEP], pending[_LOSS], pending[_GRAD_NORM]
        if loss is not None:
            if loss - loss == 0.0:  # finite (inf - inf and nan - nan are nan)
                self._final_loss = loss
            else:
                self.report_nonfinite(step, FindingKind.NAN_LOSS, model=self._model, loss=loss,
                                      losses=self._step_losses)
        if grad_norm is not None and grad_norm - grad_norm != 0.0:
            self.report_nonfinite(step, FindingKind.NAN_GRAD, model=self._model, loss=loss, losses=self._step_losses)
        layer_norms = self._layer_norms
        if layer_norms is not None and layer_norms[0] == step:
            pending[_LAYER_NORMS] = layer_norms[1]
            self._layer_norms = None
        writer, builder = self._writer, self._builder
        if writer is not None and builder is not None:
            writer.put_call(builder.pending_step, pending)
        comm, self._pending_comm = self._pending_comm, None
        if comm is not None and writer is not None and builder is not None:
            timer, taken = comm
            if taken[1] or timer._in_flight:  # launches of this step, or earlier ones still on the GPU
                writer.put_call(self._comm_records, timer, taken)

    def _comm_records(self, timer, taken: tuple) -> list[dict]:
        """Writer thread: the step's collectives read (``CommTimer.absorb``) and their records, timed when
        read (an operation the GPU finishes late is read, and timed, with a later step's)."""
        items, phases = timer.absorb(*taken)
        elapsed = time.perf_counter() - self._t0
        return self._comm_built(timer, items, phases, self._wall0 + elapsed, elapsed)

    def _comm_built(self, timer, items: list, phases: list, wall: float, elapsed: float) -> list[dict]:
        out = []
        if items:
            out += getattr(self._builder, timer.records_by)(wall, elapsed, items, timer.timing_source,
                                                            timer.group_size)
        if phases:
            out += self._builder.phases(wall, elapsed, phases, timer.timing_source, self.clock_offset,
                                        timer.phases_op)
        return out

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

    def _end_comm(self, wait_device: bool, timeout: float) -> int | None:
        """The sync timings still unread: all of them (waiting for the GPU) or the ready ones, read on the
        writer thread after the steps' (the timer's reading is that thread's while the session runs);
        returns how many were dropped unread (said in a record), None where the writer did not answer
        within ``timeout`` seconds (it still writes them before it closes)."""
        if not self._comm_timed:
            return 0
        writer, timer = self._writer, self.comm
        if writer is None or self._builder is None:
            return timer.finish(self._last_step, wait=wait_device)[2]
        done, box = threading.Event(), []
        writer.put_call(self._comm_finish, timer, self._last_step, wait_device, done, box)
        writer.wake()
        done.wait(timeout)
        return box[0] if box else None

    def _comm_finish(self, timer, step: int, wait: bool, done: threading.Event, box: list) -> list[dict]:
        """Writer thread, at session end: every timing left (``CommTimer.finish``) and its records."""
        try:
            items, phases, dropped = timer.finish(step, wait=wait)
            box.append(dropped)
            elapsed = time.perf_counter() - self._t0
            out = self._comm_built(timer, items, phases, self._wall0 + elapsed, elapsed)
            if dropped:
                out.append(self._record(RESOURCE_WARNING, f"{dropped} gradient-sync timings were still on the GPU at "
                                        "the end and were dropped unread (the session did not complete)", "INFO",
                                        step or None, subkind=FindingKind.COMM_TIMINGS_DROPPED, value=dropped))
            return out
        finally:
            done.set()
