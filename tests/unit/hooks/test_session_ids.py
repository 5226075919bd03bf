"""A session id asked for stays inside the log folder, and two runs never share one stream."""

from __future__ import annotations

import json

from logkit.run.load import load_sessions
from trainer_hooks.session_logger import SessionLogger


def _run(log_dir, session_id=None, steps=3) -> SessionLogger:
    log = SessionLogger(log_dir=log_dir, verbosity="high", session_id=session_id, gpu_snapshot_interval=0)
    log.start(total_batch_size=4, max_steps=steps)
    for step in range(1, steps + 1):
        log.step_begin()
        log.step_end(step, loss=1.0 / step)
    log.end()
    return log


def _records(folder):
    (path,) = folder.glob("*_rank0.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def test_an_id_with_a_path_in_it_stays_in_the_log_folder(tmp_path, capsys):
    logs = tmp_path / "logs"
    log = _run(logs, "../../escape/x")
    assert log.folder.parent == logs and log.session_id == "___.._escape_x"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["logs"]  # nothing written beside it
    start = next(r for r in _records(log.folder) if r["type"] == "session_start")
    assert start["requested_session_id"] == "../../escape/x" and start["session_id"] == "___.._escape_x"
    assert "this run logs as '___.._escape_x'" in capsys.readouterr().err
    assert [s.session_id for s in load_sessions(logs)] == ["___.._escape_x"]  # written, and read back


def test_the_same_id_twice_gives_two_sessions(tmp_path, monkeypatch):
    logs = tmp_path / "logs"
    monkeypatch.setenv("LOGKIT_SESSION_ID", "nightly")
    first = _run(logs, steps=3)
    lines = (first.folder / "nightly_rank0.jsonl").read_text(encoding="utf-8")
    second = _run(logs, steps=5)
    assert (first.session_id, second.session_id) == ("nightly", "nightly_2")
    assert (first.folder / "nightly_rank0.jsonl").read_text(encoding="utf-8") == lines  # untouched
    start = next(r for r in _records(second.folder) if r["type"] == "session_start")
    assert start["requested_session_id"] == "nightly"
    sessions = {s.session_id: s for s in load_sessions(logs)}
    assert {sid: len(s.steps) for sid, s in sessions.items()} == {"nightly": 3, "nightly_2": 5}


def test_an_id_used_once_is_kept_as_asked(tmp_path):
    log = _run(tmp_path / "logs", "exp-7.a_b")
    assert log.session_id == "exp-7.a_b"
    start = next(r for r in _records(log.folder) if r["type"] == "session_start")
    assert "requested_session_id" not in start
