"""A cache of the engine's per-rank partial results (``engine.RankPartial``), beside the session cache
(``ingest.cache``: same folder, same rules): one entry per rank stream, valid while the file keeps its
size and mtime_ns and the code that reads and reduces it is the same. An entry is Arrow IPC files
(the rank's frame tables in order, its comm reductions) and one JSON document (the stream's whole
records and diagnostics): no pickle. A cache that cannot be written or read only costs time.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path

import pandas as pd
import pyarrow as pa

from logkit.analysis.communication import CommPart
from logkit.ingest.cache import cache_dir
from logkit.ingest.jsonl_lines import Stream
from logkit.ingest.load import RankRead
from logkit.schema import SCHEMA_VERSION

FORMAT = 1


@functools.lru_cache(maxsize=1)
def _code() -> str:
    root = Path(__file__).resolve().parent.parent
    digest = hashlib.sha256()
    for path in sorted([*(root / "ingest").rglob("*.py"), *(root / "schema").rglob("*.py"),
                        *(root / "analysis" / name for name in ("comm_partial.py", "communication.py", "curves.py",
                                                                 "engine.py", "rank_cache.py"))]):
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _stamp(path: str) -> list | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return [st.st_size, st.st_mtime_ns]


def _entry(path: str, rank: int, world_size) -> Path:
    ident = json.dumps([FORMAT, SCHEMA_VERSION, _code(), os.path.realpath(path), rank, world_size])
    return cache_dir() / "ranks" / hashlib.sha256(ident.encode()).hexdigest()[:32]


def _write_table(table: pa.Table, path: Path) -> None:
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, table.schema) as writer:
        writer.write_table(table)


def _read_table(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as source:
        return pa.ipc.open_file(source).read_all()


def _frame(table: pa.Table) -> pd.DataFrame:
    return table.to_pandas()  # text columns come back as pandas makes them from the Python values


def store(path: str, rank: int, world_size, part) -> bool:
    """Write ``part`` (an ``engine.RankPartial``) for the rank stream ``path``, atomically."""
    stamp = _stamp(path)
    if stamp is None:
        return False
    entry, tmp = _entry(path, rank, world_size), None
    try:
        entry.parent.mkdir(parents=True, exist_ok=True)
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=entry.parent))
        for i, (_, table) in enumerate(part.read.tables):
            _write_table(table, tmp / f"t{i:05d}.arrow")
        c = part.comm
        doc = {"stamp": stamp, "names": [name for name, _ in part.read.tables],
               "stream": {"records": part.read.stream.records, "last_time": part.read.stream.last_time,
                          "diagnostics": part.read.stream.diagnostics}, "comm": None}
        if c is not None:
            doc["comm"] = {"timing_sources": sorted(c.timing_sources), "world_size": c.world_size,
                           "needs_world_size": c.needs_world_size, "leftover": c.leftover is not None}
            for name, frame in (("stats", c.stats), ("bandwidth", c.bandwidth), ("leftover", c.leftover)):
                if frame is not None:
                    _write_table(pa.Table.from_pandas(frame, preserve_index=False), tmp / f"comm_{name}.arrow")
        (tmp / "part.json").write_text(json.dumps(doc))
        shutil.rmtree(entry, ignore_errors=True)
        os.replace(tmp, entry)
        return True
    except Exception:  # noqa: BLE001 - an unwritable cache only costs time
        if tmp is not None:
            shutil.rmtree(tmp, ignore_errors=True)
        return False


def load(path: str, rank: int, world_size):
    """The cached ``(RankRead, CommPart | None)`` of the rank stream ``path``, or None."""
    entry = _entry(path, rank, world_size)
    try:
        doc = json.loads((entry / "part.json").read_text())
        if doc["stamp"] != _stamp(path):
            return None
        s = doc["stream"]
        stream = Stream([tuple(r) for r in s["records"]], s["last_time"], s["diagnostics"])
        tables = [(name, _read_table(entry / f"t{i:05d}.arrow")) for i, name in enumerate(doc["names"])]
        c, comm = doc["comm"], None
        if c is not None:
            leftover = _frame(_read_table(entry / "comm_leftover.arrow")) if c["leftover"] else None
            comm = CommPart(_frame(_read_table(entry / "comm_stats.arrow")), leftover, set(c["timing_sources"]),
                            _frame(_read_table(entry / "comm_bandwidth.arrow")), c["world_size"],
                            c["needs_world_size"])
        return RankRead(rank, tables, stream), comm
    except Exception:  # noqa: BLE001 - a damaged or partial entry is rebuilt, never fatal
        return None
