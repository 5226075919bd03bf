"""Bad input never crashes a reader: a note with the file and line, and nothing else lost."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from logkit.ingest.jsonl_arrow import CHUNK_BYTES
from logkit.run.load import load_session

STEP = {"timestamp": "2026-01-01T00:00:00.000000+00:00", "elapsed_s": 1.0, "type": "training_step_complete",
        "level": "INFO", "message": "m", "session_id": "x", "rank": 0, "world_size": 1, "step": 1,
        "timing": {"step_time_seconds": 0.5}, "metrics": {"loss": 1.0, "total_batch_size": 8}}


def _line(**changes) -> bytes:
    return json.dumps({**STEP, **changes}).encode()


def _stream(folder, lines: list[bytes]):
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "x_rank0.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return folder


def test_a_bare_value_as_the_first_line_is_a_note_not_a_crash(tmp_path):
    # pyarrow's JSON parser crashes the process (SIGSEGV) on a first line `null`: it must never see it;
    # in a child process, so that a crash shows as a failure here and not as a dead test run
    folder = _stream(tmp_path / "s", [b"null", _line(step=1), _line(step=2)])
    code = ("import sys, logkit; s = logkit.load_session(sys.argv[1]); "
            "print(len(s.steps), s.diagnostics['line'].tolist(), s.diagnostics['reason'].tolist())")
    proc = subprocess.run([sys.executable, "-c", code, str(folder)], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "2 [1] ['not a JSON object (NoneType)']"


def test_invalid_utf8_in_a_later_line_is_replaced_and_noted(tmp_path):
    event = json.dumps({**STEP, "type": "anomaly", "step": 2, "kind": "slow_step", "message": "MARK"}).encode()
    folder = _stream(tmp_path / "s", [_line(step=1), event.replace(b"MARK", b"bad \xff\xfe here"), _line(step=3)])
    s = load_session(folder)
    assert s.diagnostics[["line", "reason"]].values.tolist() == [[2, "invalid UTF-8 bytes replaced with U+FFFD"]]
    (message,) = s.events.loc[s.events["kind"] == "anomaly", "message"]
    assert message == "bad \ufffd\ufffd here"
    assert s.steps["step"].tolist() == [1, 3]


@pytest.mark.parametrize("extra", [-8, -1, 0, 1, 7])
def test_a_line_as_long_as_a_chunk_is_noted(tmp_path, extra):
    # a broken line near the chunk size once made the fast reader fail to release its buffer
    long_line = b"{" + b"x" * (CHUNK_BYTES + extra - len(_line()) - 2)
    folder = _stream(tmp_path / "s", [_line(step=1), long_line, _line(step=2)])
    s = load_session(folder)
    assert s.steps["step"].tolist() == [1, 2]
    assert s.diagnostics["line"].tolist() == [2] and s.diagnostics["reason"].iloc[0].startswith("invalid JSON")


def test_integers_beyond_int64_are_missing_not_a_crash(tmp_path):
    folder = _stream(tmp_path / "s", [_line(step=2**70), _line(step=1e300), _line(step=3, rank=2**64)])
    s = load_session(folder)
    assert s.steps["step"].isna().tolist() == [True, True, False] and s.steps["step"].iloc[2] == 3
    assert s.steps["rank"].tolist() == [0, 0, 0]  # a rank that is no int64: the file's rank


def test_a_summary_with_objects_where_lists_belong(tmp_path):
    folder = _stream(tmp_path / "s", [_line(step=1)])
    (folder / "x_summary.json").write_text(json.dumps({"session_id": "x", "gpus": {"a": 1}, "communication": [1]}))
    proc = subprocess.run([sys.executable, "-m", "logkit.cli", str(folder), "--json", "--no-cache", "--compare",
                           "--communication", "--performance"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert json.loads(proc.stdout)["sessions"][0]["session_id"] == "x"


def test_the_loggers_own_errors_reach_the_diagnosis(tmp_path):
    from logkit.analysis import analyze

    folder = _stream(tmp_path / "x", [_line(step=1), _line(step=2)])
    lines = ["2026-01-01T00:00:05.000000+00:00 | ERROR | cannot write x_rank0.jsonl: OSError(28, 'No space left')",
             "not a line of the errors log",
             "2026-01-01T00:00:09.500000+00:00 | WARNING | x_rank0.jsonl was removed while in use: recreated"]
    (folder / "x_errors.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    s = load_session(folder)
    own = s.events[s.events["kind"] == "logger_error"]
    assert own["source"].tolist() == ["x_errors.log:1", "x_errors.log:3"]
    assert own["level"].tolist() == ["ERROR", "WARNING"] and "No space left" in own["message"].iloc[0]
    assert s.diagnostics[["line", "reason"]].values.tolist() == [[2, "line matches no known grammar"]]
    (finding,) = [f for f in analyze([s]).findings if f.kind == "logger_error"]
    assert finding.severity.value == "warning" and finding.evidence == ("x_errors.log:1", "x_errors.log:3")


def test_an_errors_log_alone_is_no_session(tmp_path):
    from logkit.run.load import load_sessions

    (tmp_path / "y_errors.log").write_text("2026-01-01T00:00:05+00:00 | ERROR | x\n", encoding="utf-8")
    assert load_sessions(tmp_path) == []
