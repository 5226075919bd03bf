"""What the stream checks repaired or set aside reaches ``analyze_logs --diagnose``: one warning per
session, with the count of each check and the ``file:line`` of every record concerned. The streams
are a real 2-rank run's (sample_logs/qlora_tiny_cpu) with lines edited by hand; every expected
count and line number is the test's own, from the lines it edited."""

from __future__ import annotations

import json

import orjson

from tests.support.launch import analyze_logs, fixture_session

STEP = "training_step_complete"


def _records(folder, rank: int) -> list[dict]:
    (path,) = folder.glob(f"*_rank{rank}.jsonl")
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _find(records: list[dict], type_: str, step: int) -> dict:
    return next(r for r in records if r["type"] == type_ and r.get("step") == step)


def _write(path, records: list[dict]) -> None:
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))


def _line(records: list[dict], record: dict) -> int:
    return next(i for i, r in enumerate(records, start=1) if r is record)


def _edited_session(tmp_path):
    """Both streams of the real run, edited; returns (folder, {check: [file:line, ...]})."""
    real = fixture_session(2)
    sid = real.name
    rank0, rank1 = _records(real, 0), _records(real, 1)
    cited: dict[str, list[tuple[str, dict]]] = {}
    name0, name1 = f"{sid}_rank0.jsonl", f"{sid}_rank1.jsonl"

    def mark(check, name, record):
        cited.setdefault(check, []).append((name, record))
        return record

    # repaired: the record stays, a value is read as a number or as unknown
    mark("numeric_text", name0, _find(rank0, STEP, 3))["step"] = "3"
    mark("negative_step_time", name0, _find(rank0, STEP, 5))["timing"]["step_time_seconds"] = -0.2
    mark("absurd_batch", name0, _find(rank0, STEP, 7))["metrics"]["total_batch_size"] = 10**9
    mark("not_a_number", name0, _find(rank0, STEP, 11))["metrics"]["loss"] = "abc"
    # set aside: a step logged twice (rank 0 and rank 1), rank 1's record in rank 0's stream,
    # a record of another run
    again = orjson.loads(orjson.dumps(_find(rank0, STEP, 9)))
    rank0.insert(rank0.index(_find(rank0, STEP, 9)) + 1, mark("duplicate_step", name0, again))
    stray = orjson.loads(orjson.dumps(_find(rank1, STEP, 12)))
    rank0.insert(rank0.index(_find(rank0, STEP, 12)) + 1, mark("foreign_rank", name0, stray))
    mark("foreign_session", name0, _find(rank0, "communication", 13))["session_id"] = "another_run"
    twice = orjson.loads(orjson.dumps(_find(rank1, STEP, 20)))
    rank1.insert(rank1.index(_find(rank1, STEP, 20)) + 1, mark("duplicate_step", name1, twice))

    folder = tmp_path / "logs" / sid
    folder.mkdir(parents=True)
    _write(folder / name0, rank0)
    _write(folder / name1, rank1)
    lines = {check: [f"{name}:{_line(rank0 if name == name0 else rank1, rec)}" for name, rec in found]
             for check, found in cited.items()}
    return folder, lines


def test_diagnose_says_what_the_stream_checks_repaired_and_set_aside(tmp_path):
    folder, lines = _edited_session(tmp_path)
    r = analyze_logs(str(folder.parent), "--diagnose", "--json")
    assert r.returncode == 0, r.stderr
    (f,) = [f for f in json.loads(r.stdout)["findings"] if f["kind"] == "record_check"]
    aside, repaired = (sum(len(lines[c]) for c in checks) for checks in (
        ("foreign_rank", "foreign_session", "duplicate_step"),
        ("numeric_text", "not_a_number", "negative_step_time", "absurd_batch")))
    assert (aside, repaired) == (4, 4)
    assert f["severity"] == "warning" and f["session_id"] == folder.name
    assert f["title"] == f"{aside + repaired} record(s) repaired or set aside in the rank streams " \
                         f"({repaired} repaired, {aside} set aside)"
    assert (f["repaired"], f["set_aside"]) == (repaired, aside)
    assert f["checks"] == {check: len(cited) for check, cited in lines.items()}
    for said in ("Set aside (left out of every figure): 1 record(s) of another rank", "1 record(s) of another "
                 "session id", "2 step(s) logged again", "Repaired (the record kept): 1 number(s) given as text",
                 "1 value(s) of a numeric field that are no number", "1 negative step time(s)",
                 "1 batch size(s) not positive"):
        assert said in f["detail"]
    every = [line for cited in lines.values() for line in cited]
    assert f["evidence_total"] == len(every) == 8
    assert sorted(f["evidence"]) == sorted(every)
    # one line of each check first, in the detail's order, then the others
    firsts = [lines[c][0] for c in ("foreign_rank", "foreign_session", "duplicate_step", "numeric_text",
                                     "not_a_number", "negative_step_time", "absurd_batch")]
    assert f["evidence"][:7] == firsts
    assert f["ranks"] == [0, 1]


def test_streams_the_checks_leave_alone_give_no_such_finding(tmp_path):
    real = fixture_session(2)
    folder = tmp_path / "logs" / real.name
    folder.mkdir(parents=True)
    for rank in (0, 1):
        _write(folder / f"{real.name}_rank{rank}.jsonl", _records(real, rank))
    r = analyze_logs(str(folder.parent), "--diagnose", "--json")
    assert r.returncode == 0, r.stderr
    assert [f for f in json.loads(r.stdout)["findings"] if f["kind"] == "record_check"] == []
