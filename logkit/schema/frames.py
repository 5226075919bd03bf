"""The frames of a ``Session``: their columns, in order, and dtypes, derived from the record specs.

A frame's columns are named once: a column that comes from our JSONL takes its name and
dtype from its ``RecordField`` (``records.py``); the few that only other formats give (the
events of an NCCL log, a parse diagnostic) are declared here with their dtype. The first
columns of each frame (``contract=True``) are the ones the log-format contract promises;
absent values are NaN (floats), <NA> (integers) or None (text).

Dtypes: "Int64" is pandas' nullable integer (a missing step stays <NA>, not a float);
"float64" carries NaN; "object" holds text with None where absent; "category" (few distinct
values, categories sorted) and "str" (pandas' arrow-backed strings) keep repeated text compact.
"""

from __future__ import annotations

from dataclasses import dataclass

from logkit.schema.records import (
    COMMUNICATION,
    EVENT,
    GPU_DEVICE,
    GPU_SNAPSHOT,
    PERFORMANCE,
    STEP_PHASES,
    TRAINING_STEP,
    RecordField,
    RecordSpec,
)

__all__ = ["Column", "FRAMES", "FRAME_COLUMNS", "FRAME_DTYPES", "FRAME_NAMES", "columns_from"]


@dataclass(frozen=True)
class Column:
    """One column of a frame: its name, dtype, the record field it comes from (None: only other
    formats give it), and whether the contract promises it."""

    name: str
    dtype: str
    source: RecordField | None = None
    contract: bool = False
    doc: str = ""


def _from(spec: RecordSpec, name: str, contract: bool) -> Column:
    f = spec[name]
    return Column(f.name, f.dtype, f, contract, f.doc)


def columns_from(spec: RecordSpec, names: str, contract: int = 0, **extra: str) -> tuple[Column, ...]:
    """Columns named in ``names`` (space-separated), taken from ``spec``'s fields, the first
    ``contract`` of them promised by the contract; ``extra``: columns of other formats (name=dtype)."""
    cols = [_from(spec, n, i < contract) for i, n in enumerate(names.split())]
    return (*cols, *(Column(n, t) for n, t in extra.items()))


_SOURCE = Column("source", "object", None, True, "file:line of the record or line")

FRAMES: dict[str, tuple[Column, ...]] = {
    "steps": columns_from(TRAINING_STEP, "rank step time_s loss learning_rate grad_norm step_time_s samples_per_s "
                                         "tokens_per_s total_batch_size epoch data_time_s", contract=11),
    "comm": (*columns_from(COMMUNICATION, "rank step op size_bytes duration_ms algbw_mb_s busbw_mb_s group_size",
                           contract=8),
             Column("source", "str", None, True, "file:line of the record or line"),
             *columns_from(COMMUNICATION, "bucket timing_source time_s phase")),
    "perf": columns_from(PERFORMANCE, "rank step avg_step_time_s throughput_samples_s total_batch_size window_steps "
                                      "time_s peak_allocated_mb peak_reserved_mb", contract=5),
    "phases": columns_from(STEP_PHASES, "rank step begin_clock_s compute_s first_ready_s sync_s buckets timing_source "
                                        "time_s", contract=6),
    "gpu": (_from(GPU_SNAPSHOT, "time_s", True), _from(GPU_SNAPSHOT, "host", True),
            *columns_from(GPU_DEVICE, "gpu utilization_pct memory_used_mb memory_total_mb power_w temperature_c",
                          contract=6),
            _from(GPU_SNAPSHOT, "rank", False),
            *columns_from(GPU_DEVICE, "memory_usage_pct sm_clock_mhz")),
    "evals": (Column("step", "Int64", None, True), Column("name", "object", None, True, "the metric's name"),
              Column("value", "float64", None, True), Column("rank", "Int64"), Column("time_s", "float64")),
    "events": (*columns_from(EVENT, "time_s rank level kind message", contract=5), _SOURCE,
               *columns_from(EVENT, "step subkind value threshold status phase phase_detail clock_s stack duration_s"),
               # what other formats tell (logs we did not write): NCCL, torchrun, CUDA
               *(Column(n, t) for n, t in (
                   ("host", "object"), ("op", "object"), ("seq", "Int64"), ("numel", "Int64"),
                   ("timeout_ms", "float64"), ("elapsed_ms", "float64"), ("nranks", "Int64"), ("comm_id", "object"),
                   ("network", "object"), ("ranks", "object"), ("ops", "object"), ("requested_gib", "float64"),
                   ("capacity_gib", "float64"), ("free_gib", "float64"), ("local_rank", "Int64"),
                   ("exitcode", "Int64"), ("signal", "object"),
                   # the process and device a line names; NCCL's view of its communicator
                   ("pid", "Int64"), ("device", "Int64"), ("nnodes", "Int64"), ("local_ranks", "Int64"),
                   ("init", "object"),
                   # the watchdog: a timeout line cut short, the work each rank stopped at
                   ("numel_out", "Int64"), ("truncated", "object"), ("pg", "object"), ("pg_name", "object"),
                   ("last_enqueued", "Int64"), ("last_completed", "Int64"),
                   # what a collective mismatch says differs, per rank in the order of ``ranks``
                   ("shapes", "object"), ("dtypes", "object"), ("differs", "object"), ("differences", "object"),
                   # a failed child: the first failure its launcher observed; a peer lost; an NCCL error
                   ("root_cause", "object"), ("peer", "object"), ("error", "object"), ("port", "Int64"),
                   ("allocated_gib", "float64"), ("reserved_gib", "float64"), ("in_use_gib", "float64"),
                   # why a process failed (a failure_cause event: vocab.FailureCause)
                   ("cause", "object")))),
    "diagnostics": (Column("file", "object", None, True), Column("line", "Int64", None, True),
                    Column("reason", "object", None, True), Column("text", "object", None, True)),
}
FRAME_NAMES: tuple[str, ...] = tuple(FRAMES)

# {frame: {column: dtype}}, the contract's columns first
FRAME_DTYPES: dict[str, dict[str, str]] = {name: {c.name: c.dtype for c in cols} for name, cols in FRAMES.items()}
# {frame: the columns the contract promises}
FRAME_COLUMNS: dict[str, tuple[str, ...]] = {name: tuple(c.name for c in cols if c.contract)
                                             for name, cols in FRAMES.items()}
