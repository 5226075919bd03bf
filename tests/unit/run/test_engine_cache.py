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
