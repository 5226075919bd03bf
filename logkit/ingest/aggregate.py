"""Per-session aggregates of folders larger than memory: our JSONL streams read in chunks,
never as whole frames. Memory stays near ``chunk_bytes`` (x a small factor), whatever the size.

    >>> from logkit.ingest.aggregate import aggregate_sessions
    >>> for agg in aggregate_sessions("logs"):          # doctest: +SKIP
    ...     print(agg["session_id"], agg["steps"], agg["samples_per_second"])

Figures follow ``logkit.analysis.scaling``: step time and batch sums over the lowest rank's
optimizer steps; ``steps`` counts step records of all ranks; ``comm`` sums per op.
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from logkit.ingest.chunks import whole_lines
from logkit.ingest.discover import discover
from logkit.ingest.jsonl_arrow import parse
from logkit.ingest.jsonl_lines import decode_line
from logkit.ingest.mapping import TYPE, column, raw_records, raw_schema
from logkit.schema.records import COMMUNICATION, TRAINING_STEP
from logkit.schema.values import per_second

CHUNK_BYTES = 64 << 20
_STEP_FIELDS = [TRAINING_STEP[n] for n in ("step", "step_time_s", "total_batch_size", "loss")]
_COMM_FIELDS = [COMMUNICATION[n] for n in ("op", "size_bytes", "duration_ms")]
_STEP, _STEP_TIME, _BATCH, _LOSS = (f.raw for f in _STEP_FIELDS)
_OP, _SIZE, _DURATION = (f.raw[0] for f in _COMM_FIELDS)
# Only what the aggregates read (parsing the frames' every key would take twice as long).
_SCHEMA = raw_schema([TYPE, *_STEP_FIELDS, *_COMM_FIELDS])


class _Acc:
    def __init__(self) -> None:
        self.steps = self.records = self.bad_lines = 0
        self.step_time = 0.0
        self.batch = 0
        self.batch_missing = 0
        self.main_steps = 0
        self.last = (None, None)  # (step, loss) of the main rank's latest step with a loss
        self.comm: dict[str, dict] = {}

    def add_table(self, t: pa.Table, main: bool) -> None:
        self.records += t.num_rows
        kind = t.column(TYPE.raw[0])
        steps = t.filter(pc.equal(kind, TRAINING_STEP.type))
        self.steps += steps.num_rows
        if main and steps.num_rows:
            timed = steps.filter(pc.greater(pc.fill_null(column(steps, _STEP_TIME), 0.0), 0.0))
            self.main_steps += timed.num_rows
            self.step_time += pc.sum(column(timed, _STEP_TIME)).as_py() or 0.0
            batch = column(timed, _BATCH)
            self.batch += pc.sum(batch).as_py() or 0
            self.batch_missing += batch.null_count
            with_loss = steps.filter(pc.is_valid(column(steps, _LOSS)))
            if with_loss.num_rows:
                i = with_loss.num_rows - 1
                self.last = (column(with_loss, _STEP)[i].as_py(), column(with_loss, _LOSS)[i].as_py())
        comm = t.filter(pc.equal(kind, COMMUNICATION.type))
        if comm.num_rows:
            grouped = comm.group_by(_OP).aggregate([(_SIZE, "sum"), (_DURATION, "sum"), (_OP, "count")])
            for row in grouped.to_pylist():
                acc = self.comm.setdefault(row[_OP], {"count": 0, "bytes": 0, "duration_ms": 0.0})
                acc["count"] += row[f"{_OP}_count"]
                acc["bytes"] += row[f"{_SIZE}_sum"] or 0
                acc["duration_ms"] += row[f"{_DURATION}_sum"] or 0.0

    def add_lines(self, chunk: bytes, main: bool) -> None:
        """The per-line engine's reading, for a chunk pyarrow refuses (a torn line, an odd value)."""
        records = []
        for line in chunk.split(b"\n"):
            if line.strip():
                record = decode_line(line.rstrip(b"\r"), terminated=True)[0]
                self.bad_lines += record is None
                records += [record] if record is not None else []
        if records:
            self.add_table(raw_records(records, list(range(len(records)))), main)


def _add_stream(acc: _Acc, path: Path, main: bool, chunk_bytes: int) -> None:
    try:
        for buf, size, torn in whole_lines(path, chunk_bytes):
            with memoryview(buf) as whole, whole[:size] as chunk:
                if torn and not bytes(chunk).strip():
                    continue
                try:
                    table = parse(chunk, block_bytes=max(1 << 20, size + 1), schema=_SCHEMA)
                except (pa.ArrowInvalid, UnicodeDecodeError, ValueError):
                    acc.add_lines(bytes(chunk), main)
                    continue
            acc.add_table(table, main)
    except (OSError, EOFError):
        acc.bad_lines += 1  # a truncated gzip or an I/O error: what came before still counts


def aggregate_sessions(root: str | Path, chunk_bytes: int = CHUNK_BYTES) -> list[dict]:
    """One dict per session with JSONL streams under ``root``: session_id, folder, ranks, records,
    steps, step_time_s, samples_per_second, steps_per_second, final_loss, comm{op: {count,
    bytes, duration_ms}}, bad_lines."""
    out = []
    for src in discover(root):
        if not src.rank_files:
            continue
        acc = _Acc()
        main_rank = min(src.rank_files)
        for rank in sorted(src.rank_files):
            _add_stream(acc, src.rank_files[rank], rank == main_rank, chunk_bytes)
        t = acc.step_time
        out.append({
            "session_id": src.session_id, "folder": str(src.folder), "ranks": sorted(src.rank_files),
            "records": acc.records, "steps": acc.steps, "step_time_s": t,
            "steps_per_second": per_second(acc.main_steps, t),
            "samples_per_second": per_second(acc.batch, t) if not acc.batch_missing else None,
            "final_loss": acc.last[1], "comm": acc.comm, "bad_lines": acc.bad_lines,
        })
    return out
