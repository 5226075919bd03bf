"""The writer-thread half of the emitter: compact measurements in, full records out.

The training thread hands over a ``PendingStep`` per step and a few tuples per gradient-sync
bucket; this class, called on the writer thread, rounds them, derives the figures (averages,
ETA, throughput, bandwidth), keeps the performance window, the trends and the findings that
need history (slow steps, loss spikes), and returns the records to write, laid out by layouts
compiled from their specs. Its state is touched by the writer thread only.
"""

from __future__ import annotations

import math
from collections import deque
from types import MappingProxyType

from logkit.schema import bandwidth_mb_s, busbw_factor
from logkit.schema.records import ANOMALY, COLLECTIVE, COMMUNICATION, PERFORMANCE, STEP_PHASES, TRAINING_STEP
from logkit.schema.values import per_second, to_float
from trainer_hooks.findings import LossSpikeDetector, SlowStepDetector, trend
from trainer_hooks.layout import HEADER, layout, top_key
from trainer_hooks.settings import LogSettings
from trainer_hooks.steps import STEP_METRICS, PendingStep, step_metric_key
from trainer_hooks.writer import iso_timestamp

# The fields of the records written every step, in the order they are written.
STEP_FIELDS = (f"{HEADER} max_steps epoch local_rank step_time_s avg_step_time_s data_time_s eta_minutes "
               "estimated_completion loss learning_rate grad_norm **metrics samples_per_s tokens_per_s total_batch_size")
COMM_FIELDS = (f"{HEADER} op size_bytes duration_ms algbw_mb_s busbw_mb_s group_size bucket timing_source "
               "local_rank phase")
# a sharded model's step: one communication record, its collectives one object each (fewer records to write
# and read than one per collective: 8 or more a step under FSDP2)
STEP_COMM_FIELDS = f"{HEADER} timing_source local_rank collectives"
COLLECTIVE_FIELDS = "op size_bytes duration_ms algbw_mb_s busbw_mb_s group_size bucket phase"
PERF_FIELDS = f"{HEADER} window_steps avg_step_time_s throughput_samples_s total_batch_size peak_allocated_mb peak_reserved_mb"
PHASE_FIELDS = f"{HEADER} begin_clock_s compute_s first_ready_s sync_s buckets timing_source"

_NO_METRICS = MappingProxyType({})
# keys a step record gets only where the settings ask for them, after the others
_USAGE, _TRENDS, _LAYER_NORMS = (top_key(TRAINING_STEP, n) for n in ("resource_usage", "trends", "layer_grad_norms"))



def _measured(stats: CommStats, size: int, seconds: float, factor: float | None) -> tuple[float | None, float | None]:
    """A collective's algbw and busbw (MB/s; None where not finite or no bus factor), added to ``stats``:
    one computation for DDP buckets and sharded models' collectives alike."""
    algbw = bandwidth_mb_s(size, seconds) if seconds > 0 else None
    if algbw is not None and not math.isfinite(algbw):
        algbw = None
    busbw = algbw * factor if algbw is not None and factor is not None else None
    stats.add(size, seconds, algbw, busbw)
    return algbw, busbw

def _extra_metrics(extra: dict | None, logs: dict) -> dict | None:
    """``extra`` and the numbers of a trainer log other than the step's own metrics and its bookkeeping."""
    out = dict(extra or {})
    for key, value in logs.items():
        key = key if type(key) is str else str(key)
        if key in STEP_METRICS or not step_metric_key(key):  # the step's own fields, or no step metric
            continue
        number = to_float(value)
        if number is not None:
            out[key] = number
    return out or None


def _rounded(value, digits: int):
    return None if value is None else round(value, digits)


class _Window:
    """Running sums over the steps of one performance window (constant memory: at ``low`` the
    window is the whole run)."""

    __slots__ = ("steps", "time", "samples", "unknown_batches", "batches")

    def __init__(self) -> None:
        self.steps, self.time, self.samples, self.unknown_batches = 0, 0.0, 0, 0
        self.batches: set[int] = set()

    def add(self, step_time: float, batch: int | None) -> None:
        self.steps += 1
        self.time += step_time
        if batch:
            self.samples += batch
            if len(self.batches) < 2:  # only "one size or several" matters
                self.batches.add(batch)
        else:
            self.unknown_batches += 1


class CommStats:
    """One collective's totals for the summary. A bandwidth that is not known (no duration, an
    op without a bus factor) is left out of its average, never counted as 0. ``seconds`` sums the
    operations' durations (overlapping ones each counted); ``in_flight_s`` sums, per step whose
    operations were all timed, the wall time at least one was in flight (``in_flight_steps`` of them)."""

    __slots__ = ("count", "bytes", "seconds", "algbw_sum", "algbw_n", "busbw_sum", "busbw_n", "in_flight_s",
                 "in_flight_steps")

    def __init__(self) -> None:
        self.count = self.bytes = self.algbw_n = self.busbw_n = self.in_flight_steps = 0
        self.seconds = self.algbw_sum = self.busbw_sum = self.in_flight_s = 0.0

    def add(self, size: int, seconds: float, algbw: float | None, busbw: float | None) -> None:
        self.count += 1
        self.bytes += size
        self.seconds += seconds
        if algbw is not None:
            self.algbw_sum += algbw
            self.algbw_n += 1
        if busbw is not None:
            self.busbw_sum += busbw
            self.busbw_n += 1


class RecordBuilder:
    """Builds step, communication and performance records for one rank's stream.

    ``header``: the fields every record of this rank carries (``session_id``, ``rank``,
    ``world_size``, ``local_rank``), by field name.
    """

    def __init__(self, settings: LogSettings, header: dict, max_steps: int | None,
                 total_batch_size: int | None, sampler=None) -> None:
        self.settings = settings
        self.memory_device: int | None = None  # the rank's CUDA device index: its allocator's peaks (performance)
        self.max_steps = max_steps
        self.total_batch_size = total_batch_size
        self.sampler = sampler
        self.comm_stats: dict[str, CommStats] = {}
        self._per_op: dict[tuple, tuple] = {}
        self._window = _Window()
        self._slow = SlowStepDetector(settings.slow_step_factor)
        self._spike = LossSpikeDetector(settings.loss_spike_factor)
        self._recent = {"loss": deque(maxlen=5), "step_time": deque(maxlen=5), "memory": deque(maxlen=5)}
        self._last_step = 0
        rank = {k: header[k] for k in ("session_id", "rank", "world_size")}
        local_rank = header["local_rank"]
        self._step_record = layout(TRAINING_STEP, STEP_FIELDS, type=TRAINING_STEP.type, level="INFO",
                                   max_steps=max_steps, local_rank=local_rank, **rank)
        # DDP's gradient buckets are all-reduced from backward's hooks: their phase is backward
        self._comm_record = layout(COMMUNICATION, COMM_FIELDS, type=COMMUNICATION.type, level="INFO",
                                   local_rank=local_rank, phase="backward", **rank)
        self._step_comm_record = layout(COMMUNICATION, STEP_COMM_FIELDS, type=COMMUNICATION.type, level="INFO",
                                        local_rank=local_rank, **rank)
        self._collective = layout(COLLECTIVE, COLLECTIVE_FIELDS)
        self._perf_record = layout(PERFORMANCE, PERF_FIELDS, type=PERFORMANCE.type, level="INFO", **rank)
        self._phase_record = layout(STEP_PHASES, PHASE_FIELDS, type=STEP_PHASES.type, level="DEBUG", **rank)
        self._anomaly = layout(ANOMALY, HEADER, type=ANOMALY.type, level="WARNING", **rank)

    # -- steps -----------------------------------------------------------------------------
    def pending_step(self, raw: list) -> list[dict]:
        """``step`` of a step as the training thread hands it over: PendingStep's fields as a list (its
        trainer log, ``logs``, is sorted into ``extra_metrics`` only where the step gets a record)."""
        return self.step(PendingStep(*raw))

    def step(self, p: PendingStep) -> list[dict]:
        s = self.settings
        step, step_time = p.step, p.step_time
        self._last_step = step
        out = []
        slow = self._slow.check(step_time)
        if slow is not None:
            out.append(self._finding(slow, f"Slow training detected: {step_time:.1f}s per step", p, step))
        loss = p.loss
        if loss is not None and math.isfinite(loss):
            self._recent["loss"].append(loss)
            spike = self._spike.check(loss)
            if spike is not None:
                median = ANOMALY["median"].get(spike)
                out.append(self._finding(spike, f"Loss spike at step {step}: {loss:.4f} (recent median {median:.4f})",
                                         p, step))
        self._recent["step_time"].append(step_time)
        if step % s.step_records_every == 0 or step == self.max_steps:
            out.insert(0, self._step_record_of(p, loss))
        elif s.resource_usage_steps and step % s.resource_usage_steps == 0 and self.sampler is not None:
            # no record this step (low): the memory trend still sees the reading it would have had
            self._recent["memory"].append((self.sampler.resource_usage().get("memory") or {}).get("usage_percent"))
        self._window.add(step_time, p.batch)
        if s.performance_log_steps and self._window.steps >= s.performance_log_steps:
            out.extend(self.performance(p.wall, p.elapsed, step))
        return out

    def _step_record_of(self, p: PendingStep, loss: float | None) -> dict:
        """The ``training_step_complete`` record of ``p`` (built only for the steps that get one)."""
        s, step, step_time, batch = self.settings, p.step, p.step_time, p.batch
        remaining = (self.max_steps - step) if self.max_steps else None
        eta_min = p.avg_step_time * remaining / 60.0 if remaining is not None else None
        extra = p.extra_metrics
        if p.logs:
            extra = _extra_metrics(extra, p.logs)
        record = self._step_record(
            timestamp=p.wall, time_s=round(p.elapsed, 6), step=step, epoch=p.epoch,
            message=f"Step {step} completed" + (f" - Loss: {loss:.6f}" if loss is not None else ""),
            step_time_s=round(step_time, 6), avg_step_time_s=round(p.avg_step_time, 6),
            data_time_s=_rounded(p.data_time, 6), eta_minutes=_rounded(eta_min, 3),
            estimated_completion=iso_timestamp(p.wall + eta_min * 60) if eta_min is not None else None,
            # JSON has no NaN/Inf: they are written as null and reported by their own records
            loss=to_float(loss, finite=True), learning_rate=to_float(p.learning_rate, finite=True),
            grad_norm=to_float(p.grad_norm, finite=True),
            metrics={k: to_float(v, finite=True) for k, v in extra.items()} if extra else _NO_METRICS,
            samples_per_s=_rounded(per_second(batch or None, step_time), 4),
            tokens_per_s=_rounded(per_second(p.tokens or None, step_time), 2), total_batch_size=batch)
        if s.resource_usage_steps and step % s.resource_usage_steps == 0 and self.sampler is not None:
            usage = self.sampler.resource_usage()
            record[_USAGE] = usage
            self._recent["memory"].append((usage.get("memory") or {}).get("usage_percent"))
        if s.trends:
            record[_TRENDS] = {k: t for k, t in (
                ("loss_trend", trend(self._recent["loss"])),
                ("step_time_trend", trend(self._recent["step_time"])),
                ("memory_usage_trend", trend(self._recent["memory"])),
            ) if t is not None}
        norms = p.layer_norms
        if norms is not None:
            if isinstance(norms, tuple):  # (names, norms) as the training thread read them
                names, values = norms
                if not isinstance(values, list):  # a sharded model's whole norms, combined now (ShardNorms)
                    values = values.result()
                norms = None if values is None else {
                    name: round(n, 6) if math.isfinite(n) else None for name, n in zip(names, values, strict=True)}
            if norms is not None:
                record[_LAYER_NORMS] = norms
        return record

    def _finding(self, finding: dict, message: str, p: PendingStep, step: int) -> dict:
        """An ``anomaly`` record: this rank's header, then the finding (laid out by its spec already)."""
        record = self._anomaly(timestamp=p.wall, time_s=round(p.elapsed, 6), message=message, step=step)
        record.update(finding)
        return record

    def performance(self, wall: float, elapsed: float, step: int | None = None) -> list[dict]:
        """A ``performance`` record over the steps since the last one (``performance_log_steps``
        0: only the one at session end, over the whole run).

        Throughput needs the batch size of every step in the window; without it (a
        ``TrainingLogger`` given no batch size) both are None, never a made-up 0.
        """
        w, self._window = self._window, _Window()
        if not w.steps:
            return []
        known = w.unknown_batches == 0
        return [self._perf_record(
            timestamp=wall, time_s=round(elapsed, 6), message=f"Performance over {w.steps} steps",
            step=step if step is not None else self._last_step, window_steps=w.steps,
            avg_step_time_s=round(w.time / w.steps, 6),
            throughput_samples_s=_rounded(per_second(w.samples, w.time), 4) if known else None,
            total_batch_size=next(iter(w.batches)) if known and len(w.batches) == 1 else None,
            **self._memory_peaks(),
        )]

    def _memory_peaks(self) -> dict:
        """This rank's CUDA allocator peaks (MiB) on its device (``memory_device``, the training thread's:
        this thread's current device is not it); none on CPU. Host reads of the allocator's counters: no
        device synchronisation."""
        device, none = self.memory_device, {"peak_allocated_mb": None, "peak_reserved_mb": None}
        if device is None:
            return none
        try:
            import torch

            return {"peak_allocated_mb": round(torch.cuda.max_memory_allocated(device) / 2**20, 1),
                    "peak_reserved_mb": round(torch.cuda.max_memory_reserved(device) / 2**20, 1)}
        except Exception:
            return none

    # -- communication ------------------------------------------------------------------------
    def comm(self, wall: float, elapsed: float, items: list, timing_source: str, group_size: int,
             op: str = "gradient_sync") -> list[dict]:
        """One ``communication`` record per bucket: ``items`` are (step, bucket, bytes, seconds).
        busbw is null where the op has no bus factor (it is not algbw)."""
        out = []
        factor = busbw_factor(op, group_size)
        stats = self.comm_stats.get(op)
        if stats is None:
            stats = self.comm_stats[op] = CommStats()
        records = self.settings.communication_records
        time_s = round(elapsed, 6)
        for step, bucket, size, seconds in items:
            algbw, busbw = _measured(stats, size, seconds, factor)
            if records:
                out.append(self._comm_record(
                    timestamp=wall, time_s=time_s, step=step,
                    message=f"{op} bucket {bucket}: {size} bytes in {seconds * 1e3:.3f} ms",
                    op=op, size_bytes=size, duration_ms=round(seconds * 1e3, 6), algbw_mb_s=_rounded(algbw, 4),
                    busbw_mb_s=_rounded(busbw, 4), group_size=group_size, bucket=bucket, timing_source=timing_source))
        return out

    def collectives(self, wall: float, elapsed: float, items: list, timing_source: str, group_size: int) -> list[dict]:
        """One ``communication`` record per step of a sharded model's collectives, each collective an object
        of its ``collectives`` list: ``items`` are (step, unit, op, phase, bytes, seconds[, group size where
        each call has its own]); busbw by each op's bus factor ((n-1)/n for all-gather and reduce-scatter,
        2(n-1)/n for all-reduce, 1 for broadcast)."""
        per_op = self._per_op  # (op, group size) -> (bus factor, the op's totals): the same every step
        records = self.settings.communication_records
        collective = self._collective
        steps: dict[int, list] = {}  # step -> [its collectives' objects, bytes, seconds]
        for step, unit, op, phase, size, seconds, *own in items:
            n = own[0] if own and own[0] is not None else group_size
            known = per_op.get((op, n))
            if known is None:
                known = per_op[(op, n)] = (busbw_factor(op, n), self.comm_stats.setdefault(op, CommStats()))
            factor, stats = known
            algbw, busbw = _measured(stats, size, seconds, factor)
            if records:
                listed = steps.get(step)
                if listed is None:
                    listed = steps[step] = [[], 0, 0.0]
                listed[0].append(collective(op=op, size_bytes=size, duration_ms=round(seconds * 1e3, 6),
                                            algbw_mb_s=_rounded(algbw, 4), busbw_mb_s=_rounded(busbw, 4),
                                            group_size=n, bucket=unit, phase=phase))
                listed[1] += size
                listed[2] += seconds
        time_s = round(elapsed, 6)
        return [self._step_comm_record(
            timestamp=wall, time_s=time_s, step=step,
            message=f"Step {step}: {len(listed)} collectives, {size} bytes in {seconds * 1e3:.3f} ms",
            timing_source=timing_source, collectives=listed) for step, (listed, size, seconds) in steps.items()]

    def phases(self, wall: float, elapsed: float, items: list, timing_source: str, clock_offset: float,
               op: str = "gradient_sync") -> list[dict]:
        """One ``step_phases`` record per step of ``items`` (step, begin, compute_s, first_ready_s,
        sync_s, buckets[, in_flight_s]) that gets a step record (``step_records_every``); ``begin``
        goes on the job clock (minus ``clock_offset``). Every step's ``in_flight_s`` (the union of
        its buckets' spans) goes into ``op``'s totals for the summary."""
        stats = self.comm_stats.setdefault(op, CommStats())
        for item in items:
            if len(item) > 6 and item[6] is not None:
                stats.in_flight_s += item[6]
                stats.in_flight_steps += 1
        every = self.settings.step_records_every
        time_s = round(elapsed, 6)
        return [self._phase_record(
            timestamp=wall, time_s=time_s, step=step,
            message=f"Step {step}: gradients ready after {_ms(compute)} ms, last bucket synced in {_ms(sync)} ms",
            begin_clock_s=_rounded(begin - clock_offset if begin is not None else None, 6),
            compute_s=_rounded(compute, 6), first_ready_s=_rounded(first, 6), sync_s=_rounded(sync, 6),
            buckets=count, timing_source=timing_source)
            for step, begin, compute, first, sync, count, *_ in items
            if step % every == 0 or step == self.max_steps]


def _ms(seconds: float | None) -> str:
    return "?" if seconds is None else f"{seconds * 1e3:.1f}"
