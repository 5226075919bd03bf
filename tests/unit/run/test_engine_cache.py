"""The engine's cache of per-rank partial results: a second read takes every rank from it, with the
same communication rows as the rank streams counted here; a stream written since is read again."""

from __future__ import annotations

import json
import os

from benchmarks.fleet import write_fleet
from logkit.analysis import analyze
from logkit.run import engine
from logkit.run.load import load_for_analysis


def test_a_second_read_comes_from_the_cache_until_a_stream_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGKIT_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(engine, "PARTIAL_CACHE_MIN_BYTES", 0)  # these streams are small: cached all the same
    folder = write_fleet(tmp_path / "logs", 3, steps=6, buckets=2)
    reads = []
    real = engine.read_ranks

    def spy(streams, *args):
        reads.extend(rank for _, rank in streams)
        return real(streams, *args)

    monkeypatch.setattr(engine, "read_ranks", spy)

    first = _analyze(load_for_analysis(tmp_path / "logs", cache=True)).communication
    assert sorted(reads) == [0, 1, 2]
    second = _analyze(load_for_analysis(tmp_path / "logs", cache=True)).communication
    assert sorted(reads) == [0, 1, 2]  # nothing read again
    for rank in range(3):
        path = folder / f"{folder.name}_rank{rank}.jsonl"
        comm = [json.loads(line) for line in path.open() if '"communication"' in line]
        row = second[second["rank"] == rank].iloc[0]
        assert row["count"] == len(comm) == 12
        assert row["total_bytes"] == sum(c["size_bytes"] for c in comm)
        assert row["sources"] == f"{path.name}:{_line(path, comm[0])} .. {path.name}:{_line(path, comm[-1])}"
    assert first.equals(second)

    stat = os.stat(path)
    os.utime(path, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    load_for_analysis(tmp_path / "logs", cache=True)
    assert sorted(reads) == [0, 1, 2, 2]


def _analyze(loaded):
    return analyze(loaded.sessions, comm_parts=loaded.comm_parts)


def _line(path, record) -> int:
    for number, line in enumerate(path.open(), start=1):
        if json.loads(line) == record:
            return number
    raise AssertionError(record)


def test_a_rank_partial_keeps_each_frames_tables_in_order_in_few_files(tmp_path):
    """The cache writes a frame's tables of one schema as one file (not one file per chunk): read back, each
    frame has its rows in their order, a change of schema cuts a new file, frames interleaved come apart."""
    import pyarrow as pa

    from logkit.ingest.jsonl_lines import Stream
    from logkit.ingest.load import RankRead
    from logkit.run import partials

    a = [pa.table({"step": [i, i + 1]}) for i in (0, 2, 4)]
    wider = pa.table({"step": [6], "loss": [0.5]})
    tables = [("steps", a[0]), ("events", pa.table({"kind": ["x"]})), ("steps", a[1]), ("steps", wider),
              ("steps", a[2]), ("events", pa.table({"kind": ["y"]}))]
    assert [(name, len(run)) for name, run in partials._runs(tables)] == [("steps", 2), ("events", 2),
                                                                         ("steps", 1), ("steps", 1)]
    part = partials.RankPartial(RankRead(3, tables, Stream([], None, [])), None)
    partials._fill(part)(tmp_path)
    assert len(list(tmp_path.glob("t*.arrow"))) == 4
    back = partials._reader(3)(tmp_path).read
    steps = [t for name, t in back.tables if name == "steps"]
    assert pa.concat_tables([t.select(["step"]) for t in steps]).column("step").to_pylist() == [0, 1, 2, 3, 6, 4, 5]
    assert [k for name, t in back.tables if name == "events" for k in t.column("kind").to_pylist()] == ["x", "y"]


def test_small_streams_are_read_again_not_cached(tmp_path, monkeypatch):
    """A stream under ``PARTIAL_CACHE_MIN_BYTES`` costs less to read than its cache entry to write and read:
    thousands of tiny ranks write no thousands of entries."""
    monkeypatch.setenv("LOGKIT_CACHE_DIR", str(tmp_path / "cache"))
    write_fleet(tmp_path / "logs", 3, steps=6, buckets=2)
    load_for_analysis(tmp_path / "logs", cache=True)
    assert not list((tmp_path / "cache").rglob("part.json"))
