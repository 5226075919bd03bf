"""Per-session aggregates of folders larger than memory: our JSONL streams read in chunks,
never as whole frames. Memory stays near ``chunk_bytes`` (x a small factor), whatever the size.

    >>> from logkit.ingest.aggregate import aggregate_sessions
    >>> for agg in aggregate_sessions("logs"):          # doctest: +SKIP
    ...     print(agg["session_id"], agg["steps"], agg["samples_per_second"])

Figures follow ``logkit.analysis.scaling``: step time and batch sums over the lowest rank's
optimizer steps; ``steps`` counts step records of all ranks; ``comm`` sums per op.
"""

from __future__ import annotations

import gzip
from collections.abc import Iterator
from pathlib import Path

import orjson
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.json as pj

from logkit.ingest.discover import discover
from logkit.ingest.records import integer, num
from logkit.schema import EventType

__all__ = ["aggregate_sessions", "CHUNK_BYTES"]

CHUNK_BYTES = 64 << 20
_F, _I, _S = pa.float64(), pa.int64(), pa.string()
_SCHEMA = pa.schema([
    ("type", _S), ("rank", _I), ("step", _I), ("timing", pa.struct([("step_time_seconds", _F)])),
    ("metrics", pa.struct([("loss", _F), ("total_batch_size", _I)])),
    ("op", _S), ("size_bytes", _I), ("duration_ms", _F),
])
_OPTIONS = pj.ParseOptions(explicit_schema=_SCHEMA, unexpected_field_behavior="ignore")


def _chunks(path: Path, chunk_bytes: int) -> Iterator[bytes]:
    """Whole lines, about ``chunk_bytes`` at a time (a torn last line comes alone, at the end)."""
    opener = gzip.open if path.name.endswith(".gz") else open
    rest = b""
    with opener(path, "rb") as fh:
        while block := fh.read(chunk_bytes):
            block = rest + block
            cut = block.rfind(b"\n") + 1
            rest = block[cut:]
            if cut:
                yield block[:cut]
    if rest.strip():
        yield rest


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
        kind = t.column("type")
        steps = t.filter(pc.equal(kind, EventType.TRAINING_STEP))
        self.steps += steps.num_rows
        if main and steps.num_rows:
            st = pc.struct_field(steps.column("timing"), "step_time_seconds")
            timed = steps.filter(pc.greater(pc.fill_null(st, 0.0), 0.0))
            self.main_steps += timed.num_rows
            self.step_time += pc.sum(pc.struct_field(timed.column("timing"), "step_time_seconds")).as_py() or 0.0
            batch = pc.struct_field(timed.column("metrics"), "total_batch_size")
            self.batch += pc.sum(batch).as_py() or 0
            self.batch_missing += batch.null_count
            loss = pc.struct_field(steps.column("metrics"), "loss")
            with_loss = steps.filter(pc.is_valid(loss))
            if with_loss.num_rows:
                i = with_loss.num_rows - 1
                self.last = (with_loss.column("step")[i].as_py(),
                             pc.struct_field(with_loss.column("metrics"), "loss")[i].as_py())
        comm = t.filter(pc.equal(kind, EventType.COMMUNICATION))
        if comm.num_rows:
            grouped = comm.group_by("op").aggregate([("size_bytes", "sum"), ("duration_ms", "sum"), ("op", "count")])
            for row in grouped.to_pylist():
                acc = self.comm.setdefault(row["op"], {"count": 0, "bytes": 0, "duration_ms": 0.0})
                acc["count"] += row["op_count"]
                acc["bytes"] += row["size_bytes_sum"] or 0
                acc["duration_ms"] += row["duration_ms_sum"] or 0.0

    def add_lines(self, chunk: bytes, main: bool) -> None:
        """The per-line path, for a chunk pyarrow refuses (a torn line, an odd value)."""
        rows = []
        for raw in chunk.split(b"\n"):
            if not raw.strip():
                continue
            try:
                rec = orjson.loads(raw)
            except orjson.JSONDecodeError:
                self.bad_lines += 1
                continue
            if not isinstance(rec, dict) or not isinstance(rec.get("type"), str):
                self.bad_lines += 1
                continue
            timing = rec.get("timing") if isinstance(rec.get("timing"), dict) else {}
            metrics = rec.get("metrics") if isinstance(rec.get("metrics"), dict) else {}
            rows.append({"type": rec["type"], "rank": integer(rec.get("rank")), "step": integer(rec.get("step")),
                         "timing": {"step_time_seconds": num(timing.get("step_time_seconds"))},
                         "metrics": {"loss": num(metrics.get("loss")),
                                     "total_batch_size": integer(metrics.get("total_batch_size"))},
                         "op": rec.get("op") if isinstance(rec.get("op"), str) else None,
                         "size_bytes": integer(rec.get("size_bytes")), "duration_ms": num(rec.get("duration_ms"))})
        if rows:
            self.add_table(pa.Table.from_pylist(rows, schema=_SCHEMA), main)


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
            try:
                for chunk in _chunks(src.rank_files[rank], chunk_bytes):
                    try:
                        table = pj.read_json(pa.BufferReader(chunk), parse_options=_OPTIONS,
                                             read_options=pj.ReadOptions(block_size=max(1 << 20, len(chunk) + 1)))
                    except (pa.ArrowInvalid, UnicodeDecodeError, ValueError):
                        acc.add_lines(chunk, rank == main_rank)
                        continue
                    acc.add_table(table, rank == main_rank)
            except (OSError, EOFError):
                acc.bad_lines += 1  # a truncated gzip or an I/O error: what came before still counts
        t = acc.step_time
        out.append({
            "session_id": src.session_id, "folder": str(src.folder), "ranks": sorted(src.rank_files),
            "records": acc.records, "steps": acc.steps, "step_time_s": t,
            "steps_per_second": acc.main_steps / t if t > 0 else None,
            "samples_per_second": acc.batch / t if t > 0 and not acc.batch_missing else None,
            "final_loss": acc.last[1], "comm": acc.comm, "bad_lines": acc.bad_lines,
        })
    return out
