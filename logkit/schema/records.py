"""The JSONL event stream: one ``RecordSpec`` per event type, one ``RecordField`` per key.

A field says once where a value lives in a record (``raw``, a key path: ``("timing",
"step_time_seconds")``), what logkit calls it (``name``: a frame column or a meta key, its unit
in the suffix), its type and unit. Everything else is derived from these declarations:

- the emitter lays out its records with ``spec.build(**values)`` (``trainer_hooks``);
- the fast JSONL reader's Arrow schema, the per-line reader's repair of a record and the
  mapping of both to frames (``logkit.ingest``) walk ``spec.frame_fields``;
- the frames' columns and dtypes (``logkit.schema.frames``);
- meta from ``session_start`` / ``session_end`` (``spec.read(record)``).

So a key renamed here is renamed on both halves, and a name used by hand elsewhere fails a test.

    >>> TRAINING_STEP.build(step=3, step_time_s=0.5, loss=1.25)
    {'step': 3, 'timing': {'step_time_seconds': 0.5}, 'metrics': {'loss': 1.25}}
    >>> TRAINING_STEP.read({"timing": {"step_time_seconds": 0.5}, "metrics": "oops"})["loss"] is None
    True
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field

from logkit.schema.gpu import DEVICE_IDS, DEVICE_METRICS, STATISTICS
from logkit.schema.values import as_float, as_int, as_text, check
from logkit.schema.vocab import ENDED, Mode

__all__ = [
    "SCHEMA_VERSION", "EventType", "EVENT_TYPES", "REQUIRED_KEYS", "RecordField", "F",
    "RecordSpec", "COMMON", "SESSION_ID", "SESSION_START", "SESSION_END", "SYSTEM_INFO", "MODEL_INFO", "DATASET_INFO",
    "TRAINING_STEP", "COMMUNICATION", "COLLECTIVE", "PERFORMANCE", "STEP_PHASES", "STALL", "GPU_SNAPSHOT", "GPU_DEVICE",
    "EVALUATION", "ANOMALY",
    "RESOURCE_WARNING", "NAN_DETECTED", "CHECKPOINT_SAVED", "EPOCH_COMPLETE", "ERROR", "BATCH_COMPLETE",
    "TRAINER_LOG", "TIMED_PHASE", "PHASE_BEGIN", "EVENT", "RECORD_SPECS", "FRAME_SPECS", "UNITS",
]

SCHEMA_VERSION = 1


class EventType:
    """The ``type`` of a JSONL record."""

    SESSION_START = "session_start"
    SYSTEM_INFO = "system_info"
    MODEL_INFO = "model_info"
    DATASET_INFO = "dataset_info"
    TRAINING_STEP = "training_step_complete"
    COMMUNICATION = "communication"
    PERFORMANCE = "performance"
    GPU_SNAPSHOT = "gpu_snapshot"
    EVALUATION = "evaluation"
    RESOURCE_WARNING = "resource_warning"
    ANOMALY = "anomaly"
    NAN_DETECTED = "nan_detected"
    CHECKPOINT_SAVED = "checkpoint_saved"
    EPOCH_COMPLETE = "epoch_complete"
    ERROR = "error"
    SESSION_END = "session_end"
    # where each synchronised step's time went (DDP with gradient sync timed), and a rank that stopped
    STEP_PHASES = "step_phases"
    STALL = "stall"
    # verbosity "ultra": every micro-batch of gradient accumulation, every log dict the trainer gives
    BATCH_COMPLETE = "batch_complete"
    TRAINER_LOG = "trainer_log"
    # the ledger of where the hours went: a stretch of the rank's time that is not a step
    TIMED_PHASE = "timed_phase"
    # a timed phase's start (work a rank may do alone: a rank that hangs inside it is seen there)
    PHASE_BEGIN = "phase_begin"


EVENT_TYPES: tuple[str, ...] = tuple(
    v for k, v in vars(EventType).items() if not k.startswith("_") and isinstance(v, str)
)


_READ = {float: as_float, int: as_int, str: as_text}
_DTYPES = {float: "float64", int: "Int64"}


@dataclass(frozen=True)
class RecordField:
    """One key of a record: ``raw`` its path in the JSON object, ``name`` what logkit calls it.

    ``frame``: the value is a column of its record's frame (False: it stays in the stream and in
    meta, e.g. the ETA). ``store``: how a text column is held in the frame ("object", "str":
    pandas' arrow strings, "category": few distinct values). ``type`` ``dict``/``list``/``object``:
    kept as written (a config, a version table).
    """

    name: str
    raw: tuple[str, ...]
    type: type = float
    unit: str = ""
    doc: str = ""
    frame: bool = True
    store: str = "object"

    @property
    def dtype(self) -> str:
        """The frame dtype of the column."""
        return _DTYPES.get(self.type, self.store)

    def get(self, record: dict):
        """The raw value at ``raw`` (None where a group is missing or not an object)."""
        value = record
        for key in self.raw:
            if not isinstance(value, dict):
                return None
            value = value.get(key)
        return value

    def read(self, record: dict):
        """The value, as its type reads it (a wrong type is None, never an error)."""
        value = self.get(record)
        convert = _READ.get(self.type)
        if convert is not None:
            return convert(value)
        if self.type in (dict, list):
            return value if isinstance(value, self.type) else None
        return value


def F(name: str, raw: str | tuple[str, ...] | None = None, type: type = float, unit: str = "", doc: str = "",
      frame: bool = True, store: str = "object") -> RecordField:  # noqa: A002 - reads as the declaration
    """A ``RecordField``; ``raw`` defaults to the name, a dotted string is a nested path."""
    path = (name,) if raw is None else tuple(raw.split(".")) if isinstance(raw, str) else raw
    return RecordField(name, path, type, unit, doc, frame, store)


@dataclass(frozen=True)
class RecordSpec:
    """The fields of one event type (after the ``COMMON`` ones every record has), and the frame its
    records go to (``None``: the events frame; ``"meta"``: session meta; ``"evals"``: one row per
    metric). ``items``: the spec of the objects of a list field (``gpu_snapshot``'s devices), a row each;
    ``items_optional``: a record without that list is a row itself (``communication``: a DDP bucket's
    record, or a sharded step's with its collectives)."""

    type: str
    frame: str | None
    fields: tuple[RecordField, ...]
    doc: str = ""
    items: RecordSpec | None = None
    items_key: str | None = None
    items_optional: bool = False  # a record without the list is one item itself, its fields at its top
    _by_name: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        names = [f.name for f in self.all_fields]
        if len(set(names)) != len(names):
            raise ValueError(f"{self.type}: a field name is declared twice")
        self._by_name.update({f.name: f for f in self.all_fields})

    @property
    def all_fields(self) -> tuple[RecordField, ...]:
        own = {f.name for f in self.fields}
        return tuple(f for f in COMMON if f.name not in own) + self.fields if self.type else self.fields

    @property
    def frame_fields(self) -> tuple[RecordField, ...]:
        return tuple(f for f in self.all_fields if f.frame)

    def __getitem__(self, name: str) -> RecordField:
        return self._by_name[name]

    def __iter__(self) -> Iterator[RecordField]:
        return iter(self.all_fields)

    def build(self, **values) -> dict:
        """A record (or its part) laid out from field names: each value at its field's key path,
        in the order given. A name the spec does not declare is an error: the contract is here."""
        out: dict = {}
        for name, value in values.items():
            try:
                path = self._by_name[name].raw
            except KeyError:
                raise KeyError(f"{self.type or 'record'} has no field {name!r}") from None
            target = out
            for key in path[:-1]:
                target = target.setdefault(key, {})
            target[path[-1]] = value
        return out

    def read(self, record: dict, note=None) -> dict:
        """Every field of the spec, by name, as its type reads it; ``note(text)``: told of each value there
        that its type does not read (a count written as text, an integer beyond 64 bits)."""
        out = {f.name: f.read(record) for f in self.all_fields}
        if note is not None:
            for f in self.all_fields:
                raw = f.get(record)
                if out[f.name] is None and raw is not None:
                    note(f"{'.'.join(f.raw)}: {check(raw, f.type) or f'not read ({raw!r:.40})'}: left unknown")
        return out


# ---------------------------------------------------------------------------------------
# The keys every record carries (``step`` where a step applies)
# ---------------------------------------------------------------------------------------
COMMON: tuple[RecordField, ...] = (
    F("timestamp", type=str, unit="ISO 8601", doc="wall clock, microseconds and UTC offset", frame=False),
    F("time_s", "elapsed_s", float, "s", "monotonic seconds since the rank started logging (durations "
                                          "come from it, never from wall clocks of two hosts)"),
    F("type", type=str, doc="the event type", frame=False),
    F("level", type=str, doc="DEBUG, INFO, WARNING, ERROR"),
    F("message", type=str, doc="one line for a person"),
    F("session_id", type=str, frame=False),
    F("rank", type=int, doc="global rank of the writing process"),
    F("world_size", type=int, frame=False),
    F("step", type=int, doc="optimizer step, where a step applies"),
)
REQUIRED_KEYS: tuple[str, ...] = tuple(f.raw[0] for f in COMMON if f.name != "step")
SESSION_ID: RecordField = next(f for f in COMMON if f.name == "session_id")

# ---------------------------------------------------------------------------------------
# Event types
# ---------------------------------------------------------------------------------------
_X = dict(frame=False)  # in the record, not a frame column

SESSION_START = RecordSpec(EventType.SESSION_START, "meta", (
    F("mode", type=str, doc=", ".join(Mode)),
    F("local_rank", type=int), F("hostname", type=str), F("pid", type=int), F("backend", type=str),
    F("device", type=str), F("mixed_precision", type=str),
    F("model", "model_name", str, doc="the model's name or path"),
    F("gpu_count", type=int), F("per_device_batch_size", type=int), F("gradient_accumulation_steps", type=int),
    F("total_batch_size", type=int, doc="samples per optimizer step, all ranks and accumulation together"),
    F("max_steps", type=int), F("verbosity", type=str), F("settings", type=dict), F("config", type=dict),
    F("versions", type=dict, doc="python, torch, accelerate, transformers, cuda, nccl"),
    F("gpus", type=list, doc="[{index, name, uuid, memory_total_mb}]"),
    F("requested_session_id", type=str, doc="the id the run asked for, where its own differs (not a safe "
                                            "folder name, or another run's streams are under it)"),
    F("clock", type=str, doc="the clock of the *_clock_s fields: the host's CLOCK_MONOTONIC (one clock for "
                             "every process of a host) minus clock_offset_s"),
    F("clock_offset_s", unit="s", doc="this host's CLOCK_MONOTONIC minus rank 0's host's, measured at start "
                                      "(0 on rank 0's host): *_clock_s of all ranks are on one job clock"),
    F("clock_offset_uncertainty_s", unit="s", doc="half the spread of the offset over the measuring rounds"),
    F("strategy", type=str, doc="how the model is wrapped for data parallelism: ddp, fsdp1, fsdp2, deepspeed, none"),
    F("strategy_facts", type=dict, doc="the wrapping's facts: fsdp units, sharding_strategy or reshard_after_forward, "
                                       "offload, param_dtype / reduce_dtype, shard_group_size (ddp: group_size, "
                                       "bucket_cap_mb; deepspeed: zero_stage)"),
    F("process_group", type=str, doc="formed: the rank is in a process group training uses; none: none was "
                                     "initialised; unused: one was, but training does not use it (accelerate's "
                                     "DistributedType.NO): without one the process is rank 0 of a world of 1"),
    F("launcher", type=dict, doc="where a launcher started several processes: {name (torchrun, accelerate launch, "
                                 "mpirun, srun, environment), world_size, rank, local_rank, master} as it told "
                                 "this process"),
    F("timing_source", type=str, doc="how collectives are timed: ddp_comm_hook, fsdp2_comm, torch_distributed "
                                     "(torch.distributed's collective functions wrapped: FSDP1, DeepSpeed, any "
                                     "other), or none (timing_note says why)"),
    F("timing_note", type=str, doc="why collectives are not timed (timing_source none)"),
), "one per rank, first: who, where, with what")

SESSION_END = RecordSpec(EventType.SESSION_END, "meta", (
    F("status", type=str, doc=", ".join(ENDED)),
    F("duration_s", unit="s", doc="from the rank's first record to its end"),
    F("total_steps", type=int), F("steps_logged", type=int), F("final_loss"),
    F("training_time_s", unit="s", doc="sum of optimizer-step times"),
    F("samples_seen", type=int), F("reason", type=str), F("comm_timings_dropped", type=int),
    F("phase", type=str, doc="what the rank was doing when it ended (a failed or interrupted run): data, "
                             "forward_backward, collective (in a sharded model's collective: phase_detail "
                             "names it), gradient_sync, optimizer; step is the step it was in"),
    F("phase_detail", type=str, doc="the gradient bucket last launched, and how many of the step's were"),
    F("clock_s", unit="s", doc="when, on the job clock"),
), "one per rank, last")

SYSTEM_INFO = RecordSpec(EventType.SYSTEM_INFO, "meta", (), "host facts (platform, CPUs, memory, disk)")
MODEL_INFO = RecordSpec(EventType.MODEL_INFO, "meta", (
    F("parameters_total", type=int), F("parameters_trainable", type=int),
), "parameter counts, size estimate, dtypes, quantization")
DATASET_INFO = RecordSpec(EventType.DATASET_INFO, "meta", (), "dataset size and sample shape")

TRAINING_STEP = RecordSpec(EventType.TRAINING_STEP, "steps", (
    F("max_steps", type=int, **_X),
    F("epoch"),
    F("local_rank", type=int, **_X),
    F("step_time_s", "timing.step_time_seconds", unit="s",
      doc="wall time of one optimizer step, previous step end to this step end"),
    F("avg_step_time_s", "timing.avg_step_time_seconds", unit="s", doc="mean step time so far", **_X),
    F("data_time_s", "timing.data_time_seconds", unit="s",
      doc="previous step end to this step's start (data loading and host work)"),
    F("eta_minutes", "timing.eta_minutes", unit="min", **_X),
    F("estimated_completion", "timing.estimated_completion", str, "ISO 8601", **_X),
    F("loss", "metrics.loss"),
    F("learning_rate", "metrics.learning_rate"),
    F("grad_norm", "metrics.grad_norm"),
    F("samples_per_s", "metrics.samples_per_second", unit="samples/s",
      doc="whole job (all ranks): total_batch_size / step_time"),
    F("tokens_per_s", "metrics.tokens_per_second", unit="tokens/s", doc="whole job"),
    F("total_batch_size", "metrics.total_batch_size", int, "samples",
      doc="samples per optimizer step, all ranks and accumulation steps together"),
    F("resource_usage", type=dict, doc="cpu{}, memory{}, gpu{devices[]}: the sampler's latest reading", **_X),
    F("trends", type=dict, doc="loss, step time and memory: current, mean of the last 5, direction", **_X),
    F("layer_grad_norms", type=dict, doc="per layer (ultra)", **_X),
    F("metrics", type=dict, doc="the group of the metrics.* fields, with any other number the trainer logged "
                                "(under the trainer's name)", **_X),
), "one per optimizer step")

# One collective: the fields a ``communication`` record has at its top (a DDP bucket's, one record each) or
# in each object of its ``collectives`` list (a sharded model's step: one record for the step's collectives).
_COLLECTIVE_FIELDS = (
    F("op", type=str, doc="gradient_sync, allreduce, broadcast, all_gather, reduce_scatter, ...", store="str"),
    F("size_bytes", type=int, unit="bytes", doc="nccl-tests' size: an all-gather's whole output, a reduce-scatter's "
                                                "whole input (n x the padded shard), an all-reduce's buffer"),
    F("duration_ms", unit="ms"),
    F("algbw_mb_s", unit="MB/s", doc="10^6 bytes/s: bytes moved by one rank / duration"),
    F("busbw_mb_s", unit="MB/s", doc="algbw x the op's bus factor (2(n-1)/n for all-reduce)"),
    F("group_size", type=int, doc="ranks in the collective"),
    F("bucket", type=int, doc="DDP bucket index, or the FSDP unit (parameter group) the collective is of"),
)
_PHASE = F("phase", type=str, doc="forward, backward or optimizer: when a sharded model's collective ran (all_gather "
                                  "in forward, and in backward where the unit resharded after forward; "
                                  "reduce_scatter in backward; after the step's last backward one: optimizer)",
           store="category")
COLLECTIVE = RecordSpec("", "comm", (*_COLLECTIVE_FIELDS, _PHASE),
                        "one collective of a communication record's collectives[]: a row of the comm frame")

COMMUNICATION = RecordSpec(EventType.COMMUNICATION, "comm", (
    *_COLLECTIVE_FIELDS,
    F("timing_source", type=str, doc="cuda_event or wall", store="category"),
    F("local_rank", type=int, **_X),
    _PHASE,
    F("collectives", type=list, doc="a sharded model's step: its collectives, one object each (the fields above, "
                                    "from op to phase; see communication collectives[]), in one record", **_X),
), "one per gradient-sync bucket, or one per step holding its collectives (a sharded model: collectives[])",
    items=COLLECTIVE, items_key="collectives", items_optional=True)

PERFORMANCE = RecordSpec(EventType.PERFORMANCE, "perf", (
    F("window_steps", type=int),
    F("avg_step_time_s", unit="s"),
    F("throughput_samples_s", unit="samples/s"),
    F("total_batch_size", type=int),
    F("peak_allocated_mb", unit="MiB", doc="the rank's CUDA allocator: peak memory allocated to tensors since the "
                                           "start (torch.cuda.max_memory_allocated; null on CPU)"),
    F("peak_reserved_mb", unit="MiB", doc="peak memory the allocator reserved from the GPU since the start "
                                          "(torch.cuda.max_memory_reserved; null on CPU)"),
), "over the last window of steps")

STEP_PHASES = RecordSpec(EventType.STEP_PHASES, "phases", (
    F("begin_clock_s", unit="s", doc="the step's start on the job clock (session_start's clock)"),
    F("compute_s", unit="s", doc="step start to the last gradient bucket ready: forward and backward "
                                 "(device time where timing_source is cuda_event); FSDP: to the last "
                                 "reduce-scatter's launch, less the collectives' time before it"),
    F("first_ready_s", unit="s", doc="step start to the first gradient bucket ready"),
    F("sync_s", unit="s", doc="the last bucket's all-reduce, launch to completion: the gradient sync after "
                              "backward, its wait for the last rank to arrive included; FSDP: the time in "
                              "the step's all-gathers and reduce-scatters (their union), where an early rank "
                              "waits for the last"),
    F("buckets", type=int, doc="gradient buckets synchronised in the step (FSDP: reduce-scatters)"),
    F("timing_source", type=str, doc="cuda_event or wall", store="category"),
), "one per synchronised step, when its timings are read (a GPU's a step or two later)")

# A device of a gpu_snapshot: its ids, then each metric of ``gpu.DEVICE_METRICS`` (the interval mean),
# then the interval's extremes of the aggregated ones.
GPU_DEVICE = RecordSpec("", "gpu", (
    *(F(i.name, i.key, i.type, doc=i.doc, frame=i.frame) for i in DEVICE_IDS),
    *(F(m.column, m.key, unit=m.unit, doc=m.doc, frame=m.frame) for m in DEVICE_METRICS),
    *(F(m.column + s, m.key + s, unit=m.unit, doc=f"the interval's {'minimum' if s == '_min' else 'maximum'}",
        frame=False) for m in DEVICE_METRICS if m.aggregate for s in STATISTICS),
), "one device of a gpu_snapshot (interval means; _min and _max beside each)")

GPU_SNAPSHOT = RecordSpec(EventType.GPU_SNAPSHOT, "gpu", (
    F("host", "hostname", str, store="category"),
    F("devices", type=list, **_X),
    F("interval_s", unit="s", **_X),
    F("samples", type=int, **_X),
    F("resource_usage", type=dict, **_X),
    F("notes", type=list, doc="monitor_gpu: what degraded in sampling, each said once", **_X),
), "one per sampler interval: a row per device", items=GPU_DEVICE, items_key="devices")

EVALUATION = RecordSpec(EventType.EVALUATION, "evals", (
    F("metrics", type=dict, doc="{eval_loss, eval_perplexity, ...}: one evals row per metric", **_X),
), "an evaluation's metrics")

_FINDING = (
    F("subkind", "kind", str, doc="memory_high, gpu_util_low, slow_step, loss_spike, nan_loss, ..."),
    F("value", doc="the measured value"),
    F("threshold", doc="the limit it crossed"),
)
_FINDING_DETAIL = (
    F("median", doc="the recent median the value was compared with", **_X),
    F("gpu", type=int, doc="CUDA ordinal of the GPU the finding is about", **_X),
    F("tensor", type=str, doc="the parameter whose gradient norm it is", **_X),
    F("loss", type=str, doc="the logged loss, as text (NaN and Inf are no JSON numbers)", **_X),
)
ANOMALY = RecordSpec(EventType.ANOMALY, None, _FINDING + _FINDING_DETAIL, "a finding of the emitter's checks")
RESOURCE_WARNING = RecordSpec(EventType.RESOURCE_WARNING, None, _FINDING + _FINDING_DETAIL,
                              "a finding about resources")
NAN_DETECTED = RecordSpec(EventType.NAN_DETECTED, None, (
    F("subkind", "kind", str), F("tensors", type=list, doc="[{name, kind, shape, nan_count, inf_count, numel}]", **_X),
    F("dump_path", type=str, **_X),
    F("loss", type=str, doc="the logged loss, as text", **_X), F("affected", type=list, doc="the tensors' names", **_X),
    F("dump_truncated", type=bool, **_X), F("dump_bytes", type=int, unit="bytes", **_X),
), "the non-finite tensors of a step, and where they were dumped")
CHECKPOINT_SAVED = RecordSpec(EventType.CHECKPOINT_SAVED, None, (
    F("path", type=str, **_X), F("size_bytes", type=int, unit="bytes", **_X)))
EPOCH_COMPLETE = RecordSpec(EventType.EPOCH_COMPLETE, None, (F("epoch", **_X),))
ERROR = RecordSpec(EventType.ERROR, None, (
    F("exception_type", type=str, **_X), F("traceback", type=str, **_X), F("subkind", "kind", str),
    F("signal", type=str, doc="the signal that ended the process (SIGTERM, SIGINT)", **_X),
    F("phase", type=str, doc="what the rank was doing (as session_end's); step is the step it was in"),
    F("phase_detail", type=str), F("clock_s", unit="s", doc="when, on the job clock")))
STALL = RecordSpec(EventType.STALL, None, (
    F("phase", type=str, doc="data, forward_backward, collective (in a sharded model's collective), "
                             "gradient_sync or optimizer"),
    F("phase_detail", type=str), F("clock_s", unit="s", doc="when, on the job clock"),
    F("value", doc="seconds since the rank's last step ended"),
    F("threshold", doc="the limit: max(stall_factor x the median step, stall_min_s)"),
    F("stack", type=str, doc="the training thread's Python stack"),
), "no step ended for longer than the limit: where the training thread is (training goes on)")
BATCH_COMPLETE = RecordSpec(EventType.BATCH_COMPLETE, None, (
    F("micro_batch", type=int, **_X), F("duration_s", unit="s", **_X)))
TRAINER_LOG = RecordSpec(EventType.TRAINER_LOG, None, (F("logs", type=dict, **_X),))
# The ledger (where a session's hours went): written when the stretch ends, so time_s is its end
TIMED_PHASE = RecordSpec(EventType.TIMED_PHASE, None, (
    F("phase", type=str, doc="what the rank did: eval (an evaluation), save (a checkpoint), logging (the logger's "
                             "own time on the training thread), startup (the process's start to the logger's "
                             "origin: imports, model load, quantisation), waiting_for_ranks (the logger's start "
                             "waiting for the last rank), or a name of the training code's own"),
    F("phase_detail", type=str, doc="startup: where the process start was read; logging: start or end (one "
                                    "stretch), between_steps or within_steps (the sum of many short calls there)"),
    F("duration_s", unit="s", doc="how long it took; it ended at time_s"),
    F("clock_s", unit="s", doc="when it ended, on the job clock"),
), "a timed stretch of a rank's time outside the steps (evaluation, checkpoint saving, start-up, logging)")
PHASE_BEGIN = RecordSpec(EventType.PHASE_BEGIN, None, (
    F("phase", type=str, doc="the phase that began: eval, save, or a name of the training code's own (its "
                             "timed_phase record follows when it ends)"),
    F("clock_s", unit="s", doc="when it began, on the job clock"),
), "a timed phase began (``phase()`` of the loop helper): a rank that never ends it, hung while the others wait "
   "in a collective, is seen inside it")
# Any other record goes to the events frame as this (its ``type`` is the event's kind).
EVENT = RecordSpec("", None, (
    F("time_s", "elapsed_s"), F("rank", type=int), F("level", type=str),
    F("kind", "type", str, doc="the record's type"), F("message", type=str), F("step", type=int), *_FINDING,
    F("status", type=str), F("phase", type=str), F("phase_detail", type=str), F("clock_s", unit="s"),
    F("stack", type=str), F("duration_s", unit="s"),
), "a row of the events frame")

RECORD_SPECS: dict[str, RecordSpec] = {s.type: s for s in (
    SESSION_START, SESSION_END, SYSTEM_INFO, MODEL_INFO, DATASET_INFO, TRAINING_STEP, COMMUNICATION,
    PERFORMANCE, STEP_PHASES, GPU_SNAPSHOT, EVALUATION, ANOMALY, RESOURCE_WARNING, NAN_DETECTED, CHECKPOINT_SAVED,
    EPOCH_COMPLETE, ERROR, STALL, BATCH_COMPLETE, TRAINER_LOG, TIMED_PHASE, PHASE_BEGIN)}
# The records that fill a frame of their own, by frame (every other record is an event).
FRAME_SPECS: dict[str, RecordSpec] = {"steps": TRAINING_STEP, "comm": COMMUNICATION, "perf": PERFORMANCE,
                                      "phases": STEP_PHASES, "gpu": GPU_SNAPSHOT}

# Units of every field that has one, by its JSONL key (the contract's prose form).
UNITS: dict[str, str] = {
    f.raw[-1]: f"{f.unit}: {f.doc}" if f.doc else f.unit
    for spec in (*RECORD_SPECS.values(), GPU_DEVICE) for f in spec.all_fields if f.unit
}
