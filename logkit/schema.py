"""The contract between the emitter (``trainer_hooks``) and the parsers (``logkit.ingest``).

Everything LOG_FORMATS.md defines lives here, once: event types, the keys every record
carries, field units, the frames the parsers return, the session file names, and, for
every kind of text line, its template beside the pattern that reads it back.

Standard library only: the training side imports this module too.

Example::

    >>> line = COMMUNICATION.format(op="gradient_sync", rank=0, size_mb=45.67,
    ...                             duration_ms=12.34, bandwidth_mb_s=3701.46)
    >>> line
    'Communication | gradient_sync | Rank 0 | Size: 45.67MB | Duration: 12.34ms | Bandwidth: 3701.46MB/s'
    >>> COMMUNICATION.parse(line)["size_mb"]
    45.67
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "SCHEMA_VERSION",
    "EventType",
    "EVENT_TYPES",
    "REQUIRED_KEYS",
    "Mode",
    "Status",
    "UNITS",
    "FRAME_COLUMNS",
    "SessionFiles",
    "session_files",
    "MB",
    "busbw_factor",
    "bandwidth_mb_s",
    "LineKind",
    "LINE_KINDS",
    "MESSAGE_KINDS",
    "MAIN_LINE",
    "PROCESS_LINE",
    "STEP_LINE",
    "METRICS_LINE",
    "BULLET_LINE",
    "HEADER_FIELD",
    "MULTIGPU_STEP",
    "COMMUNICATION",
    "PERFORMANCE",
    "GPU_UTIL_LOW",
    "SLOW_STEP",
    "SECTION_LINE",
    "NAN_RULE",
    "NAN_TITLE",
    "NAN_MORE",
    "NAN_DUMP",
    "BLOCK_KINDS",
    "parse_message",
]

SCHEMA_VERSION = 1

# SI megabyte: text lines say MB and MB/s in 10^6 bytes, as nccl-tests does.
MB = 1_000_000


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
    # verbosity "ultra": every micro-batch of gradient accumulation, every log dict the trainer gives
    BATCH_COMPLETE = "batch_complete"
    TRAINER_LOG = "trainer_log"


EVENT_TYPES: tuple[str, ...] = tuple(
    v for k, v in vars(EventType).items() if not k.startswith("_") and isinstance(v, str)
)

# Keys every JSONL record carries; ``step`` is added wherever a step applies.
REQUIRED_KEYS: tuple[str, ...] = (
    "timestamp",
    "elapsed_s",
    "type",
    "level",
    "message",
    "session_id",
    "rank",
    "world_size",
)


class Mode:
    SINGLE_GPU = "SINGLE-GPU"
    MULTI_GPU = "MULTI-GPU"
    CPU = "CPU"
    MULTI_CPU = "MULTI-CPU"


class Status:
    COMPLETED = "completed"
    FAILED = "failed"
    INTERRUPTED = "interrupted"


# Units of the numeric fields whose name does not already say it.
UNITS: dict[str, str] = {
    "elapsed_s": "s (monotonic, since the rank started logging)",
    "size_bytes": "bytes",
    "duration_ms": "ms",
    "algbw_mb_s": "MB/s (10^6 bytes/s): bytes moved by one rank / duration",
    "busbw_mb_s": "MB/s (10^6 bytes/s): algbw x bus factor (2(n-1)/n for all-reduce)",
    "step_time_seconds": "s, wall time of one optimizer step, previous step end to this step end",
    "data_time_seconds": "s, previous step end to this step's start (data loading and host work)",
    "samples_per_second": "samples/s over the whole job (all ranks): total_batch_size / step_time",
    "tokens_per_second": "tokens/s over the whole job",
    "total_batch_size": "samples per optimizer step, all ranks and accumulation steps together",
    "memory_used_mb": "MB (10^6 bytes)",
    "memory_total_mb": "MB (10^6 bytes)",
    "duration_s": "s",
    "duration_seconds": "s",
}

# Columns of the frames ``logkit.load_session`` returns (more may follow; absent values are NaN).
FRAME_COLUMNS: dict[str, tuple[str, ...]] = {
    "steps": (
        "rank", "step", "time_s", "loss", "learning_rate", "grad_norm", "step_time_s",
        "samples_per_s", "tokens_per_s", "total_batch_size", "epoch",
    ),
    "comm": (
        "rank", "step", "op", "size_bytes", "duration_ms", "algbw_mb_s", "busbw_mb_s",
        "group_size", "source",
    ),
    "perf": ("rank", "step", "avg_step_time_s", "throughput_samples_s", "total_batch_size"),
    "gpu": (
        "time_s", "host", "gpu", "utilization_pct", "memory_used_mb", "memory_total_mb",
        "power_w", "temperature_c",
    ),
    "evals": ("step", "name", "value"),
    "events": ("time_s", "rank", "level", "kind", "message", "source"),
    "diagnostics": ("file", "line", "reason", "text"),
}


@dataclass(frozen=True)
class SessionFiles:
    """File names of one session folder (LOG_FORMATS.md, 'One training session on disk')."""

    session_id: str

    def _name(self, suffix: str) -> str:
        return f"{self.session_id}_{suffix}"

    @property
    def main_log(self) -> str:
        return self._name("main.log")

    @property
    def multigpu_log(self) -> str:
        return self._name("multigpu.log")

    @property
    def performance_log(self) -> str:
        return self._name("performance.log")

    @property
    def errors_log(self) -> str:
        return self._name("errors.log")

    @property
    def summary_json(self) -> str:
        return self._name("summary.json")

    @property
    def summary_txt(self) -> str:
        return self._name("summary.txt")

    def rank_jsonl(self, rank: int) -> str:
        return self._name(f"rank{rank}.jsonl")


def session_files(session_id: str) -> SessionFiles:
    return SessionFiles(session_id)


# A rank stream's name: <session_id>_rank<N>.jsonl
RANK_JSONL_RE = re.compile(r"^(?P<session_id>.+)_rank(?P<rank>\d+)\.jsonl(?:\.gz)?$")
SUMMARY_JSON_RE = re.compile(r"^(?P<session_id>.+)_summary\.json$")


def busbw_factor(op: str, n: int) -> float:
    """Bus-bandwidth factor of a collective over ``n`` ranks (the nccl-tests convention).

    >>> busbw_factor("allreduce", 2), busbw_factor("allgather", 4), busbw_factor("broadcast", 8)
    (1.0, 0.75, 1.0)
    """
    if n <= 1:
        return 1.0 if op in ("broadcast", "reduce") else 0.0
    if op in ("gradient_sync", "allreduce", "all_reduce"):
        return 2.0 * (n - 1) / n
    if op in ("allgather", "all_gather", "reduce_scatter", "reducescatter", "alltoall", "all_to_all"):
        return (n - 1) / n
    return 1.0


def bandwidth_mb_s(size_bytes: float, duration_s: float) -> float:
    """algbw in MB/s (10^6 bytes/s); NaN when the duration is not positive."""
    if duration_s <= 0:
        return float("nan")
    return size_bytes / MB / duration_s


# ---------------------------------------------------------------------------------------
# Text lines: a template beside its pattern, one object per kind.
# ---------------------------------------------------------------------------------------

_FLOAT = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|NaN|Inf|infinity)"


@dataclass(frozen=True)
class Field:
    """One value in a line: how it is written (``spec``) and read back (``convert``)."""

    convert: Callable[[str], object]
    spec: str = ""  # format spec used by the template, e.g. ".4f"; "" = str()

    def canonical(self, value: object) -> object:
        """The value as the line carries it: rounded to what the template writes."""
        if self.convert is float:
            v = float(value)  # type: ignore[arg-type]
            if math.isnan(v) or math.isinf(v):
                return v
            return float(format(v, self.spec)) if self.spec else v
        return self.convert(format(value, self.spec) if self.spec else str(value))


@dataclass(frozen=True)
class LineKind:
    """A kind of text line: its template (``str.format`` syntax) beside the pattern reading it.

    ``format(**values)`` writes a line, ``parse(line)`` gives the values back as Python
    objects (or ``None`` when the line is of another kind). Round trip:
    ``parse(format(**v)) == {k: fields[k].canonical(v[k])}``.
    """

    name: str
    files: tuple[str, ...]
    template: str
    pattern: re.Pattern[str]
    fields: dict[str, Field] = field(default_factory=dict)
    example: str = ""

    def format(self, **values: object) -> str:
        return self.template.format(**values)

    def parse(self, line: str) -> dict[str, object] | None:
        m = self.pattern.match(line)
        if m is None:
            return None
        out: dict[str, object] = {}
        for key, text in m.groupdict().items():
            if text is None:
                out[key] = None
                continue
            f = self.fields.get(key)
            out[key] = f.convert(text) if f else text
        return out


def _kind(name, files, template, pattern, fields, example="") -> LineKind:
    return LineKind(name, tuple(files), template, re.compile(pattern), fields, example)


# main.log: "HH:MM:SS | LEVEL | message" (LEVEL left-aligned, width 5)
MAIN_LINE = _kind(
    "main_line",
    ["main"],
    "{time} | {level:<5} | {message}",
    r"^(?P<time>\d{2}:\d{2}:\d{2}) \| (?P<level>[A-Z]+)\s*\| (?P<message>.*)$",
    {"time": Field(str), "level": Field(str), "message": Field(str)},
    "14:30:22 | INFO  | Session ID: training_20241206_143022",
)

# multigpu.log / performance.log: "YYYY-MM-DD HH:MM:SS | LEVEL(8) | PROCESS(12) | message"
PROCESS_LINE = _kind(
    "process_line",
    ["multigpu", "performance"],
    "{datetime} | {level:<8} | {process:<12} | {message}",
    r"^(?P<datetime>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?) \| (?P<level>[A-Z]+)\s*"
    r"\| (?P<process>\S+)\s*\| (?P<message>.*)$",
    {"datetime": Field(str), "level": Field(str), "process": Field(str), "message": Field(str)},
    "2024-12-06 14:30:25 | INFO     | MainProcess  | Distributed backend: nccl",
)

# main.log step line (unprefixed, as in seed 000)
STEP_LINE = _kind(
    "step_line",
    ["main"],
    "Step {step:>4}/{max_steps} ({percent:4.1f}%) | Loss: {loss:.4f} | LR: {learning_rate:.2e}"
    " | Speed: {steps_per_second:.1f} steps/s | ETA: {eta_minutes:.1f}min",
    rf"^Step\s+(?P<step>\d+)/(?P<max_steps>\d+)\s+\(\s*(?P<percent>{_FLOAT})%\)"
    rf" \| Loss: (?P<loss>{_FLOAT}) \| LR: (?P<learning_rate>{_FLOAT})"
    rf" \| Speed: (?P<steps_per_second>{_FLOAT}) steps/s \| ETA: (?P<eta_minutes>{_FLOAT})min\s*$",
    {
        "step": Field(int, "d"),
        "max_steps": Field(int, "d"),
        "percent": Field(float, ".1f"),
        "loss": Field(float, ".4f"),
        "learning_rate": Field(float, ".2e"),
        "steps_per_second": Field(float, ".1f"),
        "eta_minutes": Field(float, ".1f"),
    },
    "Step   50/1000 ( 5.0%) | Loss: 2.1234 | LR: 1.50e-04 | Speed: 2.5 steps/s | ETA: 6.3min",
)

# "  └─ Metrics: step_duration: 0.400, samples_per_second: 5.0"
METRICS_LINE = _kind(
    "metrics_line",
    ["main"],
    "  └─ Metrics: step_duration: {step_duration:.3f}, samples_per_second: {samples_per_second:.1f}",
    rf"^\s*└─ Metrics: step_duration: (?P<step_duration>{_FLOAT}), "
    rf"samples_per_second: (?P<samples_per_second>{_FLOAT})\s*$",
    {"step_duration": Field(float, ".3f"), "samples_per_second": Field(float, ".1f")},
    "  └─ Metrics: step_duration: 0.400, samples_per_second: 5.0",
)

# "  • eval_loss: 1.8765" and "  • Accelerator processes: 2" (block items)
BULLET_LINE = _kind(
    "bullet_line",
    ["main"],
    "  • {key}: {value}",
    r"^\s*•\s*(?P<key>[^:]+?):\s*(?P<value>.*?)\s*$",
    {"key": Field(str), "value": Field(str)},
    "  • eval_loss: 1.8765",
)

# A header message "Key: value" (Session ID, Mode, GPU Count, Model, World size, ...)
HEADER_FIELD = _kind(
    "header_field",
    ["main", "multigpu", "performance"],
    "{key}: {value}",
    r"^(?P<key>[A-Za-z][A-Za-z0-9 _/().-]*?): (?P<value>.*?)\s*$",
    {"key": Field(str), "value": Field(str)},
    "Session ID: training_20241206_143022",
)

MULTIGPU_STEP = _kind(
    "multigpu_step",
    ["multigpu"],
    "Multi-GPU Step {step} | Processes: {processes} | Local rank: {local_rank} | Process index: {process_index}",
    r"^Multi-GPU Step (?P<step>\d+) \| Processes: (?P<processes>\d+) \| Local rank: (?P<local_rank>\d+)"
    r" \| Process index: (?P<process_index>\d+)\s*$",
    {k: Field(int, "d") for k in ("step", "processes", "local_rank", "process_index")},
    "Multi-GPU Step 20 | Processes: 2 | Local rank: 0 | Process index: 0",
)

# Seed 000 also shows the short form without Rank and Duration: both are optional here.
COMMUNICATION = _kind(
    "communication",
    ["multigpu"],
    "Communication | {op} | Rank {rank} | Size: {size_mb:.2f}MB | Duration: {duration_ms:.2f}ms"
    " | Bandwidth: {bandwidth_mb_s:.2f}MB/s",
    rf"^Communication \| (?P<op>[A-Za-z0-9_.-]+)(?: \| Rank (?P<rank>\d+))? \| Size: (?P<size_mb>{_FLOAT})MB"
    rf"(?: \| Duration: (?P<duration_ms>{_FLOAT})ms)? \| Bandwidth: (?P<bandwidth_mb_s>{_FLOAT})MB/s\s*$",
    {
        "op": Field(str),
        "rank": Field(int, "d"),
        "size_mb": Field(float, ".2f"),
        "duration_ms": Field(float, ".2f"),
        "bandwidth_mb_s": Field(float, ".2f"),
    },
    "Communication | gradient_sync | Rank 0 | Size: 45.67MB | Duration: 12.34ms | Bandwidth: 3701.46MB/s",
)

PERFORMANCE = _kind(
    "performance",
    ["performance"],
    "Performance | Step {step} | Avg step time: {avg_step_time_s:.3f}s | Throughput: {throughput_samples_s:.1f}"
    " samples/s | Total batch size: {total_batch_size}",
    rf"^Performance \| Step (?P<step>\d+) \| Avg step time: (?P<avg_step_time_s>{_FLOAT})s"
    rf" \| Throughput: (?P<throughput_samples_s>{_FLOAT}) samples/s \| Total batch size: (?P<total_batch_size>\d+)\s*$",
    {
        "step": Field(int, "d"),
        "avg_step_time_s": Field(float, ".3f"),
        "throughput_samples_s": Field(float, ".1f"),
        "total_batch_size": Field(int, "d"),
    },
    "Performance | Step 100 | Avg step time: 0.380s | Throughput: 10.5 samples/s | Total batch size: 4",
)

GPU_UTIL_LOW = _kind(
    "gpu_util_low",
    ["performance"],
    "GPU {gpu} utilization low: {utilization_pct:.1f}%",
    rf"^GPU (?P<gpu>\d+) utilization low: (?P<utilization_pct>{_FLOAT})%\s*$",
    {"gpu": Field(int, "d"), "utilization_pct": Field(float, ".1f")},
    "GPU 1 utilization low: 45.2%",
)

SLOW_STEP = _kind(
    "slow_step",
    ["performance"],
    "Slow training detected: {step_time_s:.1f}s per step",
    rf"^Slow training detected: (?P<step_time_s>{_FLOAT})s per step\s*$",
    {"step_time_s": Field(float, ".1f")},
    "Slow training detected: 15.1s per step",
)

# main.log blocks open with a title line: "📡 MULTI-GPU CONFIGURATION:", "📊 EVALUATION RESULTS (step 20):"
SECTION_LINE = _kind(
    "section_line",
    ["main"],
    "{title}:",
    r"^(?P<title>\S.*?):\s*$",
    {"title": Field(str)},
    "📊 EVALUATION RESULTS (step 20):",
)

# The NaN/Inf report in main.log (seed 003's shape): a rule, a prefixed title, one bullet per
# tensor, then how many more there were and where they were dumped, and a closing rule.
NAN_RULE = _kind("nan_rule", ["main"], "{rule}", r"^(?P<rule>={20,})\s*$", {"rule": Field(str)}, "=" * 80)

NAN_TITLE = _kind(
    "nan_title",
    ["main"],
    "NaN/Inf DETECTED [rank {rank}] at step {step} ({kind})",
    r"^NaN/Inf DETECTED \[rank (?P<rank>\d+)\] at step (?P<step>\d+) \((?P<kind>[^)]*)\)\s*$",
    {"rank": Field(int, "d"), "step": Field(int, "d"), "kind": Field(str)},
    "NaN/Inf DETECTED [rank 1] at step 21 (nan_grad)",
)

NAN_MORE = _kind(
    "nan_more",
    ["main"],
    "  ... and {count} more tensors",
    r"^\s*\.\.\. and (?P<count>\d+) more tensors\s*$",
    {"count": Field(int, "d")},
    "  ... and 5 more tensors",
)

NAN_DUMP = _kind(
    "nan_dump",
    ["main"],
    "  Debug tensors saved: {path} (safetensors)",
    r"^\s*Debug tensors saved: (?P<path>.+?) \(safetensors\)\s*$",
    {"path": Field(str)},
    "  Debug tensors saved: logs/s/nan_dumps/step_21_rank1.safetensors (safetensors)",
)

# Kinds that wrap a message (the prefix of every line of a file).
PREFIX_KINDS: tuple[LineKind, ...] = (MAIN_LINE, PROCESS_LINE)
# Kinds a message (or an unprefixed main.log line) can be, most specific first.
MESSAGE_KINDS: tuple[LineKind, ...] = (
    STEP_LINE,
    METRICS_LINE,
    MULTIGPU_STEP,
    COMMUNICATION,
    PERFORMANCE,
    GPU_UTIL_LOW,
    SLOW_STEP,
    NAN_TITLE,
    NAN_MORE,
    NAN_DUMP,
    BULLET_LINE,
    HEADER_FIELD,
)
# Kinds of main.log lines that stand alone (no prefix), read before the message kinds.
BLOCK_KINDS: tuple[LineKind, ...] = (NAN_RULE, SECTION_LINE)
LINE_KINDS: dict[str, LineKind] = {k.name: k for k in (*PREFIX_KINDS, *MESSAGE_KINDS, *BLOCK_KINDS)}


def parse_message(message: str) -> tuple[str, dict[str, object]] | None:
    """The first message kind that reads ``message``: ``(kind name, values)``, or None."""
    for kind in MESSAGE_KINDS:
        values = kind.parse(message)
        if values is not None:
            return kind.name, values
    return None
