"""The fast engine parses chunks on threads of their own, each at the columns of the record types
most of its rows are (``mapping.read_at``), and its other rows again at theirs. Whatever the mix of
types along a stream, and however streams are read at once, it gives the per-line engine's frames."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import orjson
import pandas as pd
import pytest

from logkit.ingest import jsonl_arrow, jsonl_lines
from logkit.ingest.assemble import Frames
from logkit.ingest.mapping import RAW_SCHEMA, read_at
from logkit.schema.records import FRAME_SPECS

SID = "s_20250101_000000"


def _record(i: int, kind: str, rank: int) -> dict:
    base = {"type": kind, "elapsed_s": 0.5 * i, "level": "INFO", "message": f"{kind} {i}", "session_id": SID,
            "rank": rank, "step": i}
    extra = {
        "communication": {"op": "gradient_sync", "size_bytes": 1024, "duration_ms": 1.5, "algbw_mb_s": 2.5,
                          "busbw_mb_s": 3.5, "group_size": 2, "bucket": i % 4, "timing_source": "cuda_event"},
        "training_step_complete": {"epoch": 0.01 * i, "timing": {"step_time_seconds": 0.4, "data_time_seconds": 0.01},
                                   "metrics": {"loss": 2.0 - 0.001 * i, "learning_rate": 1e-4, "grad_norm": 0.8,
                                               "samples_per_second": 80.0, "total_batch_size": 32}},
        "gpu_snapshot": {"hostname": "node1", "devices": [{"index": rank, "utilization_percent": 90.0,
                                                           "memory_used_mb": 1000.0, "power_w": 300.0}]},
        "performance": {"window_steps": 10, "avg_step_time_s": 0.4, "throughput_samples_s": 80.0,
                        "total_batch_size": 32},
        "anomaly": {"kind": "slow_step", "value": 1.5, "threshold": 1.0, "status": "open"},
        "evaluation": {"metrics": {"eval_loss": 1.9}},
    }
    return {**base, **extra.get(kind, {})}


def _stream(path, rank: int, parts: list[tuple[int, list[str]]]) -> None:
    """``parts``: (records, the types they cycle through), one after the other in the stream."""
    lines, i = [_record(0, "session_start", rank)], 0
    for count, kinds in parts:
        for _ in range(count):
            i += 1
            lines.append(_record(i, kinds[i % len(kinds)], rank))
    lines.append(_record(i + 1, "session_end", rank))
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in lines))


def _both(path, rank: int, chunk_bytes: int | None = None) -> tuple[dict, dict]:
    fast, lines = Frames(), Frames()
    assert jsonl_arrow.read_stream(path, rank, fast, chunk_bytes=chunk_bytes) is not None
    assert not jsonl_lines.read_stream(path, rank, lines.add).diagnostics
    return fast.result(), lines.result()


def _same(fast: dict, lines: dict) -> None:
    for name, frame in lines.items():
        pd.testing.assert_frame_equal(fast[name], frame, obj=name)


@pytest.mark.parametrize("chunk_bytes", [2000, 9000, None])
def test_a_stream_whose_mix_of_types_changes_gives_the_per_line_engines_frames(tmp_path, chunk_bytes):
    steps, comm = FRAME_SPECS["steps"].type, FRAME_SPECS["comm"].type
    path = tmp_path / f"{SID}_rank1.jsonl"
    _stream(path, 1, [
        (300, [comm, comm, comm, steps] * 9 + ["gpu_snapshot", "performance"]),  # GPU, performance rows rare
        (120, ["anomaly", comm, "evaluation"]),  # events a third of the rows: their columns parsed
        (200, ["gpu_snapshot"]),  # GPU snapshots only
        (150, [steps, comm, "anomaly"] * 20 + ["gpu_snapshot"]),  # back to rare events and GPU rows
    ])
    fast, lines = _both(path, 1, chunk_bytes)
    _same(fast, lines)
    assert len(fast["gpu"]) > 200 and len(fast["events"]) > 40 and len(fast["steps"]) > 100


@pytest.mark.parametrize("asked", [60_000, 100_000])
def test_chunks_sized_to_the_stream_and_mapped_together_give_the_per_line_engines_frames(tmp_path, monkeypatch,
                                                                                       asked):
    """A stream read in chunks smaller than asked (a ``STREAM_CHUNKS``-th of it): its chunks are mapped a few
    at a time (as many as make the size asked), those whose rare rows were parsed apart at other types apart
    from the others; the frames are the per-line engine's."""
    steps, comm = FRAME_SPECS["steps"].type, FRAME_SPECS["comm"].type
    monkeypatch.setattr(jsonl_arrow, "MIN_CHUNK_BYTES", 1000)
    monkeypatch.setattr(jsonl_arrow, "SMALL_CHUNK_BYTES", 1000)
    monkeypatch.setattr(jsonl_arrow, "STREAM_CHUNKS", 9)
    parsed, mapped = [], []
    chunk, add = jsonl_arrow._chunk, jsonl_arrow._add
    monkeypatch.setattr(jsonl_arrow, "_chunk", lambda *a: (parsed.append(1), chunk(*a))[1])
    monkeypatch.setattr(jsonl_arrow, "_add", lambda stream, table, *a, **k: (mapped.append(table.num_rows),
                                                                           add(stream, table, *a, **k))[1])
    path = tmp_path / f"{SID}_rank1.jsonl"
    _stream(path, 1, [
        (300, [comm, comm, comm, steps] * 9 + ["gpu_snapshot", "performance"]),
        (120, ["anomaly", comm, "evaluation"]),
        (200, ["gpu_snapshot"]),
        (150, [steps, comm, "anomaly"] * 20 + ["gpu_snapshot"]),
    ])
    assert path.stat().st_size // jsonl_arrow.STREAM_CHUNKS < asked // 2  # chunks of half the size asked, or less
    fast, lines = _both(path, 1, chunk_bytes=asked)
    _same(fast, lines)
    assert 1 < len(mapped) < len(parsed)  # mapped a few chunks at a time, not one by one, not all at once
    assert sum(mapped) == 772  # every line (session start and end, and the 770 between)


def test_streams_read_at_once_give_what_each_gives_alone(tmp_path):
    paths = []
    for rank in range(6):
        path = tmp_path / f"{SID}_rank{rank}.jsonl"
        kinds = ["communication", "training_step_complete"] + (["anomaly"] if rank % 2 else ["gpu_snapshot"])
        _stream(path, rank, [(400 + 50 * rank, kinds)])
        paths.append(path)

    def read(rank: int) -> dict:
        frames = Frames()
        assert jsonl_arrow.read_stream(paths[rank], rank, frames, chunk_bytes=4000) is not None
        return frames.result()

    alone = [read(rank) for rank in range(6)]
    with ThreadPoolExecutor(4) as pool:
        together = list(pool.map(read, [r for _ in range(3) for r in range(6)]))
    for i, frames in enumerate(together):
        _same(frames, alone[i % 6])


def test_a_wrong_type_in_a_rare_rows_column_is_left_to_the_per_line_engine(tmp_path):
    path = tmp_path / f"{SID}_rank0.jsonl"
    _stream(path, 0, [(400, ["communication"] * 20 + ["gpu_snapshot"])])
    text = path.read_bytes().replace(b'"hostname":"node1"', b'"hostname":5', 1)
    path.write_bytes(text)
    assert jsonl_arrow.read_stream(path, 0, Frames(), chunk_bytes=3000) is None


def test_the_columns_a_chunk_is_parsed_at():
    steps_comm = read_at(frozenset({FRAME_SPECS["steps"].type, FRAME_SPECS["comm"].type}))
    assert {"op", "metrics", "session_id", "rank"} <= set(steps_comm.names)
    assert not {"message", "level", "devices", "hostname"} & set(steps_comm.names)
    assert read_at(frozenset({"evaluation"})).names == [f.name for f in RAW_SCHEMA if f.name in
                                                        ("elapsed_s", "rank", "step", "type", "session_id")]


def test_streams_read_as_one_flow_give_each_what_it_gives_alone(tmp_path):
    """``read_streams``: a session's streams as one flow (the next parsed while the one before is mapped).
    A stream the fast engine refuses (an invalid line), one torn by a kill and an empty one in the
    middle of the flow change nothing for the others, and leave their own frames as they were."""
    paths = []
    for rank in range(6):
        path = tmp_path / f"{SID}_rank{rank}.jsonl"
        _stream(path, rank, [(300 + 40 * rank, ["communication", "training_step_complete", "gpu_snapshot"])])
        paths.append(path)
    lines = paths[1].read_bytes().splitlines(keepends=True)
    paths[1].write_bytes(b"".join(lines[:-3] + [b"{not json\n"] + lines[-3:]))  # refused after chunks mapped
    paths[2].write_bytes(paths[2].read_bytes() + b'{"type": "communication", "elapsed_s": 9')  # torn
    paths[4].write_bytes(b"")  # empty: refused

    def alone(rank: int):
        frames = Frames()
        return jsonl_arrow.read_stream(paths[rank], rank, frames, chunk_bytes=3000), frames

    flow = [(path, rank, Frames()) for rank, path in enumerate(paths)]
    streams = list(jsonl_arrow.read_streams(flow, chunk_bytes=3000))
    assert [s is None for s in streams] == [False, True, False, False, True, False]
    for rank, (_, _, frames) in enumerate(flow):
        stream, frames_alone = alone(rank)
        assert (stream is None) == (streams[rank] is None)
        if stream is None:
            assert all(frame.empty for frame in frames.result().values())
            continue
        _same(frames.result(), frames_alone.result())
        assert streams[rank].records == stream.records and streams[rank].last_time == stream.last_time
        assert streams[rank].diagnostics == stream.diagnostics
    # and what each holds is the file's: rank 3's GPU snapshots, rank 2's torn last line noted at its line
    text = paths[3].read_bytes()
    assert len(flow[3][2].result()["gpu"]) == text.count(b'"gpu_snapshot"') > 100
    (torn,) = streams[2].diagnostics
    assert torn["line"] == paths[2].read_bytes().count(b"\n") + 1


@pytest.mark.parametrize("chunk_bytes", [3000, None])
def test_rare_rows_the_record_checks_leave_out_are_left_out_of_their_frames(tmp_path, chunk_bytes, monkeypatch):
    """A chunk's rare rows (GPU snapshots, performance records, events) are mapped from their own parse;
    those of another rank or session (the record checks) stay out of every frame, as with the
    per-line engine, and are noted once each."""
    # the first chunk parsed at the steps' and comm records' columns, whatever stream was read before
    monkeypatch.setattr(jsonl_arrow, "_KINDS", [frozenset({"communication", "training_step_complete"})])
    path = tmp_path / f"{SID}_rank0.jsonl"
    _stream(path, 0, [(600, ["communication"] * 6 + ["training_step_complete", "gpu_snapshot", "performance",
                                                      "anomaly"])])
    out = []
    for i, line in enumerate(path.read_bytes().splitlines(keepends=True)):
        if i % 50 == 7 and b'"gpu_snapshot"' in line:
            line = line.replace(b'"rank":0', b'"rank":3')
        elif i % 50 == 8 and b'"performance"' in line:
            line = line.replace(SID.encode(), b"other_20250101_000000")
        out.append(line)
    path.write_bytes(b"".join(out))
    fast, lines = _both(path, 0, chunk_bytes)
    _same(fast, lines)
    checks = fast["events"][fast["events"]["kind"] == "record_check"]
    assert sorted(checks["subkind"].value_counts().items()) == [("foreign_rank", 12), ("foreign_session", 12)]
    gpu_rows = sum(b'"gpu_snapshot"' in x and b'"rank":0' in x for x in out)
    assert len(fast["gpu"]) == gpu_rows == 60 - 12


def test_streams_sharing_one_frames_keep_their_order_with_a_refused_one_among_them(tmp_path):
    """A session's streams read as one flow into one ``Frames`` (``build_session``): a stream refused
    after some of its chunks were mapped gives them back and is read line by line in its turn, before
    the next stream's rows, while that stream's chunks are already parsed."""
    paths = []
    for rank in range(4):
        path = tmp_path / f"{SID}_rank{rank}.jsonl"
        _stream(path, rank, [(250, ["communication", "training_step_complete", "anomaly"])])
        paths.append(path)
    lines = paths[1].read_bytes().splitlines(keepends=True)
    paths[1].write_bytes(b"".join(lines[:-3] + [b"{not json\n"] + lines[-3:]))

    def per_line(path, rank, frames):
        return jsonl_lines.read_stream(path, rank, frames.add)

    shared = Frames()
    streams = list(jsonl_arrow.read_streams([(p, r, shared) for r, p in enumerate(paths)], chunk_bytes=2500,
                                            fallback=per_line))
    one_by_one = Frames()
    for rank, path in enumerate(paths):
        jsonl_arrow.read_stream(path, rank, one_by_one) or per_line(path, rank, one_by_one)
    frames = shared.result()
    _same(frames, one_by_one.result())
    assert streams[1].diagnostics and all(s is not None for s in streams)
    steps = frames["steps"]
    assert steps["rank"].tolist() == sorted(steps["rank"].tolist())  # rank by rank, in file order
    assert steps.groupby("rank").size().tolist() == [p.read_bytes().count(b'"training_step_complete"') for p in paths]


def test_a_line_longer_than_the_parsers_block_is_taken_whole(tmp_path, monkeypatch):
    """A chunk is parsed in blocks of ``BLOCK_BYTES``, or of its longest line: a session_start with a
    long config (here 3x the block) among ordinary records is parsed, not refused."""
    monkeypatch.setattr(jsonl_arrow, "BLOCK_BYTES", 4096)
    path = tmp_path / f"{SID}_rank0.jsonl"
    _stream(path, 0, [(600, ["communication"] * 3 + ["training_step_complete"])])
    first, rest = path.read_bytes().split(b"\n", 1)
    start = orjson.loads(first)
    start["config"] = {"notes": "x" * 3 * 4096}
    path.write_bytes(orjson.dumps(start) + b"\n" + rest)
    fast, lines = _both(path, 0, chunk_bytes=64 << 10)  # the fast engine takes it (not None)
    _same(fast, lines)
    assert len(fast["comm"]) == 450 and len(fast["steps"]) == 150
