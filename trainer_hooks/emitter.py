"""The session logger shared by the transformers callback and the accelerate-loop helper.

It builds records (plain dicts with the keys of ``logkit.schema``) on the training thread
and hands them to the writer thread; it does no analysis. Every public method is
guarded: a fault of the logger goes to the errors log, never into training.
"""

from __future__ import annotations

import functools
import math
import platform
import sys
import time
import traceback
from collections import Counter, deque
from pathlib import Path

import orjson

from logkit.schema import EventType, Mode, SessionFiles, Status, bandwidth_mb_s, busbw_factor
from trainer_hooks.commhook import CommTimer, find_ddp, install_comm_hook
from trainer_hooks.distributed import RankInfo, agree_session_id, rank_info
from trainer_hooks.textlog import TextRenderer
from trainer_hooks.writer import RecordWriter, iso_timestamp

__all__ = ["SessionLogger", "VERBOSITY_LEVELS"]

# Per verbosity (seed 004): main.log step-line interval and performance window, in steps.
VERBOSITY_LEVELS: dict[str, dict[str, int]] = {
    "low": {"log_interval_steps": 50, "performance_log_steps": 100},
    "medium": {"log_interval_steps": 10, "performance_log_steps": 50},
    "high": {"log_interval_steps": 1, "performance_log_steps": 10},
    "ultra": {"log_interval_steps": 1, "performance_log_steps": 5},
}


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


def _finite_or_none(value):
    if value is None:
        return None
    try:
        value = float(value)
    except (TypeError, ValueError):
        return None
    return value


class SessionLogger:
    """One rank's view of a logged training session.

    Typical use (what the callback and ``TrainingLogger`` do)::

        log = SessionLogger(log_dir="logs")
        log.start(model=model, total_batch_size=32, max_steps=1000)   # every rank
        log.attach_model(ddp_model)                                    # times gradient sync
        for step in ...:
            log.step_begin()
            ...
            log.step_end(step, loss=..., learning_rate=..., grad_norm=...)
        log.end()                                                      # every rank
    """

    def __init__(
        self,
        log_dir: str | Path = "logs",
        verbosity: str = "high",
        log_interval_steps: int | None = None,
        performance_log_steps: int | None = None,
        detailed_communication_logs: bool = True,
        session_id: str | None = None,
    ) -> None:
        if verbosity not in VERBOSITY_LEVELS:
            raise ValueError(f"verbosity must be one of {sorted(VERBOSITY_LEVELS)}, not {verbosity!r}")
        levels = VERBOSITY_LEVELS[verbosity]
        self.log_dir = Path(log_dir)
        self.verbosity = verbosity
        self.log_interval_steps = log_interval_steps or levels["log_interval_steps"]
        self.performance_log_steps = performance_log_steps or levels["performance_log_steps"]
        self.detailed_communication_logs = detailed_communication_logs
        self.requested_session_id = session_id
        self.session_id: str | None = None
        self.folder: Path | None = None
        self.info: RankInfo | None = None
        self.comm = CommTimer()
        self._writer: RecordWriter | None = None
        self._started = self._ended = False
        self._t0 = time.perf_counter()
        self._wall0 = time.time()
        self._last_step_end: float | None = None
        self._step_begin: float | None = None
        self._pending: dict | None = None
        self._max_steps: int | None = None
        self._total_batch_size: int | None = None
        self._step_times: list[float] = []
        self._window: deque = deque()
        self._samples = 0
        self._steps_done = 0
        self._last_step = 0
        self._final_loss: float | None = None
        self._comm_stats: dict[str, list[float]] = {}
        self._start_record: dict = {}

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

    @property
    def is_main(self) -> bool:
        return self.info is None or self.info.rank == 0

    # -- lifecycle -------------------------------------------------------------------------
    @guarded
    def start(
        self,
        *,
        model=None,
        model_name: str | None = None,
        config: dict | None = None,
        per_device_batch_size: int | None = None,
        gradient_accumulation_steps: int = 1,
        total_batch_size: int | None = None,
        max_steps: int | None = None,
        mixed_precision: str | None = None,
    ) -> None:
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
            render = TextRenderer(self.folder, files, self.log_interval_steps,
                                  1 if self.detailed_communication_logs else 0)
        self._writer = RecordWriter(self.folder / files.rank_jsonl(info.rank), self.folder / files.errors_log, render)
        if total_batch_size is None and per_device_batch_size is not None:
            total_batch_size = per_device_batch_size * max(1, gradient_accumulation_steps) * info.world_size
        self._total_batch_size = total_batch_size
        self._max_steps = max_steps
        cuda = info.device.startswith("cuda")
        gpus = _gpu_list() if cuda else []
        gpu_count = max(info.world_size, _model_gpu_count(model)) if cuda else 0
        if cuda:
            mode = Mode.MULTI_GPU if gpu_count > 1 else Mode.SINGLE_GPU
        else:
            mode = Mode.MULTI_CPU if info.world_size > 1 else Mode.CPU
        if model_name is None and model is not None:
            model_name = _model_name(model)
        self._start_record = self._record(
            EventType.SESSION_START,
            f"Session {self.session_id} started on rank {info.rank}/{info.world_size} ({mode})",
            mode=mode,
            local_rank=info.local_rank,
            hostname=info.hostname,
            pid=_pid(),
            backend=info.backend,
            device=info.device,
            mixed_precision=mixed_precision,
            model_name=model_name,
            gpu_count=gpu_count,
            per_device_batch_size=per_device_batch_size,
            gradient_accumulation_steps=gradient_accumulation_steps,
            total_batch_size=total_batch_size,
            max_steps=max_steps,
            verbosity=self.verbosity,
            config=dict(config or {}),
            versions=_versions(),
            gpus=gpus,
        )
        self._emit(self._start_record)
        if model is not None:
            self._emit(self._record(EventType.MODEL_INFO, "Model parameters", **_model_info(model)))
        self._last_step_end = time.perf_counter()

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
        return True

    @guarded
    def step_begin(self) -> None:
        self.flush_step()
        self._step_begin = time.perf_counter()

    @guarded
    def step_end(
        self,
        step: int,
        *,
        epoch: float | None = None,
        loss=None,
        learning_rate=None,
        grad_norm=None,
        tokens: int | None = None,
        total_batch_size: int | None = None,
        flush: bool = True,
    ) -> None:
        """One optimizer step is done. ``flush=False`` keeps the record open for
        ``add_metrics`` (transformers logs the loss just after its step-end callback)."""
        now = time.perf_counter()
        self.flush_step()
        prev = self._last_step_end if self._last_step_end is not None else now
        step_time = now - prev
        data_time = (self._step_begin - prev) if self._step_begin is not None else None
        self._last_step_end, self._step_begin = now, None
        batch = total_batch_size or self._total_batch_size
        self._step_times.append(step_time)
        self._steps_done += 1
        self._last_step = step
        if batch:
            self._samples += batch
        self._window.append((step_time, batch or 0))
        for index, size, t_start, t_end in self.comm.drain():
            self._emit_comm(step, index, size, t_end - t_start)
        avg = sum(self._step_times) / len(self._step_times)
        remaining = (self._max_steps - step) if self._max_steps else None
        eta_min = avg * remaining / 60.0 if remaining is not None else None
        self._pending = self._record(
            EventType.TRAINING_STEP,
            "",
            step=step,
            max_steps=self._max_steps,
            epoch=epoch,
            local_rank=self.info.local_rank if self.info else 0,
            timing={
                "step_time_seconds": round(step_time, 6),
                "avg_step_time_seconds": round(avg, 6),
                "data_time_seconds": round(data_time, 6) if data_time is not None else None,
                "eta_minutes": round(eta_min, 3) if eta_min is not None else None,
                "estimated_completion": iso_timestamp(time.time() + eta_min * 60) if eta_min is not None else None,
            },
            metrics={
                "loss": _finite_or_none(loss),
                "learning_rate": _finite_or_none(learning_rate),
                "grad_norm": _finite_or_none(grad_norm),
                "samples_per_second": round(batch / step_time, 4) if batch and step_time > 0 else None,
                "tokens_per_second": round(tokens / step_time, 2) if tokens and step_time > 0 else None,
                "total_batch_size": batch,
            },
        )
        if flush:
            self.flush_step()

    @guarded
    def add_metrics(self, step: int, logs: dict) -> None:
        """Merge a trainer log (loss, learning_rate, grad_norm, ...) into step ``step``'s record."""
        if self._pending is None or self._pending.get("step") != step:
            return
        metrics = self._pending["metrics"]
        for key, value in logs.items():
            if isinstance(value, (int, float)) and not isinstance(value, bool):
                metrics[key] = float(value)
        self.flush_step()

    def flush_step(self) -> None:
        record, self._pending = self._pending, None
        if record is None:
            return
        metrics = record["metrics"]
        loss = metrics.get("loss")
        if loss is not None:
            self._final_loss = loss
            record["message"] = f"Step {record['step']} completed - Loss: {loss:.6f}"
        else:
            record["message"] = f"Step {record['step']} completed"
        self._emit(record)
        if len(self._window) >= self.performance_log_steps:
            self._emit_performance(record["step"])

    def _emit_comm(self, step: int, bucket: int, size: int, duration_s: float, op: str = "gradient_sync") -> None:
        n = self.comm.group_size
        algbw = bandwidth_mb_s(size, duration_s)
        busbw = algbw * busbw_factor(op, n)
        self._emit(self._record(
            EventType.COMMUNICATION,
            f"{op} bucket {bucket}: {size} bytes in {duration_s * 1e3:.3f} ms",
            step=step, op=op, size_bytes=size, duration_ms=round(duration_s * 1e3, 6),
            algbw_mb_s=round(algbw, 4), busbw_mb_s=round(busbw, 4), group_size=n, bucket=bucket,
            timing_source=self.comm.timing_source,
        ))
        stats = self._comm_stats.setdefault(op, [0, 0.0, 0.0, 0.0])
        stats[0] += 1
        stats[1] += size
        stats[2] += algbw if math.isfinite(algbw) else 0.0
        stats[3] += busbw if math.isfinite(busbw) else 0.0

    def _emit_performance(self, step: int) -> None:
        window, self._window = list(self._window), deque()
        if not window:
            return
        total_time = sum(t for t, _ in window)
        samples = sum(b for _, b in window)
        self._emit(self._record(
            EventType.PERFORMANCE,
            f"Performance over {len(window)} steps",
            step=step,
            window_steps=len(window),
            avg_step_time_s=round(total_time / len(window), 6),
            throughput_samples_s=round(samples / total_time, 4) if total_time > 0 else None,
            total_batch_size=self._total_batch_size,
        ))

    @guarded
    def evaluation(self, step: int, metrics: dict) -> None:
        values = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        if "eval_loss" in values and "eval_perplexity" not in values:
            values["eval_perplexity"] = math.exp(values["eval_loss"]) if values["eval_loss"] < 700 else math.inf
        self._emit(self._record(EventType.EVALUATION, f"Evaluation at step {step}", step=step, metrics=values))

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
    def end(self, status: str = Status.COMPLETED) -> None:
        """Close the session on this rank: ``session_end``, then rank 0's summary."""
        if not self._started or self._ended:
            return
        self._ended = True
        self.flush_step()
        if self._window:
            self._emit_performance(self._last_step)
        duration = time.perf_counter() - self._t0
        training_time = sum(self._step_times)
        end = self._record(
            EventType.SESSION_END,
            f"Session {self.session_id} {status} after {duration:.1f}s",
            "INFO" if status == Status.COMPLETED else "ERROR",
            status=status,
            duration_s=round(duration, 6),
            total_steps=self._last_step,
            steps_logged=self._steps_done,
            final_loss=self._final_loss,
            training_time_s=round(training_time, 6),
            samples_seen=self._samples,
        )
        self._emit(end)
        writer, self._writer = self._writer, None
        if writer is not None:
            writer.close()
        if self.is_main and self.folder is not None:
            self._write_summary(end, training_time)

    def _write_summary(self, end: dict, training_time: float) -> None:
        from trainer_hooks.summary import build_summary, summary_text

        files = SessionFiles(self.session_id)
        summary = build_summary(self._start_record, end, training_time, self._comm_stats)
        try:
            (self.folder / files.summary_json).write_bytes(orjson.dumps(summary, option=orjson.OPT_INDENT_2))
            (self.folder / files.summary_txt).write_text(summary_text(summary), encoding="utf-8")
        except OSError as exc:
            print(f"logkit: cannot write the summary of {self.session_id}: {exc}", file=sys.stderr)


# -- facts about the process, gathered once at start -----------------------------------------
def _pid() -> int:
    import os

    return os.getpid()


def _versions() -> dict:
    from importlib import metadata

    out = {"python": platform.python_version()}
    for name in ("torch", "accelerate", "transformers", "peft", "bitsandbytes", "trl"):
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    torch = sys.modules.get("torch")
    out["cuda"] = getattr(getattr(torch, "version", None), "cuda", None) if torch else None
    out["nccl"] = None
    try:
        if torch is not None and torch.cuda.is_available():
            out["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception:
        pass
    return out


def _gpu_list() -> list[dict]:
    import torch

    gpus = []
    for i in range(torch.cuda.device_count()):
        props = torch.cuda.get_device_properties(i)
        gpus.append({"index": i, "name": props.name, "uuid": str(getattr(props, "uuid", "")),
                     "memory_total_mb": round(props.total_memory / 1e6, 1)})
    return gpus


def _model_gpu_count(model) -> int:
    if model is None:
        return 1
    try:
        return len({p.device.index for p in model.parameters() if p.device.type == "cuda"}) or 1
    except Exception:
        return 1


def _model_name(model) -> str | None:
    config = getattr(model, "config", None)
    name = getattr(config, "_name_or_path", None) or getattr(config, "name_or_path", None)
    return str(name) if name else type(model).__name__


def _model_info(model) -> dict:
    total = trainable = size = 0
    dtypes: Counter = Counter()
    trainable_bytes = 0
    for p in model.parameters():
        n = p.numel()
        total += n
        size += n * p.element_size()
        dtypes[str(p.dtype).replace("torch.", "")] += n
        if p.requires_grad:
            trainable += n
            trainable_bytes += n * p.element_size()
    quant = None
    qc = getattr(getattr(model, "config", None), "quantization_config", None)
    if qc is not None:
        quant = qc.to_dict() if hasattr(qc, "to_dict") else dict(qc)
        quant = {k: v for k, v in quant.items() if isinstance(v, (str, int, float, bool, type(None)))}
    return {
        "model_class": type(model).__name__,
        "parameters_total": total,
        "parameters_trainable": trainable,
        "trainable_percent": round(100.0 * trainable / total, 4) if total else None,
        "trainable_grad_bytes": trainable_bytes,
        "size_bytes_estimate": size,
        "dtypes": dict(dtypes),
        "quantization": quant,
    }

