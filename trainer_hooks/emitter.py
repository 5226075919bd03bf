"""The session logger shared by the transformers callback and the accelerate-loop helper.

It builds records (plain dicts with the keys of ``logkit.schema``) on the training thread
and hands them to the writer thread; analysis is left to ``logkit``, and what it decides
here (findings) are threshold checks on numbers it already holds. Every public method is
guarded: a fault of the logger goes to the errors log, never into training.
"""

from __future__ import annotations

import functools
import math
import sys
import time
import traceback
from pathlib import Path

import orjson

from logkit.schema import EventType, Mode, SessionFiles, Status
from trainer_hooks import sysinfo
from trainer_hooks.builder import RecordBuilder
from trainer_hooks.commhook import CommTimer, find_ddp, install_comm_hook
from trainer_hooks.distributed import RankInfo, agree_session_id, rank_info
from trainer_hooks.findings import GradNormWatch, resource_findings
from trainer_hooks.settings import VERBOSITY_LEVELS, LogSettings, resolve_settings
from trainer_hooks.textlog import TextRenderer
from trainer_hooks.writer import RecordWriter

__all__ = ["SessionLogger", "VERBOSITY_LEVELS", "guarded"]

# NaN/Inf reports with tensor dumps: the first few only, so a diverged run does not fill the disk.
MAX_NAN_REPORTS = 3


def guarded(method):
    """Run a logger method; a failure is reported to the errors log and swallowed.

    Works on ``SessionLogger`` methods and on objects holding one as ``self.logger``.
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            owner = self if isinstance(self, SessionLogger) else self.logger
            owner._fault(f"{type(self).__name__}.{method.__name__} failed", exc)
            return None

    return wrapper


def _number(value):
    """A float, or None for what is not a number (NaN and Inf stay: they are findings)."""
    if value is None or isinstance(value, bool):
        return None
    try:
        return float(value)
    except (TypeError, ValueError):
        return None


def _json_number(value):
    """JSON has no NaN/Inf: they are written as null, and reported by their own records."""
    return value if value is None or math.isfinite(value) else None


class SessionLogger:
    """One rank's view of a logged training session.

    Typical use (what the callback and ``TrainingLogger`` do)::

        log = SessionLogger(log_dir="logs", verbosity="high")
        log.start(model=model, total_batch_size=32, max_steps=1000)   # every rank
        log.attach_model(ddp_model)                                    # times gradient sync
        for step in ...:
            log.step_begin()
            ...backward...
            log.check_gradients(model)                                 # before optimizer.step()
            log.step_end(step, loss=..., learning_rate=..., grad_norm=...)
        log.end()                                                      # every rank

    Settings (see ``trainer_hooks.settings.LogSettings``) come from ``verbosity``, then the
    environment (``TRAINING_LOG_LEVEL``, ``MULTIGPU_LOG_LEVEL``), then keyword arguments.
    """

    def __init__(self, log_dir: str | Path = "logs", verbosity: str = "high", session_id: str | None = None,
                 mirror_jsonl: str | Path | None = None, **settings) -> None:
        self.settings: LogSettings = resolve_settings(verbosity, **settings)
        self.log_dir = Path(log_dir)
        self.verbosity = verbosity
        self.requested_session_id = session_id
        self.mirror_jsonl = Path(mirror_jsonl) if mirror_jsonl else None
        self.session_id: str | None = None
        self.folder: Path | None = None
        self.info: RankInfo | None = None
        self.comm = CommTimer()
        self.stop_requested = False  # set on NaN/Inf when settings.stop_on_nan
        self.ending = False  # end() is writing the last records (a signal then waits for it)
        self.after_end: list = []  # called when end() is done (a signal deferred meanwhile)
        self._writer: RecordWriter | None = None
        self._sampler = None
        self._started = self._ended = False
        self._t0 = time.perf_counter()
        self._wall0 = time.time()
        self._last_step_end: float | None = None
        self._step_begin: float | None = None
        self._pending: list | None = None
        self._pending_comm: list | None = None
        self._comm_timed = False  # the DDP hook is installed: communication records will come
        self._render: TextRenderer | None = None
        self._max_steps: int | None = None
        self._total_batch_size: int | None = None
        self._step_time_sum = 0.0
        self._builder: RecordBuilder | None = None
        self._samples = 0
        self._steps_done = 0
        self._last_step = 0
        self._final_loss: float | None = None
        self._start_record: dict = {}
        self._grad_watch = GradNormWatch()
        self._layer_norms: tuple[int, dict] | None = None  # (step, norms) from check_gradients
        self._nan_steps: set[int] = set()
        self._gpu_stats: dict[int, dict[str, list[float]]] = {}
        self._micro = 0
        self._micro_end: float | None = None
        self._step_losses: list = []  # this step's loss tensors (note_loss), for a NaN/Inf report
        self._model = None  # for the NaN/Inf report when the loss or grad norm says so

    # -- plumbing ------------------------------------------------------------------------
    def _fault(self, what: str, exc: BaseException) -> None:
        if self._writer is not None:
            self._writer.report_error(what, exc)
        else:
            print(f"logkit: {what}: {exc!r} (logging degraded, training goes on)", file=sys.stderr)

    def _record(self, type_: str, message: str, level: str = "INFO", step: int | None = None, **fields) -> dict:
        now = time.perf_counter()
        record = {
            "timestamp": self._wall0 + (now - self._t0),
            "elapsed_s": round(now - self._t0, 6),
            "type": type_,
            "level": level,
            "message": message,
            "session_id": self.session_id,
            "rank": self.info.rank if self.info else 0,
            "world_size": self.info.world_size if self.info else 1,
        }
        if step is not None:
            record["step"] = step
        record.update(fields)
        return record

    def _emit(self, record: dict) -> None:
        if self._writer is not None:
            self._writer.put(record)

    def _finding(self, type_: str, finding: dict, step: int | None = None) -> None:
        finding = dict(finding)
        message = finding.pop("message", None) or f"{finding['kind']}: {finding.get('value')}"
        self._emit(self._record(type_, message, "WARNING", step, **finding))

    @property
    def is_main(self) -> bool:
        return self.info is None or self.info.rank == 0

    # -- lifecycle -------------------------------------------------------------------------
    @guarded
    def start(self, *, model=None, model_name: str | None = None, config: dict | None = None,
              per_device_batch_size: int | None = None, gradient_accumulation_steps: int = 1,
              total_batch_size: int | None = None, max_steps: int | None = None,
              mixed_precision: str | None = None, dataset=None, dataloader=None) -> None:
        """Open the session on this rank (a collective: every rank calls it)."""
        if self._started:
            return
        self._started = True
        self.info = info = rank_info()
        self.session_id = agree_session_id(self.log_dir, info, self.requested_session_id)
        self.folder = self.log_dir / self.session_id
        files = SessionFiles(self.session_id)
        render = None
        if info.is_main:
            s = self.settings
            render = TextRenderer(self.folder, files, s.log_interval_steps,
                                  s.comm_log_interval if s.detailed_communication_logs else 0,
                                  main_level=s.main_level, multigpu_level=s.multigpu_level)
        self._render = render
        mirror = self.mirror_jsonl if info.is_main else None
        self._writer = RecordWriter(self.folder / files.rank_jsonl(info.rank), self.folder / files.errors_log,
                                    render, mirror_path=mirror)
        if total_batch_size is None and per_device_batch_size is not None:
            total_batch_size = per_device_batch_size * max(1, gradient_accumulation_steps) * info.world_size
        self._total_batch_size = total_batch_size
        self._max_steps = max_steps
        cuda = info.device.startswith("cuda")
        gpu_count = max(info.world_size, sysinfo.model_gpu_count(model)) if cuda else 0
        if cuda:
            mode = Mode.MULTI_GPU if gpu_count > 1 else Mode.SINGLE_GPU
        else:
            mode = Mode.MULTI_CPU if info.world_size > 1 else Mode.CPU
        if model_name is None and model is not None:
            model_name = sysinfo.model_name(model)
        self._start_record = self._record(
            EventType.SESSION_START,
            f"Session {self.session_id} started on rank {info.rank}/{info.world_size} ({mode})",
            mode=mode, local_rank=info.local_rank, hostname=info.hostname, pid=_pid(), backend=info.backend,
            device=info.device, mixed_precision=mixed_precision, model_name=model_name, gpu_count=gpu_count,
            per_device_batch_size=per_device_batch_size, gradient_accumulation_steps=gradient_accumulation_steps,
            total_batch_size=total_batch_size, max_steps=max_steps, verbosity=self.verbosity,
            settings=_settings_dict(self.settings), config=dict(config or {}), versions=sysinfo.versions(),
            gpus=sysinfo.gpu_list(),
        )
        self._emit(self._start_record)
        self._emit(self._record(EventType.SYSTEM_INFO, "System information", **sysinfo.system_info(self.log_dir)))
        if model is not None:
            self._model = model
            self._emit(self._record(EventType.MODEL_INFO, "Model parameters", **sysinfo.model_info(model)))
        if dataset is not None or dataloader is not None:
            self._emit(self._record(EventType.DATASET_INFO, "Training data",
                                    **sysinfo.dataset_info(dataset, dataloader)))
        self._start_sampler()
        self._builder = RecordBuilder(self.settings, {"session_id": self.session_id, "rank": info.rank,
                                                      "world_size": info.world_size},
                                      max_steps, total_batch_size, self._sampler)
        self._last_step_end = time.perf_counter()

    def _start_sampler(self) -> None:
        interval = self.settings.gpu_snapshot_interval
        if interval <= 0:
            return
        try:
            from trainer_hooks.sampler import ResourceSampler
        except ImportError:
            return
        # five samples per interval (mean/min/max of something), at most one every 2 s (each
        # costs ~0.5 ms of CPU in psutil and NVML)
        self._sampler = ResourceSampler(interval_s=interval, sample_every_s=min(2.0, max(0.05, interval / 5)),
                                        on_interval=self._on_snapshot, gpu=self._samples_gpus(),
                                        system_state=self.settings.system_state)
        self._sampler.start()
        self._sampler_notes()

    def _sampler_notes(self) -> None:
        # each degradation (no pynvml, no driver, a metric failing) is said once; the builder
        # keeps the sampler after end() let go of it (its last interval is delivered then)
        sampler = self._sampler or (self._builder.sampler if self._builder is not None else None)
        for note in sampler.take_notes() if sampler is not None else []:
            self._emit(self._record(EventType.RESOURCE_WARNING, note, "INFO", kind="sampling_degraded"))

    def _samples_gpus(self) -> bool:
        """The local-rank-0 process of each node samples every GPU visible on its node
        (``CUDA_VISIBLE_DEVICES`` applies, mapped to NVML by index or UUID); the other ranks
        sample the host only. So one stream per node holds that node's ``gpu_snapshot``
        devices, and rank 0's summary and performance.log cover the GPUs of node 0 (on several
        nodes, each node's local rank 0 stream has its own node's)."""
        return self.info is None or self.info.local_rank == 0

    def _on_snapshot(self, snapshot: dict) -> None:
        """Sampler thread: one ``gpu_snapshot`` per interval (mean/min/max over it, host and
        GPUs; ``devices: []`` where no GPU is sampled), and the findings on those means."""
        if self.settings.snapshot_records:
            from trainer_hooks.sampler import snapshot_message

            self._emit(self._record(EventType.GPU_SNAPSHOT, snapshot_message(snapshot), step=self._last_step or None,
                                    hostname=self.info.hostname if self.info else None, **snapshot))
        for dev in snapshot.get("devices") or []:
            stats = self._gpu_stats.setdefault(dev.get("index", 0), {"util": [], "util_max": [], "mem": []})
            for key, field in (("util", "utilization_percent"), ("util_max", "utilization_percent_max"),
                               ("mem", "memory_usage_percent")):
                if dev.get(field) is not None:
                    stats[key].append(dev[field])
        self._sampler_notes()
        s = self.settings
        usage = snapshot.get("resource_usage") or {}
        for finding in resource_findings(usage, s.memory_high_pct, s.gpu_memory_high_pct, s.gpu_util_low_pct):
            self._finding(EventType.RESOURCE_WARNING, finding, self._last_step or None)

    @guarded
    def attach_model(self, model) -> bool:
        """Time gradient synchronisation of ``model`` (a DDP wrapper, or the model it wraps)."""
        if self.info is None or self.info.world_size <= 1:
            return False
        ddp = find_ddp(model)
        if ddp is None:
            self._emit(self._record(EventType.RESOURCE_WARNING, "No DistributedDataParallel wrapper found: "
                                    "gradient synchronisation is not timed", "WARNING", kind="comm_not_timed"))
            return False
        why = install_comm_hook(ddp, self.comm)
        if why is not None:
            self._emit(self._record(EventType.RESOURCE_WARNING, why, "WARNING", kind="comm_not_timed"))
            return False
        self._comm_timed = True
        if self._render is not None and self.settings.communication_records:
            # multigpu.log: each Multi-GPU Step line is written with its step's Communication lines
            self._render.comm_lines = True
        return True

    # -- per step ----------------------------------------------------------------------------
    @guarded
    def step_begin(self) -> None:
        self.flush_step()
        self._step_begin = time.perf_counter()
        self._micro = 0
        self._micro_end = None
        self._step_losses = []  # after flush_step: the report of the step before may need them

    @guarded
    def micro_batch_end(self) -> None:
        """A micro-batch (forward and backward) of the current step is done (a ``batch_complete``
        record at ``ultra``: its index in the step and its duration)."""
        self._micro += 1
        if self.settings.batch_records:
            now = time.perf_counter()
            since = self._micro_end if self._micro_end is not None else self._step_begin
            self._micro_end = now
            self._emit(self._record("batch_complete", f"Micro-batch {self._micro} of step {self._last_step + 1}",
                                    "DEBUG", self._last_step + 1, micro_batch=self._micro,
                                    duration_s=round(now - since, 6) if since is not None else None))

    @guarded
    def note_loss(self, loss) -> None:
        """The loss tensor of a micro-batch of the current step (kept by reference, detached:
        no device sync), for the NaN/Inf report. The callback feeds it from a forward hook."""
        if not self._ended and len(self._step_losses) < 64:
            self._step_losses.append(loss.detach())

    @guarded
    def check_gradients(self, model, step: int | None = None, losses: list | None = None) -> bool:
        """Before ``optimizer.step()``: NaN/Inf in any gradient (one device sync), and the
        per-layer norms at ``ultra``. Returns False when a gradient is not finite.
        ``losses``: this step's loss tensors (else those given to ``note_loss``), reported
        with the gradients when they are not finite."""
        from trainer_hooks.tensors import grad_norms, named_grads

        step = self._last_step + 1 if step is None else step
        grads = named_grads(model)
        norms = grad_norms(grads)
        finite = all(math.isfinite(n) for n in norms)
        if self.settings.layer_grad_norms:
            self._layer_norms = (step, {name: round(n, 6) if math.isfinite(n) else None
                                        for (name, _), n in zip(grads, norms, strict=True)})
            for finding in self._grad_watch.check({name: n for (name, _), n in zip(grads, norms, strict=True)}):
                self._finding(EventType.ANOMALY, finding, step)
        if not finite:
            self.report_nonfinite(step, "nan_grad", model=model, grads=grads,
                                  losses=self._step_losses if losses is None else losses)
        return finite

    @guarded
    def report_nonfinite(self, step: int, kind: str, model=None, grads=None, loss=None, losses=None) -> None:
        """An ``anomaly`` and a ``nan_detected`` record: the non-finite tensors (the loss first,
        then gradients, then parameters) with shape and NaN/Inf counts, and a safetensors dump.

        The loss is the step's loss tensors (``losses``, one per micro-batch) where they hold
        NaN/Inf, else the logged value ``loss`` when it is not finite (a scalar tensor). Any
        non-finite loss makes the kind ``nan_loss``: it is where the NaN came from.
        """
        if step in self._nan_steps:
            return
        self._nan_steps.add(step)
        from trainer_hooks.tensors import dump_tensors, loss_tensors, named_grads, nonfinite_report

        named_losses = loss_tensors(losses or [], loss)
        tensors = nonfinite_report(named_losses, "loss")
        if tensors:
            kind = "nan_loss"
        loss_text = None if loss is None else str(loss)
        # value: JSON numbers only (NaN is not one); the logged loss goes as text
        self._emit(self._record(EventType.ANOMALY, f"{kind} at step {step}", "ERROR", step, kind=kind, value=None,
                                loss=loss_text))
        if len(self._nan_steps) > MAX_NAN_REPORTS:
            return
        if grads is None and model is not None:
            grads = named_grads(model)
        tensors += nonfinite_report(grads or [], "gradient")
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad] if model is not None else []
        tensors += nonfinite_report(params, "parameter")
        fields = {"kind": kind, "loss": loss_text, "tensors": tensors, "affected": [t["name"] for t in tensors],
                  "dump_path": None}
        if tensors and self.folder is not None:
            wanted = {(t["kind"], t["name"]) for t in tensors}
            to_dump = {n: t for n, t in named_losses if ("loss", n) in wanted}
            to_dump.update({f"{n}.grad": g for n, g in (grads or []) if ("gradient", n) in wanted})
            to_dump.update({n: p for n, p in params if ("parameter", n) in wanted})
            path = self.folder / "nan_dumps" / f"rank{self.info.rank if self.info else 0}_step{step}.safetensors"
            dumped = dump_tensors(path, to_dump, self.settings.nan_dump_max_bytes)
            dumped["dump_path"] = str(path.relative_to(self.folder))
            fields.update(dumped)
        self._emit(self._record(EventType.NAN_DETECTED, f"NaN/Inf detected at step {step} in {len(tensors)} tensors",
                                "ERROR", step, **fields))
        if self.settings.stop_on_nan:
            self.stop_requested = True

    @guarded
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
        self._steps_done += 1
        self._last_step = step
        if batch:
            self._samples += batch
        # the buckets launched since the last step end belong to this step; their records are
        # queued right after this step's record (multigpu.log: the step line, then its syncs)
        self._pending_comm = self.comm.collect(step) if self._comm_timed else None
        self._pending = [self._wall0 + (now - self._t0), now - self._t0, step, epoch, step_time, data_time, batch,
                         tokens, {"loss": _number(loss), "learning_rate": _number(learning_rate),
                                  "grad_norm": _number(grad_norm)}]
        if flush:
            self.flush_step()

    @guarded
    def add_metrics(self, step: int, logs: dict) -> None:
        """Merge a trainer log (loss, learning_rate, grad_norm, ...) into step ``step``'s record."""
        if self._pending is None or self._pending[2] != step:
            return
        metrics = self._pending[8]
        for key, value in logs.items():
            number = _number(value)
            if number is not None:
                metrics[key] = number
        self.flush_step()

    def flush_step(self) -> None:
        pending, self._pending = self._pending, None
        if pending is None:
            return
        step, metrics = pending[2], pending[8]
        for key in ("loss", "grad_norm"):
            value = metrics.get(key)
            if value is not None and not math.isfinite(value):
                self.report_nonfinite(step, "nan_loss" if key == "loss" else "nan_grad", model=self._model,
                                      loss=metrics.get("loss"), losses=self._step_losses)
        loss = metrics.get("loss")
        if loss is not None and math.isfinite(loss):
            self._final_loss = loss
        layer_norms = None
        if self._layer_norms is not None and self._layer_norms[0] == step:
            layer_norms, self._layer_norms = self._layer_norms[1], None
        if self._writer is not None and self._builder is not None:
            self._writer.put_call(self._builder.step, *pending, self._step_time_sum / self._steps_done,
                                  self.info.local_rank if self.info else 0, layer_norms)
        comm, self._pending_comm = self._pending_comm, None
        if comm:
            self._put_comm(comm)

    def _put_comm(self, items: list) -> None:
        if items and self._writer is not None and self._builder is not None:
            now = time.perf_counter()
            self._writer.put_call(self._builder.comm, self._wall0 + (now - self._t0), now - self._t0, items,
                                  self.comm.timing_source, self.comm.group_size,
                                  self.info.local_rank if self.info else 0)

    # -- other events --------------------------------------------------------------------------
    @guarded
    def evaluation(self, step: int, metrics: dict) -> None:
        values = {k: v for k, v in ((k, _number(v)) for k, v in metrics.items()) if v is not None}
        if "eval_loss" in values and "eval_perplexity" not in values:
            values["eval_perplexity"] = math.exp(values["eval_loss"]) if values["eval_loss"] < 700 else math.inf
        values = {k: _json_number(v) for k, v in values.items()}
        self._emit(self._record(EventType.EVALUATION, f"Evaluation at step {step}", step=step, metrics=values))

    @guarded
    def trainer_log(self, step: int, logs: dict) -> None:
        """Every trainer log, as it came (``ultra``)."""
        if self.settings.trainer_logs:
            clean = {k: (_json_number(v) if isinstance(v, float) else v) for k, v in logs.items()}
            self._emit(self._record("trainer_log", f"Trainer log at step {step}", "DEBUG", step, logs=clean))

    @guarded
    def checkpoint(self, step: int, path: str | Path) -> None:
        size = sysinfo.folder_size(Path(path)) if self.is_main else None
        self._emit(self._record(EventType.CHECKPOINT_SAVED, f"Checkpoint saved at step {step}: {path}", step=step,
                                path=str(path), size_bytes=size))

    @guarded
    def epoch_end(self, step: int, epoch: float | None) -> None:
        self._emit(self._record(EventType.EPOCH_COMPLETE, f"Epoch {epoch:.2f} ended" if epoch is not None else
                                "Epoch ended", step=step, epoch=epoch))

    @guarded
    def event(self, type_: str, message: str, level: str = "INFO", step: int | None = None, **fields) -> None:
        self._emit(self._record(type_, message, level, step, **fields))

    @guarded
    def error(self, exc: BaseException) -> None:
        self._emit(self._record(
            EventType.ERROR, f"{type(exc).__name__}: {exc}", "ERROR", step=self._last_step or None,
            exception_type=type(exc).__name__,
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
        ))

    @guarded
    def end_unfinished(self, reason: str = "the process exited before training ended") -> None:
        """At exit with the session still open: an ``error`` record and ``session_end`` failed."""
        if not self._started or self._ended:
            return
        self._emit(self._record(EventType.ERROR, f"Session not ended: {reason}", "ERROR", self._last_step or None,
                                exception_type=None, kind="exit_before_end", traceback=None))
        self.end(Status.FAILED, reason=reason)

    @guarded
    def end(self, status: str = Status.COMPLETED, *, reason: str | None = None, from_signal: bool = False) -> None:
        """Close the session on this rank: ``session_end``, then rank 0's summary.

        ``reason``: why a session that did not complete ended (written into ``session_end``).
        ``from_signal``: called from a signal handler: nothing here may wait on the device
        (a hung NCCL kernel would block the handler and ``session_end`` would never be written),
        and the threads get short joins.
        """
        if not self._started or self._ended:
            return
        self._ended = True
        self.ending = True
        try:
            self._end(status, reason, from_signal)
        finally:
            self.ending = False
            for fn in self.after_end:
                fn()

    def _end(self, status: str, reason: str | None, from_signal: bool) -> None:
        self.flush_step()
        # Only a completed run waits for the GPU to finish its last timed syncs; a failing or
        # signalled one may have a hung collective behind those events.
        dropped = self._end_comm(wait_device=status == Status.COMPLETED and not from_signal)
        if self._writer is not None and self._builder is not None:
            now = time.perf_counter()
            self._writer.put_call(self._builder.performance, self._wall0 + (now - self._t0), now - self._t0)
        sampler, self._sampler = self._sampler, None
        if sampler is not None:
            sampler.stop(timeout=1.0 if from_signal else 5.0)
        duration = time.perf_counter() - self._t0
        message = f"Session {self.session_id} {status} after {duration:.1f}s"
        fields = {}
        if reason:
            message += f": {reason}"
            fields["reason"] = reason
        if dropped:
            fields["comm_timings_dropped"] = dropped
        end = self._record(
            EventType.SESSION_END, message, "INFO" if status == Status.COMPLETED else "ERROR",
            status=status, duration_s=round(duration, 6), total_steps=self._last_step, steps_logged=self._steps_done,
            final_loss=self._final_loss, training_time_s=round(self._step_time_sum, 6), samples_seen=self._samples,
            **fields,
        )
        self._emit(end)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close(timeout=5.0 if from_signal else 10.0)
        if self.is_main and self.folder is not None:
            self._write_summary(end)

    def _end_comm(self, wait_device: bool) -> int:
        """The sync timings still unread: all of them (waiting for the GPU) or the ready ones;
        returns how many were dropped unread, said in a record."""
        if not self._comm_timed:
            return 0
        items, dropped = self.comm.finish(self._last_step, wait=wait_device)
        self._put_comm(items)
        if dropped:
            self._emit(self._record(EventType.RESOURCE_WARNING, f"{dropped} gradient-sync timings were still on the "
                                    "GPU at the end and were dropped unread (the session did not complete)",
                                    "INFO", self._last_step or None, kind="comm_timings_dropped", value=dropped))
        return dropped

    def _write_summary(self, end: dict) -> None:
        from trainer_hooks.summary import build_summary, summary_text

        files = SessionFiles(self.session_id)
        comm_stats = self._builder.comm_stats if self._builder is not None else {}
        summary = build_summary(self._start_record, end, self._step_time_sum, comm_stats, self._gpu_stats)
        try:
            (self.folder / files.summary_json).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
            (self.folder / files.summary_txt).write_text(summary_text(summary), encoding="utf-8")
        except OSError as exc:
            print(f"logkit: cannot write the summary of {self.session_id}: {exc}", file=sys.stderr)


def _pid() -> int:
    import os

    return os.getpid()


def _settings_dict(settings: LogSettings) -> dict:
    from dataclasses import asdict

    return asdict(settings)
