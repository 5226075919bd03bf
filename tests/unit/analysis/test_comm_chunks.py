"""A rank's stream read in small chunks (``engine.rank_partial(..., chunk_bytes=...)``: its comm records
reduced chunk by chunk, ``comm_reduce.CommReducer``) gives the partial result of the whole-read path:
the per-(rank, op) figures ``communication_table`` computes from the whole comm frame of that rank
(bit for bit), the bandwidth curve's points of that frame, and, for a rank without step records, the
per-(op, step) durations its sync share is merged from; the figures also against the records read
here with the standard library."""

from __future__ import annotations

import json
import math
import statistics

import numpy as np
import pandas as pd
import pytest

from benchmarks.fleet import write_fleet
from logkit.analysis.kernels import comm_reduce, communication
from logkit.analysis.kernels.comm_records import step_times
from logkit.analysis.kernels.comm_reduce import bandwidth_points
from logkit.run import engine
from logkit.run.load import load_sessions
from tests.support.launch import REPO


def _whole(path, rank: int, world_size):
    """The whole-read path for one rank: its comm frame whole, reduced in one piece."""
    (session,) = [s for s in load_sessions(path.parent) if s.session_id == path.parent.name]
    comm = session.comm[session.comm["rank"] == rank].reset_index(drop=True)
    steps = session.steps[session.steps["rank"] == rank]
    reducer = comm_reduce.CommReducer()
    reducer.add_frame(comm)
    part = reducer.result(steps, world_size)
    return comm, part.stats, bandwidth_points(comm), step_times(steps)


def _chunked(path, rank: int, monkeypatch, chunk_bytes: int, world_size=None):
    chunks = []
    real = comm_reduce.CommReducer.add
    monkeypatch.setattr(comm_reduce.CommReducer, "add", lambda self, t: chunks.append(t.num_rows) or real(self, t))
    part = engine.rank_partial(str(path), rank, world_size, False, chunk_bytes)
    return part, chunks


@pytest.mark.parametrize("keep_world_size", [True, False])
def test_small_chunks_give_the_partial_of_the_whole_frame(tmp_path, monkeypatch, keep_world_size):
    folder = write_fleet(tmp_path, 3, steps=40, buckets=6, keep_world_size=keep_world_size, stepless_ranks=(2,))
    for rank in range(3):
        path = folder / f"{folder.name}_rank{rank}.jsonl"
        ws = None if keep_world_size else 3  # records without a group size: the merge's world size
        part, chunks = _chunked(path, rank, monkeypatch, 2048, ws)
        assert len(chunks) > 20 and sum(chunks) == 40 * 6  # many chunks, every record once
        comm, stats, points, st = _whole(path, rank, ws)
        pd.testing.assert_frame_equal(part.comm.stats, stats, check_exact=True)
        pd.testing.assert_frame_equal(part.comm.bandwidth, points, check_exact=True)
        assert part.comm.needs_world_size is not keep_world_size
        assert not any(name == "comm" for name, _ in part.read.tables)  # no comm rows come back
        if rank == 2:  # no step records: the per-(op, step) sums go to the merge
            assert st.empty
            expected = comm.groupby("step", sort=True)["duration_ms"].sum()
            assert part.comm.leftover["step"].tolist() == expected.index.astype(float).tolist()
            np.testing.assert_allclose(part.comm.leftover["dur"], expected.to_numpy(), rtol=1e-12)
        else:
            assert part.comm.leftover is None

        # the figures against the records read here
        records = [json.loads(line) for line in path.open() if '"communication"' in line]
        row = part.comm.stats.iloc[0]
        durations = sorted(r["duration_ms"] for r in records)
        pos = 0.95 * (len(durations) - 1)
        lo = math.floor(pos)
        p95 = durations[lo] + (durations[lo + 1] - durations[lo]) * (pos - lo)
        assert row["count"] == len(records)
        assert row["p50_ms"] == pytest.approx(statistics.median(durations), rel=1e-12)
        assert row["p95_ms"] == pytest.approx(p95, rel=1e-12)
        assert row["algbw_mb_s"] == pytest.approx(statistics.median(r["algbw_mb_s"] for r in records), rel=1e-12)
        bus = [r["busbw_mb_s"] if keep_world_size else r["algbw_mb_s"] * 2 * 2 / 3 for r in records]
        assert row["busbw_mb_s"] == pytest.approx(statistics.median(bus), rel=1e-12)
        assert row["total_bytes"] == sum(r["size_bytes"] for r in records)


def test_a_real_ranks_stream_in_small_chunks(monkeypatch):
    folder = REPO / "sample_logs/why_slow/logs/training_20261123_074813"
    for rank in (0, 1):
        path = folder / f"{folder.name}_rank{rank}.jsonl"
        part, chunks = _chunked(path, rank, monkeypatch, 1024)
        assert len(chunks) > 5
        _, stats, points, _ = _whole(path, rank, None)
        pd.testing.assert_frame_equal(part.comm.stats, stats, check_exact=True)
        pd.testing.assert_frame_equal(part.comm.bandwidth, points, check_exact=True)


def test_a_reader_that_gives_up_takes_its_comm_chunks_back(tmp_path, monkeypatch):
    """A blank line half way: the fast engine gives up after some chunks, the per-line engine reads the
    stream again; the chunks reduced before are dropped (``truncate``), not counted twice."""
    folder = write_fleet(tmp_path, 1, steps=30, buckets=4)
    path = folder / f"{folder.name}_rank0.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[: len(lines) // 2]) + b"\n" + b"".join(lines[len(lines) // 2:]))
    part, chunks = _chunked(path, 0, monkeypatch, 2048)
    assert sum(chunks) > 30 * 4  # read twice
    _, stats, _, _ = _whole(path, 0, None)
    assert stats["count"].tolist() == [30 * 4]
    pd.testing.assert_frame_equal(part.comm.stats, stats, check_exact=True)


@pytest.mark.parametrize("keep_world_size", [True, False])
def test_the_merged_table_equals_the_whole_frames_table(tmp_path, keep_world_size):
    """In this process (so that a mutation run sees it): the engine's merge of per-rank partials
    (``communication_table`` from the ``CommPart``s, a stepless rank's sync share from the lowest rank's
    steps) gives the table of the whole comm frame, cell for cell."""
    from logkit.run.load import load_for_analysis

    folder = write_fleet(tmp_path, 3, steps=12, buckets=3, keep_world_size=keep_world_size, stepless_ranks=(2,))
    loaded = load_for_analysis(folder.parent)
    (merged,), (parts,) = loaded.sessions, loaded.comm_parts
    (whole,) = load_sessions(folder.parent)
    assert len(parts) == 3 and merged.comm.empty and len(whole.comm) == 3 * 12 * 3
    got, expected = communication.communication_table(merged, parts), communication.communication_table(whole)
    assert len(expected) == 3 and expected["sync_share_of_step_time"].notna().all()
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-12)


def test_a_stepless_rank_with_two_ops_and_a_fleet_without_comm_records(tmp_path):
    """Two ops in one chunk of a stepless rank keep their per-step sums apart (the lowest rank's step
    times divide each op's own); a session whose streams hold no comm records has an empty table."""
    from logkit.run.load import load_for_analysis

    folder = write_fleet(tmp_path / "two_ops", 2, steps=12, buckets=2, stepless_ranks=(1,))
    stream = folder / f"{folder.name}_rank1.jsonl"
    lines = []
    for line in stream.read_bytes().splitlines():
        rec = json.loads(line)
        if rec["type"] == "communication" and rec.get("bucket") == 0:
            rec["op"], rec["duration_ms"] = "broadcast", 1.0 + rec["step"]  # its own durations: a mix-up shows
        lines.append(json.dumps(rec))
    stream.write_text("\n".join(lines) + "\n")
    loaded = load_for_analysis(folder.parent)
    (whole,) = load_sessions(folder.parent)
    got = communication.communication_table(loaded.sessions[0], loaded.comm_parts[0])
    expected = communication.communication_table(whole)
    one = expected.set_index(["rank", "op"]).loc[(1, "broadcast")]
    times = whole.steps.loc[whole.steps["rank"] == 0, "step_time_s"]
    assert one["sync_share_of_step_time"] == pytest.approx(sum(1.0 + s for s in range(1, 13)) / 1000 / times.sum())
    pd.testing.assert_frame_equal(got, expected, check_exact=False, rtol=1e-12)

    empty = write_fleet(tmp_path / "no_comm", 2, steps=5, buckets=0)
    loaded = load_for_analysis(empty.parent)
    assert loaded.comm_parts == [()] and communication.communication_table(loaded.sessions[0], ()).empty
