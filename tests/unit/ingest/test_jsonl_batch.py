"""Small streams parsed together (``jsonl_batch``) give the session each stream read on its own gives:
every frame, value for value, the diagnostics and the meta, over every session of ``sample_logs/`` and
over a session of a dozen ranks made from a real stream, each rank's stream damaged another way (a
record of another rank or session, a step logged twice, a NaN loss, a blank line, an invalid line, a
torn last line, an empty stream, bytes that are not UTF-8, an evaluation...). The rows still cite
their own file and line (read off the streams as written here)."""

from __future__ import annotations

import json
import shutil

import pandas as pd
import pytest

from logkit.ingest import jsonl_arrow, jsonl_batch
from logkit.ingest.discover import discover
from logkit.ingest.load import build_session
from tests.support.launch import REPO

SAMPLE = REPO / "sample_logs/why_slow/logs/training_20261123_074813"
SID = "training_20270101_000000"
RANKS = 14


def _one_by_one(monkeypatch, source):
    with monkeypatch.context() as m:
        m.setattr(jsonl_batch, "small", lambda path: False)
        return build_session(source)


def _same(a, b) -> None:
    for name in ("steps", "comm", "perf", "phases", "gpu", "evals", "events", "diagnostics"):
        pd.testing.assert_frame_equal(getattr(a, name), getattr(b, name), obj=name)
    assert a.meta.to_dict() == b.meta.to_dict()


def test_every_sample_session_reads_as_its_streams_one_by_one(monkeypatch):
    sources = [s for s in discover(REPO / "sample_logs") if s.rank_files]
    assert len(sources) > 10
    batched = 0
    for source in sources:
        batched += any(jsonl_batch.small(p) for p in source.rank_files.values())
        _same(build_session(source), _one_by_one(monkeypatch, source))
    assert batched > 10  # most sample streams are small: the batch path is what was compared


def _records() -> list[dict]:
    """The real rank-1 stream of a 2-rank run, its first 40 records (a start, steps, comm records...)."""
    lines = (SAMPLE / "training_20261123_074813_rank1.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines[:40]]


def _stream(rank: int) -> list[dict]:
    return [{**r, "session_id": SID, "rank": rank, "world_size": RANKS} for r in _records()]


def _first(records: list[dict], kind: str) -> int:
    return next(i for i, r in enumerate(records) if r["type"] == kind)


@pytest.fixture
def damaged(tmp_path):
    """A session of ``RANKS`` small streams of a real run, most damaged one way each; returns (folder,
    the 1-based line of what each damaged stream holds that others do not)."""
    folder = tmp_path / SID
    folder.mkdir()
    lines: dict[int, int] = {}
    step = "training_step_complete"
    for rank in range(RANKS):
        records = _stream(rank)
        raw = [json.dumps(r).encode() for r in records]
        i = _first(records, step)
        if rank == 2:  # a record of rank 7 in rank 2's stream
            raw.insert(i + 1, json.dumps({**records[i], "rank": 7}).encode())
            lines[rank] = i + 2
        elif rank == 3:  # a step logged twice
            raw.insert(i + 1, raw[i])
            lines[rank] = i + 2
        elif rank == 4:  # a loss logged as NaN (what Python's json writes)
            raw[i] = json.dumps({**records[i], "metrics": {**records[i]["metrics"], "loss": float("nan")}}).encode()
            lines[rank] = i + 1
        elif rank == 5:  # a blank line
            raw.insert(3, b"")
        elif rank == 6:  # a line that is no JSON
            raw.insert(3, b"{not json")
            lines[rank] = 4
        elif rank == 8:  # a record of another session
            raw.insert(i + 1, json.dumps({**records[i + 1], "session_id": "other"}).encode())
            lines[rank] = i + 2
        elif rank == 9:  # a negative step time
            raw[i] = json.dumps({**records[i], "timing": {**records[i]["timing"], "step_time_seconds": -1.0}}).encode()
            lines[rank] = i + 1
        elif rank == 10:  # an evaluation
            raw.insert(i + 1, json.dumps({"type": "evaluation", "elapsed_s": 9.5, "rank": 10, "session_id": SID,
                                          "step": 1, "metrics": {"eval_loss": 0.25}}).encode())
        elif rank == 11:  # records that name no rank
            raw = [json.dumps({k: v for k, v in r.items() if k != "rank"}).encode() for r in records]
        elif rank == 12:  # bytes that are not UTF-8 in a message
            raw[1] = raw[1].replace(b'"message": "', b'"message": "\xff', 1)
        data = b"\n".join(raw) + b"\n"
        if rank == 13:  # a writer cut off mid-line
            data += b'{"type": "training_st'
        (folder / f"{SID}_rank{rank}.jsonl").write_bytes(data)
    (folder / f"{SID}_rank14.jsonl").write_bytes(b"")  # an empty stream
    return folder, lines


def test_a_session_of_damaged_small_streams_reads_as_each_stream_alone(damaged, monkeypatch):
    folder, lines = damaged
    (source,) = discover(folder)
    alone = []
    real = jsonl_arrow.read_streams

    def counted(streams, *args, **kwargs):
        streams = list(streams)
        alone.extend(rank for _, rank, _ in streams)
        return real(streams, *args, **kwargs)

    monkeypatch.setattr(jsonl_arrow, "read_streams", counted)
    session = build_session(source)
    # refused by the fast engine (blank line, invalid line, not UTF-8, torn, empty): read alone; the rest
    # parsed together (pyarrow reads NaN), those the checks note (or a NaN loss) mapped each with its checks
    assert sorted(set(alone)) == [5, 6, 12, 13, 14]
    _same(session, _one_by_one(monkeypatch, source))
    events = session.events
    checks = events[events["kind"] == "record_check"]
    cited = dict(zip(checks["subkind"], checks["source"], strict=True))
    assert cited["foreign_rank"] == f"{SID}_rank2.jsonl:{lines[2]}"
    assert cited["duplicate_step"] == f"{SID}_rank3.jsonl:{lines[3]}"
    assert cited["foreign_session"] == f"{SID}_rank8.jsonl:{lines[8]}"
    assert cited["negative_step_time"] == f"{SID}_rank9.jsonl:{lines[9]}"
    nan = events[events["kind"] == "nan_detected"]
    assert list(nan["source"]) == [f"{SID}_rank4.jsonl:{lines[4]}"]
    notes = session.diagnostics
    assert lines[6] in set(notes[notes["file"].str.endswith(f"{SID}_rank6.jsonl")]["line"])
    assert session.evals[["rank", "name", "value"]].values.tolist() == [[10, "eval_loss", 0.25]]


def test_rows_of_streams_read_together_cite_their_own_file_and_line(tmp_path):
    folder = tmp_path / SID
    folder.mkdir()
    for rank in range(12):
        records = _stream(rank)
        (folder / f"{SID}_rank{rank}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    records = _stream(0)
    comm_lines = [i + 1 for i, r in enumerate(records) if r["type"] == "communication"]  # 1-based, as written
    steps = [r["step"] for r in records if r["type"] == "training_step_complete"]
    (source,) = discover(folder)
    session = build_session(source)
    comm = session.comm
    assert len(comm) == 12 * len(comm_lines)
    for rank in (0, 5, 11):
        assert list(comm[comm["rank"] == rank]["source"]) == [f"{SID}_rank{rank}.jsonl:{n}" for n in comm_lines]
    assert list(session.steps[session.steps["rank"] == 11]["step"]) == steps
    assert session.meta.ranks_found == list(range(12))


def test_a_batch_larger_than_the_bound_is_read_in_several(tmp_path, monkeypatch):
    folder = tmp_path / SID
    shutil.copytree(SAMPLE, folder)
    size = (folder / "training_20261123_074813_rank0.jsonl").stat().st_size
    monkeypatch.setattr(jsonl_batch, "BATCH_BYTES", size)  # one stream per batch
    (source,) = discover(folder)
    _same(build_session(source), _one_by_one(monkeypatch, source))
