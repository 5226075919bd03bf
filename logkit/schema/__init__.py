"""The contract between the emitter (``trainer_hooks``) and the readers (``logkit.ingest``).

Standard library only: the training side imports it too. Each format is defined once:

- ``records``: the JSONL event stream, one ``RecordSpec`` per event type (key path, name,
  type, unit of every field); the emitter builds records from it, the readers map them by it;
- ``frames``: the ``Session`` frames, their columns and dtypes, derived from the record specs;
- ``lines``: the text logs, each line kind's template beside its pattern;
- ``files``: a session's file names and the keys of its summary.json;
- ``findings``: severities and every kind of finding (the emitter's checks and the analysis');
- ``vocab``: the words of values (status, mode and the CPU-run rule, event kinds, the results' words);
- ``meta``: a session's meta keys (``SessionMeta``), each with its type, unit and meaning;
- ``gpu``: the per-GPU metrics of a snapshot (the sampler reads by them, ``GPU_DEVICE`` is made of them);
- ``collectives``: bandwidth units and the bus-bandwidth factor of each collective;
- ``values``: what counts as a number.

The names below are the ones both halves use; the line kinds are at this level, the record
specs in ``logkit.schema.records`` (both have a ``COMMUNICATION`` and a ``PERFORMANCE``).
"""

from __future__ import annotations

from logkit.schema.collectives import MB, bandwidth_mb_s, bus_factor_rule, bus_factor_text, busbw_factor
from logkit.schema.files import RANK_JSONL_RE, SUMMARY, SUMMARY_JSON_RE, SessionFiles, session_files
from logkit.schema.findings import EMITTER_KINDS, NONFINITE_KINDS, SEVERITIES, FindingKind, Severity
from logkit.schema.frames import FRAME_COLUMNS, FRAME_DTYPES, FRAME_NAMES, FRAMES
from logkit.schema.lines import (
    BLOCK_KINDS,
    BULLET_LINE,
    COMMUNICATION,
    GPU_UTIL_LOW,
    HEADER_FIELD,
    LINE_KINDS,
    MAIN_LINE,
    MESSAGE_KINDS,
    METRICS_LINE,
    MULTIGPU_STEP,
    NAN_DUMP,
    NAN_MORE,
    NAN_RULE,
    NAN_TITLE,
    PERFORMANCE,
    PREFIX_KINDS,
    PROCESS_LINE,
    SECTION_LINE,
    SLOW_STEP,
    STEP_LINE,
    LineKind,
    parse_message,
)
from logkit.schema.records import (
    EVENT_TYPES,
    RECORD_SPECS,
    REQUIRED_KEYS,
    SCHEMA_VERSION,
    UNITS,
    EventType,
    RecordSpec,
)
from logkit.schema.values import as_float, as_int, as_text, to_float, to_int
from logkit.schema.vocab import EventKind, Mode, Status, on_cpu

__all__ = [
    "SCHEMA_VERSION", "EventType", "EVENT_TYPES", "REQUIRED_KEYS", "Mode", "Status", "UNITS", "RecordSpec",
    "RECORD_SPECS", "FRAMES", "FRAME_NAMES", "FRAME_COLUMNS", "FRAME_DTYPES", "SessionFiles", "session_files",
    "RANK_JSONL_RE", "SUMMARY_JSON_RE", "SUMMARY", "Severity", "SEVERITIES", "FindingKind", "EMITTER_KINDS",
    "NONFINITE_KINDS", "MB", "busbw_factor", "bus_factor_rule", "bus_factor_text", "bandwidth_mb_s",
    "as_float", "as_int", "as_text", "to_float", "to_int", "LineKind", "LINE_KINDS", "MESSAGE_KINDS",
    "PREFIX_KINDS", "BLOCK_KINDS", "parse_message", "MAIN_LINE", "PROCESS_LINE", "STEP_LINE", "METRICS_LINE",
    "BULLET_LINE", "HEADER_FIELD", "MULTIGPU_STEP", "COMMUNICATION", "PERFORMANCE", "GPU_UTIL_LOW", "SLOW_STEP",
    "SECTION_LINE", "NAN_RULE", "NAN_TITLE", "NAN_MORE", "NAN_DUMP", "EventKind", "on_cpu",
]
