"""The session logger shared by the transformers callback and the accelerate-loop helper.

``SessionLogger`` is one rank's session: ``start`` opens it (session id, files, the first
records, the resource sampler), the event methods write what is not a step, ``end`` closes it
(``session_end``, then rank 0's summary and, of a completed session, its verdict: ``end_verdict``).
The per-step methods are in ``steps``, the NaN/Inf checks in ``nonfinite``. Records are laid out by
their specs (``logkit.schema.records``) and handed to the writer thread; analysis is left to
``logkit`` (the verdict runs it in another process), and what is decided here (findings) are
threshold checks on numbers the logger already holds. Every public method is guarded: a fault of
the logger goes to the errors log, never into training.
"""

from __future__ import annotations

import math
import os
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

import orjson

from logkit.schema import Mode, SessionFiles, Status
from logkit.schema.findings import FindingKind
from logkit.schema.records import (
    CHECKPOINT_SAVED,
    DATASET_INFO,
    EPOCH_COMPLETE,
    ERROR,
    EVALUATION,
    MODEL_INFO,
    RECORD_SPECS,
    RESOURCE_WARNING,
    SESSION_END,
    SESSION_START,
    STALL,
    SYSTEM_INFO,
    TRAINER_LOG,
    RecordSpec,
)
from logkit.schema.values import to_float
from trainer_hooks import dist_timing, flight, sysinfo
from trainer_hooks.builder import RecordBuilder
from trainer_hooks.commhook import CommTimer
from trainer_hooks.distributed import RankInfo, agree_session_id, measure_clock_offset, rank_info
from trainer_hooks.end_verdict import end_verdict
from trainer_hooks.guard import guarded
from trainer_hooks.nonfinite import NonFiniteChecks
from trainer_hooks.resource_sampling import ResourceSampling
from trainer_hooks.settings import LogSettings, resolve_settings
from trainer_hooks.stall import StallWatch, thread_stack
from trainer_hooks.steps import StepLogging
from trainer_hooks.strategy import describe
from trainer_hooks.summary import GpuStats, build_summary, summary_text, write_whole
from trainer_hooks.textlog import TextRenderer
from trainer_hooks.timed_phases import TimedPhases, between_steps
from trainer_hooks.timing_plan import has_collectives, install_timing
from trainer_hooks.writer import RecordWriter

# The clock of the *_clock_s fields: time.perf_counter's (CLOCK_MONOTONIC on Linux)
_CLOCK = time.get_clock_info("perf_counter").implementation


class SessionLogger(StepLogging, NonFiniteChecks, TimedPhases, ResourceSampling):
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
        self._dist_timing = None  # the torch.distributed wrappers in place (dist_timing.install)
        self.ending = False  # end() is writing the last records (a signal then waits for it)
        self.after_end: list = []  # called when end() is done (a signal deferred meanwhile)
        self._writer: RecordWriter | None = None
        self._sampler = None
        self._started = self._ended = False
        self._t0 = time.perf_counter()
        self._wall0 = time.time()
        self._render: TextRenderer | None = None
        self._max_steps: int | None = None
        self._total_batch_size: int | None = None
        self._builder: RecordBuilder | None = None
        self._start_record: dict = {}
        self._gpu_stats = GpuStats()
        self._stall_watch: StallWatch | None = None
        self._clock_uncertainty = 0.0
        self._summary_written = False
        self._init_steps()
        self._init_nonfinite()
        self._init_timed()

    # -- plumbing ------------------------------------------------------------------------
    def _fault(self, what: str, exc: BaseException) -> None:
        if self._writer is not None:
            self._writer.report_error(what, exc)
        else:
            print(f"logkit: {what}: {exc!r} (logging degraded, training goes on)", file=sys.stderr)

    def _record(self, spec: RecordSpec, message: str, level: str = "INFO", step: int | None = None,
                at: float | None = None, **fields) -> dict:
        """A record of ``spec``: the keys every record has, then ``fields`` (by field name); ``at``: the
        ``time.perf_counter`` reading it is of (now where None)."""
        elapsed = (time.perf_counter() if at is None else at) - self._t0
        info = self.info
        common = dict(timestamp=self._wall0 + elapsed, time_s=round(elapsed, 6), type=spec.type, level=level,
                      message=message, session_id=self.session_id, rank=info.rank if info else 0,
                      world_size=info.world_size if info else 1)
        if step is not None:
            common["step"] = step
        return spec.build(**common, **fields)

    def _emit(self, record: dict) -> None:
        if self._writer is not None:
            self._writer.put(record)

    def _finding(self, spec: RecordSpec, finding: dict, step: int | None = None) -> None:
        """A finding of ``findings`` (laid out by ``spec`` already), with its own message if it has one."""
        record = self._record(spec, f"{spec['subkind'].get(finding)}: {spec['value'].get(finding)}", "WARNING", step)
        record.update(finding)
        self._emit(record)

    @property
    def is_main(self) -> bool:
        return self.info is None or self.info.rank == 0

    # -- lifecycle -------------------------------------------------------------------------
    @guarded
    def start(self, *, model=None, model_name: str | None = None, config: dict | None = None,
              per_device_batch_size: int | None = None, gradient_accumulation_steps: int = 1,
              total_batch_size: int | None = None, max_steps: int | None = None,
              mixed_precision: str | None = None, dataset=None, dataloader=None, wrapped=None,
              time_communication: bool = True) -> None:
        """Open the session on this rank (a collective: every rank calls it). ``wrapped``: the model as
        the loop trains it (a DDP / FSDP wrapper), where ``model`` is the module it wraps. With several ranks
        the collectives of ``wrapped`` (else ``model``) are timed from here (``time_communication``)."""
        if self._started:
            return
        began = time.perf_counter()
        self._started = True
        self.info = info = rank_info()
        self.session_id = agree_session_id(self.log_dir, info, self.requested_session_id)
        # the second collective of the start, right after the first (nothing between can fail)
        self.clock_offset, self._clock_uncertainty = measure_clock_offset(info)
        gathered = time.perf_counter()  # the two collectives wait for the last rank to start
        self.folder = self.log_dir / self.session_id
        self._open_files()
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
        strategy, strategy_facts = describe(wrapped if wrapped is not None else model)
        timing_source, timing_note = "none", None
        if not has_collectives(info):
            timing_note = "one process in no process group: no collectives to time"
        elif not time_communication:
            timing_note = "communication timing turned off (time_communication=False)"
        elif model is None and wrapped is None:
            timing_note = "no model given at start: attach_model(model) times its collectives"
        else:
            timing_source, timing_note = self._install_timing(strategy, wrapped if wrapped is not None else model)
        self._start_record = self._record(
            SESSION_START, f"Session {self.session_id} started on rank {info.rank}/{info.world_size} ({mode}"
            + (f", {strategy})" if strategy != "none" else ")"),
            mode=mode, local_rank=info.local_rank, hostname=info.hostname, pid=os.getpid(), backend=info.backend,
            device=info.device, mixed_precision=mixed_precision, model=model_name, gpu_count=gpu_count,
            per_device_batch_size=per_device_batch_size, gradient_accumulation_steps=gradient_accumulation_steps,
            total_batch_size=total_batch_size, max_steps=max_steps, verbosity=self.verbosity,
            settings=asdict(self.settings), config=dict(config or {}), versions=sysinfo.versions(),
            gpus=sysinfo.gpu_list(), **self._requested_id(), clock=_CLOCK, clock_offset_s=round(self.clock_offset, 9),
            clock_offset_uncertainty_s=round(self._clock_uncertainty, 9), strategy=strategy,
            strategy_facts=strategy_facts, process_group=info.process_group, launcher=info.launcher,
            timing_source=timing_source, timing_note=timing_note,
        )
        if info.launcher is not None and info.process_group != "formed" and self.is_main:
            print(f"logkit: {info.launcher['name']} started {info.launcher['world_size']} processes but this one is in "
                  f"no process group training uses ({info.process_group}): it trains alone on all the data and logs "
                  f"as a session of its own ({self.session_id})", file=sys.stderr)
        self._emit(self._start_record)
        if timing_source == "none" and has_collectives(info) and model is not None and time_communication:
            self._emit(self._record(RESOURCE_WARNING, timing_note, "WARNING", subkind=FindingKind.COMM_NOT_TIMED))
        # host, model and data facts: free-form beyond the keys every record has (kept whole as meta)
        self._emit(self._record(SYSTEM_INFO, "System information") | sysinfo.system_info(self.log_dir))
        if model is not None:
            self._model = model
            self._emit(self._record(MODEL_INFO, "Model parameters") | sysinfo.model_info(model))
        if dataset is not None or dataloader is not None:
            self._emit(self._record(DATASET_INFO, "Training data") | sysinfo.dataset_info(dataset, dataloader))
        self._start_sampler()
        self._builder = RecordBuilder(self.settings, dict(session_id=self.session_id, rank=info.rank,
                                                          world_size=info.world_size, local_rank=info.local_rank),
                                      max_steps, total_batch_size, self._sampler)
        self._startup_phases(began, gathered if info.world_size > 1 else None)
        if info.device.startswith("cuda:"):
            self._builder.memory_device = int(info.device.split(":", 1)[1])
        self._last_step_end = time.perf_counter()
        if self.settings.stall_min_s > 0:
            self._stall_watch = StallWatch(self, self.settings.stall_factor, self.settings.stall_min_s)
            self._stall_watch.start()

    def last_progress(self) -> float:
        """When the rank last ended a step (or started logging), on ``time.perf_counter``."""
        return self._last_step_end if self._last_step_end is not None else self._t0

    def report_stall(self, waited: float, limit: float) -> None:
        """A ``stall`` record (stall watch thread): where the training thread is, and its stack."""
        step, phase, detail = self.where()
        rank = self.info.rank if self.info else 0
        self._emit(self._record(
            STALL, f"No step ended for {waited:.0f}s (limit {limit:.0f}s): rank {rank} is in {phase} of step {step}"
            + (f" ({detail})" if detail else ""), "WARNING", step, phase=phase, phase_detail=detail,
            clock_s=round(self.job_clock(), 6), value=round(waited, 3), threshold=round(limit, 3),
            stack=thread_stack(self._train_thread)))
        self._dump_flight_recorder()

    def _dump_flight_recorder(self) -> None:
        """The rank's Flight Recorder dump beside its stream, where torch records collectives."""
        if self.folder is not None and self.info is not None and flight.recording():
            try:
                flight.dump_to(self.folder / SessionFiles(self.session_id).flight_recorder(self.info.rank))
            except Exception as exc:  # a dump is a bonus: it must never fail the run
                self._fault("flight recorder dump", exc)

    def _where_fields(self) -> dict:
        """The step and phase the rank is in, for the record that says how it ended."""
        step, phase, detail = self.where()
        return dict(step=step, phase=phase, phase_detail=detail, clock_s=round(self.job_clock(), 6))

    def _requested_id(self) -> dict:
        """The id asked for, when this session's differs, said once on rank 0's stderr too."""
        asked = self.requested_session_id or os.environ.get("LOGKIT_SESSION_ID")
        if asked is None or asked == self.session_id:
            return {}
        if self.is_main:
            print(f"logkit: session id {asked!r} is not a safe folder name or another run's streams are under it: "
                  f"this run logs as {self.session_id!r}", file=sys.stderr)
        return {"requested_session_id": asked}

    def _open_files(self) -> None:
        """The writer thread and its files: this rank's stream, and rank 0's text logs."""
        info, files, s = self.info, SessionFiles(self.session_id), self.settings
        render = None
        if info.is_main:
            render = TextRenderer(self.folder, files, s.log_interval_steps,
                                  s.comm_log_interval if s.detailed_communication_logs else 0,
                                  main_level=s.main_level, multigpu_level=s.multigpu_level)
        self._render = render
        self._writer = RecordWriter(self.folder / files.rank_jsonl(info.rank), self.folder / files.errors_log,
                                    render, mirror_path=self.mirror_jsonl if info.is_main else None)

    @guarded
    def attach_model(self, model) -> bool:
        """Time the communication of ``model`` (where ``start`` was given none): a DDP wrapper's gradient sync,
        an FSDP2 model's all-gathers and reduce-scatters, any other wrapper's collectives at torch.distributed."""
        if self.info is None or not has_collectives(self.info):
            return False
        if self._comm_timed:
            return True
        strategy = SESSION_START["strategy"].get(self._start_record) or describe(model)[0]
        source, why = self._install_timing(strategy, model)
        if why is not None:
            self._emit(self._record(RESOURCE_WARNING, why, "WARNING", subkind=FindingKind.COMM_NOT_TIMED))
        return source != "none"

    def _install_timing(self, strategy: str, model) -> tuple[str, str | None]:
        """Install the timing source of ``strategy`` (``timing_plan``): (its name, None) or ("none", why)."""
        timer, self._dist_timing, source, why = install_timing(strategy, model, self.comm)
        if why is not None:
            return source, why
        self.comm, self._comm_timed = timer, True
        if self._render is not None and self.settings.communication_records:
            # multigpu.log: each Multi-GPU Step line is written with its step's Communication lines
            self._render.comm_lines = True
        return source, None

    # -- other events --------------------------------------------------------------------------
    @guarded
    @between_steps
    def evaluation(self, step: int, metrics: dict) -> None:
        values = {k: v for k, v in ((k, to_float(v)) for k, v in metrics.items()) if v is not None}
        if "eval_loss" in values and "eval_perplexity" not in values:
            values["eval_perplexity"] = math.exp(values["eval_loss"]) if values["eval_loss"] < 700 else math.inf
        # JSON has no NaN/Inf: they are written as null
        values = {k: to_float(v, finite=True) for k, v in values.items()}
        self._emit(self._record(EVALUATION, f"Evaluation at step {step}", step=step, metrics=values))

    @guarded
    @between_steps
    def trainer_log(self, step: int, logs: dict) -> None:
        """Every trainer log, as it came (``ultra``)."""
        if self.settings.trainer_logs and self._writer is not None:  # the record is made on the writer thread
            self._writer.put_call(self._trainer_log_record, step, dict(logs), time.perf_counter())

    def _trainer_log_record(self, step: int, logs: dict, at: float) -> list[dict]:
        clean = {k: (to_float(v, finite=True) if isinstance(v, float) else v) for k, v in logs.items()}
        return [self._record(TRAINER_LOG, f"Trainer log at step {step}", "DEBUG", step, at=at, logs=clean)]

    @guarded
    @between_steps
    def checkpoint(self, step: int, path: str | Path) -> None:
        size = sysinfo.folder_size(Path(path)) if self.is_main else None
        self._emit(self._record(CHECKPOINT_SAVED, f"Checkpoint saved at step {step}: {path}", step=step,
                                path=str(path), size_bytes=size))

    @guarded
    def epoch_end(self, step: int, epoch: float | None) -> None:
        self._emit(self._record(EPOCH_COMPLETE, f"Epoch {epoch:.2f} ended" if epoch is not None else "Epoch ended",
                                step=step, epoch=epoch))

    @guarded
    def event(self, type_: str, message: str, level: str = "INFO", step: int | None = None, **fields) -> None:
        """A record of a declared type, its fields by name (``logkit.schema.records``: an
        undeclared one is an error, the contract is there); a type of your own takes any fields."""
        spec = RECORD_SPECS.get(type_)
        if spec is not None:
            self._emit(self._record(spec, message, level, step, **fields))
        else:
            self._emit(self._record(RecordSpec(type_, None, ()), message, level, step) | fields)

    @guarded
    def error(self, exc: BaseException) -> None:
        self._emit(self._record(
            ERROR, f"{type(exc).__name__}: {exc}", "ERROR", exception_type=type(exc).__name__,
            traceback="".join(traceback.format_exception(type(exc), exc, exc.__traceback__)),
            **self._where_fields()))
        self._dump_flight_recorder()

    @guarded
    def end_unfinished(self, reason: str = "the process exited before training ended") -> None:
        """At exit with the session still open: an ``error`` record and ``session_end`` failed."""
        if not self._started or self._ended:
            return
        self._emit(self._record(ERROR, f"Session not ended: {reason}", "ERROR", self._last_step or None,
                                exception_type=None, subkind=FindingKind.EXIT_BEFORE_END, traceback=None))
        self.end(Status.FAILED, reason=reason)

    @guarded
    def end(self, status: str = Status.COMPLETED, *, reason: str | None = None, from_signal: bool = False) -> None:
        """Close the session on this rank: ``session_end``, then rank 0's summary and, when the
        session completed (not from a signal), rank 0's verdict (``end_verdict``, once ``ending``
        is over: a signal during the analysis is taken at once, never deferred behind it).

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
        if status == Status.COMPLETED and not from_signal:
            self._end_verdict()

    def _end_verdict(self) -> None:
        """Rank 0, after the session is closed (outside ``ending``: a signal is then taken at once):
        the verdict of the analysis, printed and appended to summary.txt (``end_verdict``)."""
        if not (self.is_main and self.folder is not None and self.settings.end_verdict):
            return
        summary_txt = self.folder / SessionFiles(self.session_id).summary_txt if self._summary_written else None
        end_verdict(self.log_dir, self.session_id, self.info.world_size if self.info else 1,
                    SESSION_START["model"].get(self._start_record), self.settings.end_verdict_timeout_s, summary_txt)

    def _end(self, status: str, reason: str | None, from_signal: bool) -> None:
        began = time.perf_counter()
        where = self._where_fields() if status != Status.COMPLETED else {}
        watch, self._stall_watch = self._stall_watch, None
        if watch is not None:
            watch.stop()
        self.flush_step()
        dist_timing.uninstall(self._dist_timing)  # torch.distributed's own functions again
        self._dist_timing = None
        # Only a completed run waits for the GPU to finish its last timed syncs; a failing or
        # signalled one may have a hung collective behind those events.
        dropped = self._end_comm(wait_device=status == Status.COMPLETED and not from_signal,
                                 timeout=1.0 if from_signal else 10.0)
        if self._writer is not None and self._builder is not None:
            elapsed = time.perf_counter() - self._t0
            self._writer.put_call(self._builder.performance, self._wall0 + elapsed, elapsed)
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
        if where:
            message += f" in {where['phase']} of step {where['step']}"
            fields.update(where)
        self._end_phases(began)
        end = self._record(
            SESSION_END, message, "INFO" if status == Status.COMPLETED else "ERROR",
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

    def _write_summary(self, end: dict) -> None:
        files = SessionFiles(self.session_id)
        comm_stats = self._builder.comm_stats if self._builder is not None else {}
        summary = build_summary(self._start_record, end, self._step_time_sum, comm_stats, self._gpu_stats)
        try:
            write_whole(self.folder / files.summary_json, orjson.dumps(summary, option=orjson.OPT_INDENT_2))
            write_whole(self.folder / files.summary_txt, summary_text(summary).encode("utf-8"))
            self._summary_written = True
        except OSError as exc:
            print(f"logkit: cannot write the summary of {self.session_id}: {exc}", file=sys.stderr)
