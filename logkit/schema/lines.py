"""Text lines of the human-readable logs: each kind's template (``str.format`` syntax) beside the
pattern that reads it back, one ``LineKind`` per kind.

The emitter writes every line with ``kind.format(**values)``; the parsers read it with
``kind.parse(line)``; a property test checks the round trip for every kind. The bulk reader
(``logkit.ingest.readers.text_columns``) takes a kind's fields apart by the literal text
between them, read off the template here (``LineKind.split_plan``).

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
import string
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = [
    "LineKind", "Value", "LINE_KINDS", "MESSAGE_KINDS", "PREFIX_KINDS", "BLOCK_KINDS", "parse_message",
    "MAIN_LINE", "PROCESS_LINE", "STEP_LINE", "METRICS_LINE", "BULLET_LINE", "HEADER_FIELD", "MULTIGPU_STEP",
    "COMMUNICATION", "PERFORMANCE", "GPU_UTIL_LOW", "SLOW_STEP", "SECTION_LINE", "NAN_RULE", "NAN_TITLE",
    "NAN_MORE", "NAN_DUMP", "ERRORS_LINE",
]

_FLOAT = r"[-+]?(?:\d+(?:\.\d*)?|\.\d+)(?:[eE][-+]?\d+)?|[-+]?(?:nan|inf|NaN|Inf|infinity)"


@dataclass(frozen=True)
class Value:
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
    fields: dict[str, Value] = field(default_factory=dict)
    example: str = ""

    def format(self, **values: object) -> str:
        return self.template.format(**values)

    def split_plan(self, separator: str, offset: int = 0) -> tuple[int, dict[str, tuple[int, str, str]]]:
        """How to take this kind's fields apart at ``separator`` without capture groups, read off
        the template: ``(separators in a whole line, {field: (position, label, unit)})`` for each
        piece between separators that holds exactly one field (its label is the literal text
        before it, its unit the text after). ``offset``: pieces of a prefix in front (the
        process-line prefix has 3).

        >>> PERFORMANCE.split_plan(" | ", offset=3)[1]["avg_step_time_s"]
        (5, 'Avg step time: ', 's')
        """
        pieces = self.template.split(separator)
        plan: dict[str, tuple[int, str, str]] = {}
        for i, piece in enumerate(pieces):
            parts = list(string.Formatter().parse(piece))
            names = [name for _, name, _, _ in parts if name is not None]
            if len(names) != 1 or parts[0][1] is None:
                continue
            unit = parts[1][0] if len(parts) > 1 else ""
            plan[names[0]] = (i + offset, parts[0][0], unit)
        return len(pieces) - 1 + offset, plan

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
    {"time": Value(str), "level": Value(str), "message": Value(str)},
    "14:30:22 | INFO  | Session ID: training_20241206_143022",
)

# multigpu.log / performance.log: "YYYY-MM-DD HH:MM:SS | LEVEL(8) | PROCESS(12) | message"
PROCESS_LINE = _kind(
    "process_line",
    ["multigpu", "performance"],
    "{datetime} | {level:<8} | {process:<12} | {message}",
    r"^(?P<datetime>\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}(?:[.,]\d+)?) \| (?P<level>[A-Z]+)\s*"
    r"\| (?P<process>\S+)\s*\| (?P<message>.*)$",
    {"datetime": Value(str), "level": Value(str), "process": Value(str), "message": Value(str)},
    "2024-12-06 14:30:25 | INFO     | MainProcess  | Distributed backend: nccl",
)

# main.log step line (unprefixed: progress lines stand alone)
STEP_LINE = _kind(
    "step_line",
    ["main"],
    "Step {step:>4}/{max_steps} ({percent:4.1f}%) | Loss: {loss:.4f} | LR: {learning_rate:.2e}"
    " | Speed: {steps_per_second:.1f} steps/s | ETA: {eta_minutes:.1f}min",
    rf"^Step\s+(?P<step>\d+)/(?P<max_steps>\d+)\s+\(\s*(?P<percent>{_FLOAT})%\)"
    rf" \| Loss: (?P<loss>{_FLOAT}) \| LR: (?P<learning_rate>{_FLOAT})"
    rf" \| Speed: (?P<steps_per_second>{_FLOAT}) steps/s \| ETA: (?P<eta_minutes>{_FLOAT})min\s*$",
    {
        "step": Value(int, "d"),
        "max_steps": Value(int, "d"),
        "percent": Value(float, ".1f"),
        "loss": Value(float, ".4f"),
        "learning_rate": Value(float, ".2e"),
        "steps_per_second": Value(float, ".1f"),
        "eta_minutes": Value(float, ".1f"),
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
    {"step_duration": Value(float, ".3f"), "samples_per_second": Value(float, ".1f")},
    "  └─ Metrics: step_duration: 0.400, samples_per_second: 5.0",
)

# "  • eval_loss: 1.8765" and "  • Accelerator processes: 2" (block items)
BULLET_LINE = _kind(
    "bullet_line",
    ["main"],
    "  • {key}: {value}",
    r"^\s*•\s*(?P<key>[^:]+?):\s*(?P<value>.*?)\s*$",
    {"key": Value(str), "value": Value(str)},
    "  • eval_loss: 1.8765",
)

# A header message "Key: value" (Session ID, Mode, GPU Count, Model, World size, ...)
HEADER_FIELD = _kind(
    "header_field",
    ["main", "multigpu", "performance"],
    "{key}: {value}",
    r"^(?P<key>[A-Za-z][A-Za-z0-9 _/().-]*?): (?P<value>.*?)\s*$",
    {"key": Value(str), "value": Value(str)},
    "Session ID: training_20241206_143022",
)

MULTIGPU_STEP = _kind(
    "multigpu_step",
    ["multigpu"],
    "Multi-GPU Step {step} | Processes: {processes} | Local rank: {local_rank} | Process index: {process_index}",
    r"^Multi-GPU Step (?P<step>\d+) \| Processes: (?P<processes>\d+) \| Local rank: (?P<local_rank>\d+)"
    r" \| Process index: (?P<process_index>\d+)\s*$",
    {k: Value(int, "d") for k in ("step", "processes", "local_rank", "process_index")},
    "Multi-GPU Step 20 | Processes: 2 | Local rank: 0 | Process index: 0",
)

# The short form without Rank and Duration is read too: both are optional here.
COMMUNICATION = _kind(
    "communication",
    ["multigpu"],
    "Communication | {op} | Rank {rank} | Size: {size_mb:.2f}MB | Duration: {duration_ms:.2f}ms"
    " | Bandwidth: {bandwidth_mb_s:.2f}MB/s",
    rf"^Communication \| (?P<op>[A-Za-z0-9_.-]+)(?: \| Rank (?P<rank>\d+))? \| Size: (?P<size_mb>{_FLOAT})MB"
    rf"(?: \| Duration: (?P<duration_ms>{_FLOAT})ms)? \| Bandwidth: (?P<bandwidth_mb_s>{_FLOAT})MB/s\s*$",
    {
        "op": Value(str),
        "rank": Value(int, "d"),
        "size_mb": Value(float, ".2f"),
        "duration_ms": Value(float, ".2f"),
        "bandwidth_mb_s": Value(float, ".2f"),
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
        "step": Value(int, "d"),
        "avg_step_time_s": Value(float, ".3f"),
        "throughput_samples_s": Value(float, ".1f"),
        "total_batch_size": Value(int, "d"),
    },
    "Performance | Step 100 | Avg step time: 0.380s | Throughput: 10.5 samples/s | Total batch size: 4",
)

GPU_UTIL_LOW = _kind(
    "gpu_util_low",
    ["performance"],
    "GPU {gpu} utilization low: {utilization_pct:.1f}%",
    rf"^GPU (?P<gpu>\d+) utilization low: (?P<utilization_pct>{_FLOAT})%\s*$",
    {"gpu": Value(int, "d"), "utilization_pct": Value(float, ".1f")},
    "GPU 1 utilization low: 45.2%",
)

SLOW_STEP = _kind(
    "slow_step",
    ["performance"],
    "Slow training detected: {step_time_s:.1f}s per step",
    rf"^Slow training detected: (?P<step_time_s>{_FLOAT})s per step\s*$",
    {"step_time_s": Value(float, ".1f")},
    "Slow training detected: 15.1s per step",
)

# main.log blocks open with a title line: "📡 MULTI-GPU CONFIGURATION:", "📊 EVALUATION RESULTS (step 20):"
SECTION_LINE = _kind(
    "section_line",
    ["main"],
    "{title}:",
    r"^(?P<title>\S.*?):\s*$",
    {"title": Value(str)},
    "📊 EVALUATION RESULTS (step 20):",
)

# The NaN/Inf report in main.log: a rule, a prefixed title, one bullet per
# tensor, then how many more there were and where they were dumped, and a closing rule.
NAN_RULE = _kind("nan_rule", ["main"], "{rule}", r"^(?P<rule>={20,})\s*$", {"rule": Value(str)}, "=" * 80)

NAN_TITLE = _kind(
    "nan_title",
    ["main"],
    "NaN/Inf DETECTED [rank {rank}] at step {step} ({kind})",
    r"^NaN/Inf DETECTED \[rank (?P<rank>\d+)\] at step (?P<step>\d+) \((?P<kind>[^)]*)\)\s*$",
    {"rank": Value(int, "d"), "step": Value(int, "d"), "kind": Value(str)},
    "NaN/Inf DETECTED [rank 1] at step 21 (nan_grad)",
)

NAN_MORE = _kind(
    "nan_more",
    ["main"],
    "  ... and {count} more tensors",
    r"^\s*\.\.\. and (?P<count>\d+) more tensors\s*$",
    {"count": Value(int, "d")},
    "  ... and 5 more tensors",
)

NAN_DUMP = _kind(
    "nan_dump",
    ["main"],
    "  Debug tensors saved: {path} (safetensors)",
    r"^\s*Debug tensors saved: (?P<path>.+?) \(safetensors\)\s*$",
    {"path": Value(str)},
    "  Debug tensors saved: logs/s/nan_dumps/step_21_rank1.safetensors (safetensors)",
)

# errors.log: the logger's own failures (never raised into training), one per line
ERRORS_LINE = _kind(
    "errors_line",
    ["errors"],
    "{timestamp} | {level} | {message}",
    r"^(?P<timestamp>\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}(?:\.\d+)?(?:[+-]\d{2}:\d{2}|Z)?) \| (?P<level>[A-Z]+) \| "
    r"(?P<message>.*)$",
    {"timestamp": Value(str), "level": Value(str), "message": Value(str)},
    "2026-11-22T01:55:42.123456+00:00 | ERROR | cannot write logs/s/s_rank0.jsonl: OSError(28, 'No space left')",
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
LINE_KINDS: dict[str, LineKind] = {k.name: k for k in (*PREFIX_KINDS, *MESSAGE_KINDS, *BLOCK_KINDS, ERRORS_LINE)}


def parse_message(message: str) -> tuple[str, dict[str, object]] | None:
    """The first message kind that reads ``message``: ``(kind name, values)``, or None."""
    for kind in MESSAGE_KINDS:
        values = kind.parse(message)
        if values is not None:
            return kind.name, values
    return None
