"""What the engine's map gives for one rank (``RankPartial``), and how it is kept in the cache: the
rank's frame tables as Arrow IPC files (a frame's tables of one schema, in file order, as the batches of
one file: a few files a rank, not one per chunk and frame), its comm reductions (``CommPart``) as Arrow IPC
files, and one JSON document (the stream's whole records and diagnostics, the comm part's facts)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pyarrow as pa

from logkit.analysis.kernels.comm_reduce import CommPart
from logkit.ingest.jsonl_lines import Stream
from logkit.ingest.load import RankRead
from logkit.run import cache

_COMM_FRAMES = ("stats", "bandwidth", "leftover")


@dataclass
class RankPartial:
    """What the map gives for one rank: its ``RankRead`` without comm tables, and their ``CommPart``."""

    read: RankRead
    comm: CommPart | None


def _write_table(table: pa.Table, path: Path) -> None:
    _write_tables([table], path)


def _write_tables(tables: list[pa.Table], path: Path) -> None:
    """Tables of one schema as the batches of one file."""
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_file(sink, tables[0].schema) as writer:
        for table in tables:
            writer.write_table(table)


def _runs(tables: list[tuple[str, pa.Table]]) -> list[tuple[str, list[pa.Table]]]:
    """Each frame's tables, in file order, cut where the schema changes: (frame, tables of one schema).
    A frame's rows keep their order; the frames' tables need not keep theirs between frames (each frame is
    built apart)."""
    runs: list[tuple[str, list[pa.Table]]] = []
    last: dict[str, int] = {}
    for name, table in tables:
        i = last.get(name)
        if i is not None and runs[i][1][-1].schema.equals(table.schema, check_metadata=True):
            runs[i][1].append(table)
        else:
            last[name] = len(runs)
            runs.append((name, [table]))
    return runs


def _read_table(path: Path) -> pa.Table:
    with pa.OSFile(str(path), "rb") as source:
        return pa.ipc.open_file(source).read_all()


def _fill(part: RankPartial):
    def fill(folder: Path) -> None:
        runs = _runs(part.read.tables)
        for i, (_, tables) in enumerate(runs):
            _write_tables(tables, folder / f"t{i:05d}.arrow")
        stream, c = part.read.stream, part.comm
        doc = {"names": [name for name, _ in runs], "comm": None,
               "stream": {"records": stream.records, "last_time": stream.last_time, "diagnostics": stream.diagnostics}}
        if c is not None:
            doc["comm"] = {"timing_sources": sorted(c.timing_sources), "world_size": c.world_size,
                           "needs_world_size": c.needs_world_size, "leftover": c.leftover is not None}
            for name in _COMM_FRAMES:
                frame = getattr(c, name)
                if frame is not None:
                    _write_table(pa.Table.from_pandas(frame, preserve_index=False), folder / f"comm_{name}.arrow")
        (folder / "part.json").write_text(json.dumps(doc))
    return fill


def _frame(folder: Path, name: str) -> pd.DataFrame:
    return _read_table(folder / f"comm_{name}.arrow").to_pandas()  # text as pandas makes it from Python values


def _reader(rank: int):
    def read(folder: Path) -> RankPartial:
        doc = json.loads((folder / "part.json").read_text())
        s = doc["stream"]
        stream = Stream([tuple(r) for r in s["records"]], s["last_time"], s["diagnostics"])
        tables = [(name, _read_table(folder / f"t{i:05d}.arrow")) for i, name in enumerate(doc["names"])]
        c, comm = doc["comm"], None
        if c is not None:
            comm = CommPart(_frame(folder, "stats"), _frame(folder, "leftover") if c["leftover"] else None,
                            set(c["timing_sources"]), _frame(folder, "bandwidth"), c["world_size"],
                            c["needs_world_size"])
        return RankPartial(RankRead(rank, tables, stream), comm)
    return read


def load(path: str, rank: int, world_size) -> RankPartial | None:
    """The cached partial result of the rank stream ``path``, or None."""
    return cache.load_rank(path, rank, world_size, _reader(rank))


def store(path: str, rank: int, world_size, part: RankPartial) -> bool:
    """Keep ``part`` in the cache for the rank stream ``path``."""
    return cache.store_rank(path, rank, world_size, _fill(part))
