"""GPU memory uneven across ranks, on the streams of a real 2-rank run (the tiny QLoRA fixture, CPU ranks)
whose ``performance`` records are given allocator peaks here, in memory only: rank 0 reserving 3.1 GiB
more than rank 1 is named; 1 GiB apart is not (the threshold is 2 GiB)."""

from __future__ import annotations

import shutil

import orjson
import pytest

import logkit
from logkit.analysis.findings.memory_balance import uneven_memory_findings
from tests.support.launch import fixture_session


def _with_peaks(tmp_path, peaks: dict[int, tuple[float, float]]):
    """The fixture's 2-rank session copied, each rank's performance records given (allocated, reserved) MiB."""
    src = fixture_session(2)
    dst = tmp_path / src.name
    shutil.copytree(src, dst)
    for rank, (allocated, reserved) in peaks.items():
        (stream,) = dst.glob(f"*_rank{rank}.jsonl")
        out = []
        for line in stream.read_bytes().splitlines():
            record = orjson.loads(line)
            if record.get("type") == "performance":
                record.update(peak_allocated_mb=allocated, peak_reserved_mb=reserved)
            out.append(orjson.dumps(record))
        stream.write_bytes(b"\n".join(out) + b"\n")
    return logkit.load_session(dst)


def test_a_rank_with_gigabytes_more_is_named(tmp_path):
    session = _with_peaks(tmp_path, {0: (7800.0, 9000.0), 1: (4700.0, 5800.0)})
    assert session.perf["peak_reserved_mb"].notna().sum() == 6  # the fixture's 3 performance records a rank
    (f,) = uneven_memory_findings(session)
    # 9000 - 5800 = 3200 MiB = 3.125 GiB
    assert f.ranks == (0,) and f.title == "Rank 0 holds 3.1 GiB more GPU memory than rank 1"
    assert "8.8 GiB at its peak" in f.detail and "7.6 GiB against 4.6 GiB" in f.detail
    assert f.extra["peak_reserved_mib"] == {0: 9000.0, 1: 5800.0}
    assert f.evidence and f.evidence[0].endswith("_rank0.jsonl")


def test_ranks_a_gigabyte_apart_are_even(tmp_path):
    assert uneven_memory_findings(_with_peaks(tmp_path, {0: (5000.0, 6824.0), 1: (4700.0, 5800.0)})) == []


def test_cpu_ranks_without_peaks_say_nothing():
    assert uneven_memory_findings(logkit.load_session(fixture_session(2))) == []


@pytest.mark.parametrize("top", [0, 1])
def test_the_rank_named_is_the_one_holding_more(tmp_path, top):
    peaks = {top: (9000.0, 12000.0), 1 - top: (6000.0, 7000.0)}
    (f,) = uneven_memory_findings(_with_peaks(tmp_path, peaks))
    assert f.ranks == (top,)
