"""Records a rank's stream must not hold are repaired with a note or set aside, never silently
counted: a step given as text, another rank's or session's records, a step logged twice, a
negative step time, an absurd batch size. Expected values are computed here from the records
the test wrote, never from logkit's output."""

from __future__ import annotations

import orjson
import pandas as pd
import pytest

from logkit.ingest import jsonl_arrow, load
from logkit.ingest.assemble import Frames
from logkit.run.load import load_session
from tests.support.synth import rank_file, write_session

STEP = "training_step_complete"


@pytest.fixture(params=["fast", "per-line"])
def engine(request, monkeypatch):
    monkeypatch.setattr(load, "FAST_JSONL", request.param == "fast")
    return request.param


def _session(tmp_path, sid: str, edit, step_times=(0.5,) * 10):
    """A one-rank session whose stream ``edit(records)`` changed; returns (folder, records as written)."""
    folder = write_session(tmp_path, sid, step_times=step_times, summary=False)
    path = rank_file(folder, sid, 0)
    records = [orjson.loads(line) for line in path.read_bytes().splitlines()]
    records = edit(records)
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return folder, records


def _line_of(records: list[dict], pick) -> int:
    return next(i for i, r in enumerate(records, start=1) if pick(r))


def _checks(session) -> list[tuple[str, str, object]]:
    e = session.events[session.events["kind"] == "record_check"]
    return [(sub, src, None if pd.isna(step) else int(step))
            for sub, src, step in zip(e["subkind"], e["source"], e["step"], strict=True)]


def test_a_step_given_as_text_is_read_as_its_number_with_a_note(tmp_path, engine):
    def edit(recs):
        steps = [r for r in recs if r["type"] == STEP]
        steps[3]["step"] = "4"
        steps[5]["metrics"]["loss"] = "abc"
        return recs

    folder, recs = _session(tmp_path, "text", edit)
    s = load_session(folder)
    assert s.steps["step"].tolist() == list(range(1, 11))
    assert pd.isna(s.steps.loc[s.steps["step"] == 6, "loss"].iloc[0])  # "abc" is no loss: unknown, not zero
    four, six = _line_of(recs, lambda r: r.get("step") == "4"), _line_of(recs, lambda r: r.get("metrics", {}).get("loss") == "abc")
    assert _checks(s) == [("numeric_text", f"text_rank0.jsonl:{four}", 4), ("not_a_number", f"text_rank0.jsonl:{six}", 6)]
    messages = s.events.loc[s.events["kind"] == "record_check", "message"].tolist()
    assert messages == ["step given as text '4': read as 4", "loss given as 'abc', not a number: read as unknown"]


def test_records_of_another_rank_or_session_are_left_out(tmp_path, engine):
    def edit(recs):
        steps = [r for r in recs if r["type"] == STEP]
        steps[2]["rank"] = 1
        steps[6]["session_id"] = "another_run"
        return recs

    folder, recs = _session(tmp_path, "mixed", edit)
    s = load_session(folder)
    assert s.steps["step"].tolist() == [1, 2, 4, 5, 6, 8, 9, 10]
    rank1 = _line_of(recs, lambda r: r.get("rank") == 1)
    other = _line_of(recs, lambda r: r.get("session_id") == "another_run")
    assert _checks(s) == [("foreign_rank", f"mixed_rank0.jsonl:{rank1}", 3),
                          ("foreign_session", f"mixed_rank0.jsonl:{other}", 7)]
    assert set(s.steps["rank"]) == {0}


def test_the_notes_come_in_line_order_whichever_check_found_them(tmp_path, engine, monkeypatch):
    """The checks run one after the other (another rank, then another session): a record of another
    session above one of another rank is still noted first, as the file has them, also in a chunk of
    the fast engine that holds no other event."""
    monkeypatch.setattr(jsonl_arrow, "CHUNK_BYTES", 1500)

    def edit(recs):
        steps = [r for r in recs if r["type"] == STEP]
        steps[3]["session_id"] = "another_run"  # lines 5 and 6: one chunk of 1500 bytes, no event in it
        steps[4]["rank"] = 1
        return recs

    folder, recs = _session(tmp_path, "order", edit)
    s = load_session(folder)
    other = _line_of(recs, lambda r: r.get("session_id") == "another_run")
    rank1 = _line_of(recs, lambda r: r.get("rank") == 1)
    assert other < rank1
    assert _checks(s) == [("foreign_session", f"order_rank0.jsonl:{other}", 4),
                          ("foreign_rank", f"order_rank0.jsonl:{rank1}", 5)]


def test_a_step_logged_twice_is_counted_once_the_first_kept(tmp_path, engine):
    def edit(recs):
        i = recs.index([r for r in recs if r["type"] == STEP][3])
        again = orjson.loads(orjson.dumps(recs[i]))
        again["timing"]["step_time_seconds"] = 9.0  # the copy differs: the first one stands
        recs.insert(i + 1, again)
        return recs

    folder, recs = _session(tmp_path, "twice", edit)
    s = load_session(folder)
    assert s.steps["step"].tolist() == list(range(1, 11))
    assert s.steps["step_time_s"].tolist() == [0.5] * 10
    second = [i for i, r in enumerate(recs, start=1) if r.get("step") == 4 and r["type"] == STEP][1]
    assert _checks(s) == [("duplicate_step", f"twice_rank0.jsonl:{second}", 4)]


def test_a_repeat_across_chunks_of_the_fast_engine_is_found(tmp_path):
    folder, recs = _session(tmp_path, "chunks", lambda recs: recs + [r for r in recs if r["type"] == STEP][:2],
                            step_times=(0.5,) * 40)
    path = rank_file(folder, "chunks", 0)
    frames = Frames()
    assert jsonl_arrow.read_stream(path, 0, frames, chunk_bytes=2048) is not None
    out = frames.result()
    assert out["steps"]["step"].tolist() == list(range(1, 41))
    n = len(recs)
    assert out["events"].loc[out["events"]["kind"] == "record_check", "source"].tolist() == [
        f"chunks_rank0.jsonl:{n - 1}", f"chunks_rank0.jsonl:{n}"]


def test_negative_step_time_and_absurd_batch_are_unknown_not_counted(tmp_path, engine):
    def edit(recs):
        steps = [r for r in recs if r["type"] == STEP]
        steps[2]["timing"]["step_time_seconds"] = -0.5
        steps[7]["metrics"]["total_batch_size"] = 10**12
        steps[7]["metrics"]["samples_per_second"] = 2 * 10**12
        return recs

    folder, recs = _session(tmp_path, "odd", edit)
    s = load_session(folder)
    rows = s.steps.set_index("step")
    step3 = next(r for r in recs if r.get("step") == 3 and r["type"] == STEP)
    assert pd.isna(rows.loc[3, "step_time_s"]) and rows.loc[3, "loss"] == step3["metrics"]["loss"]
    assert pd.isna(rows.loc[8, "total_batch_size"]) and pd.isna(rows.loc[8, "samples_per_s"])
    neg = _line_of(recs, lambda r: r.get("timing", {}).get("step_time_seconds") == -0.5)
    big = _line_of(recs, lambda r: r.get("metrics", {}).get("total_batch_size") == 10**12)
    assert _checks(s) == [("negative_step_time", f"odd_rank0.jsonl:{neg}", 3), ("absurd_batch", f"odd_rank0.jsonl:{big}", 8)]
    # the throughput is the other steps': the declared batch of 8 over 0.5 s
    import logkit

    summary = logkit.analyze([s]).scaling.sessions[0]
    assert summary.samples_per_second == pytest.approx(8 / 0.5)
    assert summary.logged_steps == 10


def test_a_clean_stream_has_no_record_checks(tmp_path, engine):
    folder = write_session(tmp_path, "clean", world_size=2)
    s = load_session(folder)
    assert _checks(s) == [] and len(s.steps) == 20
