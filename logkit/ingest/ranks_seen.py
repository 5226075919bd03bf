"""The highest rank a session's files show (for ``ingest.meta``: the world size is at least that rank + 1,
a lower bound where nothing states one): the ranks of their rows (a rank's own throughput or training-time
summary among them; not the rank a format only assumes, its
declaration's ``assumed_rank``), both sides of a collective mismatch ("Rank 1 is running ..., but Rank 2 is
running ...": one row names two ranks of the run), the ranks an NCCL error's detail names (``Duplicate GPU
detected : rank 7 and rank 0``), and the local ranks a launcher says failed (a node runs
local ranks 0..L, so L + 1 ranks at least).
"""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from logkit.ingest.readers.formats import declared
from logkit.schema.vocab import EventKind


def ranks_seen(reads) -> tuple[int, str] | None:
    """The highest rank the reads' lines name (not the rank a format only assumes, its declaration's
    ``assumed_rank``), with the file and line of a row that names it; None where no line names one."""
    best = None
    for read in reads:
        if declared(read.format).assumed_rank:
            continue
        for name in ("steps", "events", "comm", "perf"):
            table = read.tables.get(name)
            if table is None or "rank" not in table.column_names or not pa.types.is_integer(table.column("rank").type):
                continue
            ranks = table.column("rank")
            top = pc.max(ranks).as_py()
            if top is None or top < 0 or (best is not None and top <= best[0]):
                continue
            where = Path(read.path).name
            if "source" in table.column_names:
                index = pc.index(ranks, top).as_py()
                where = table.column("source")[index].as_py() or where
            best = (top, where)
        for named in (_mismatch_ranks(read), _local_ranks(read)):
            if named is not None and (best is None or named[0] > best[0]):
                best = named
    return best


def _rows_of(read, kind: EventKind, column: str):
    """The ``column`` and ``source`` of the read's events of ``kind`` (None where it has neither)."""
    table = read.tables.get("events")
    if table is None or not {"kind", column, "source"} <= set(table.column_names):
        return None
    rows = table.filter(pc.equal(table.column("kind").cast(pa.string()), str(kind)))
    return zip(rows.column(column).to_pylist(), rows.column("source").to_pylist(), strict=True)


def _mismatch_ranks(read) -> tuple[int, str] | None:
    """The highest rank a collective mismatch names ("Rank 1 is running ..., but Rank 2 is running ...": both
    sides are ranks of the run, in its ``ranks``), with its ``file:line``; None where none names one."""
    best = None
    named_by = [*(_rows_of(read, EventKind.COLLECTIVE_MISMATCH, "ranks") or ()),
                *(_rows_of(read, EventKind.FAILURE_CAUSE, "ranks") or ())]  # NCCL's "Duplicate GPU ... rank 7"
    for ranks, source in named_by:
        named = [int(r) for r in str(ranks).split(",") if r.isdigit()]
        if named and (best is None or max(named) > best[0]):
            best = (max(named), source or Path(read.path).name)
    return best


def _local_ranks(read) -> tuple[int, str] | None:
    """The highest local rank a launcher says failed (``failed (exitcode: 1) local_rank: 3``): a node runs local
    ranks 0..L, so the run has at least L + 1 ranks; with its ``file:line``, or None."""
    found = [(int(r), s) for r, s in _rows_of(read, EventKind.CHILD_FAILED, "local_rank") or () if r is not None and r >= 0]
    if not found:
        return None
    top, source = max(found, key=lambda f: f[0])
    return top, source or Path(read.path).name
