"""A run being written is "in progress", not killed: a session without session_end whose streams
(or text logs) were written within max(120 s, 10 x its median step time) of the read, while its
last record is as recent. The streams are a real run's (sample_logs/qlora_tiny_cpu), copied
without their session_end line; the times are set by the test (record timestamps, os.utime), and
every expected value comes from them."""

from __future__ import annotations

import os
import re
import shutil
import time
from datetime import datetime, timezone
from types import SimpleNamespace

import numpy as np
import orjson
import pytest

from logkit.ingest import load as load_module
from logkit.ingest import meta as meta_module
from logkit.run import engine
from logkit.run.load import load_session, load_sessions
from tests.support.launch import fixture_session

STEP = "training_step_complete"
MIN_WINDOW_S, STEPS_IN_WINDOW = 120.0, 10  # the rule, as its definition states it


def _stream(tmp_path, last_record_at: float | None = None, step_times=None, text_logs: bool = False):
    """Rank 0's stream of the real 1-rank run without session_end, in ``tmp_path/logs/<sid>/``.
    ``last_record_at``: every timestamp moved so that the last record was written then (as a run
    writing now writes them); ``step_times``: the steps' times replaced, in order."""
    real = fixture_session(1)
    sid = real.name
    records = [orjson.loads(line) for line in (real / f"{sid}_rank0.jsonl").read_bytes().splitlines()]
    records = [r for r in records if r["type"] != "session_end"]
    if last_record_at is not None:
        t0 = last_record_at - max(r["elapsed_s"] for r in records)
        for r in records:
            r["timestamp"] = datetime.fromtimestamp(t0 + r["elapsed_s"], tz=timezone.utc).isoformat()
    if step_times is not None:
        steps = [r for r in records if r["type"] == STEP]
        for r, t in zip(steps, step_times, strict=True):
            r["timing"]["step_time_seconds"] = t
    folder = tmp_path / "logs" / sid
    folder.mkdir(parents=True)
    (folder / f"{sid}_rank0.jsonl").write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    if text_logs:
        for log in real.glob("*.log"):
            shutil.copy(log, folder / log.name)
    return folder, records


def _written(folder, at: float) -> None:
    for path in folder.iterdir():
        os.utime(path, (at, at))


def _idle(detail: str) -> int:
    m = re.fullmatch(r"still running \(last written (\d+) s ago\)", detail)
    assert m, detail
    return int(m[1])


def test_a_stream_written_seconds_ago_is_in_progress(tmp_path):
    written = float(int(time.time()) - 5)
    folder, _ = _stream(tmp_path, last_record_at=written)
    _written(folder, written)
    before = time.time()
    meta = load_session(folder).meta
    after = time.time()
    assert meta["status"] == "in progress"
    assert before - written - 1 <= _idle(meta["status_detail"]) <= after - written + 1
    assert before - written - 0.1 <= meta["idle_s"] <= after - written + 0.1
    assert meta["last_written"] == datetime.fromtimestamp(written, tz=timezone.utc).isoformat()


def test_an_hour_without_a_write_is_a_run_stopped_without_an_end(tmp_path):
    written = float(int(time.time()) - 3600)
    folder, _ = _stream(tmp_path, last_record_at=written)
    _written(folder, written)
    meta = load_session(folder).meta
    assert meta["status"] == "incomplete" and "status_detail" not in meta  # as before
    assert 3600 <= meta["idle_s"] <= 3600 + 60


def test_logs_copied_now_without_their_times_are_not_running(tmp_path):
    folder, records = _stream(tmp_path)  # the records' own times: the day the fixture was made
    last = datetime.fromisoformat(records[-1]["timestamp"]).timestamp()
    assert abs(time.time() - last) > 3600
    meta = load_session(folder).meta  # the copy's mtime is now
    assert meta["status"] == "incomplete"
    assert meta["idle_s"] < 60


@pytest.mark.parametrize(("slow", "idle_s"), [(False, 60.0), (False, 200.0), (True, 200.0), (True, 500.0)])
def test_the_window_is_ten_median_steps_and_at_least_two_minutes(tmp_path, slow, idle_s):
    real_steps = [r for r in _stream(tmp_path / "probe")[1] if r["type"] == STEP]
    times = [20.0 + (i % 7) * 5 for i in range(len(real_steps))] if slow else \
        [r["timing"]["step_time_seconds"] for r in real_steps]
    window = max(MIN_WINDOW_S, STEPS_IN_WINDOW * float(np.median(times)))
    assert abs(idle_s - window) > 30  # clearly on one side (the read comes a moment after the write)
    written = float(int(time.time()) - idle_s)
    folder, _ = _stream(tmp_path, last_record_at=written, step_times=times)
    _written(folder, written)
    meta = load_session(folder).meta
    assert meta["status"] == ("in progress" if idle_s < window else "incomplete"), (window, meta["idle_s"])


def test_a_summary_that_says_how_the_run_ended_stands(tmp_path):
    written = float(int(time.time()) - 5)
    folder, _ = _stream(tmp_path, last_record_at=written)
    real = fixture_session(1)
    summary = orjson.loads((real / f"{real.name}_summary.json").read_bytes())
    assert summary["status"] == "completed"
    (folder / f"{real.name}_summary.json").write_bytes(orjson.dumps(summary))
    _written(folder, written)
    meta = load_session(folder).meta
    assert meta["status"] == "completed" and "idle_s" not in meta


def test_text_logs_being_written_are_in_progress(tmp_path):
    folder, _ = _stream(tmp_path, text_logs=True)
    (folder / f"{folder.name}_rank0.jsonl").unlink()  # the text logs alone (their times carry no zone)
    for name in ("multigpu", "performance"):  # their last line says how the run ended: not yet
        log = folder / f"{folder.name}_{name}.log"
        lines = log.read_text().splitlines(keepends=True)
        assert lines[-1].rstrip().endswith("| Session status: completed")
        log.write_text("".join(lines[:-1]))
    written = float(int(time.time()) - 5)
    _written(folder, written)
    meta = load_session(folder).meta
    assert meta["status"] == "in progress" and _idle(meta["status_detail"]) >= 4
    _written(folder, written - 3600)
    meta = load_session(folder).meta
    assert meta["status"] is None and meta["idle_s"] >= 3600  # as before: the logs do not say


def test_text_logs_that_say_the_run_ended_are_not_in_progress(tmp_path):
    folder, _ = _stream(tmp_path, text_logs=True)
    (folder / f"{folder.name}_rank0.jsonl").unlink()
    meta = load_session(folder).meta  # written just now, and "Session status: completed" at their end
    assert meta["status"] == "completed" and "idle_s" not in meta


def test_a_cached_session_is_judged_again_at_each_read(tmp_path, monkeypatch):
    monkeypatch.setenv("LOGKIT_CACHE_DIR", str(tmp_path / "cache"))
    written = float(int(time.time()) - 5)
    folder, _ = _stream(tmp_path, last_record_at=written)
    _written(folder, written)
    built = []
    real_build = load_module.build_session
    monkeypatch.setattr(engine, "build_session", lambda src, **kw: built.append(src) or real_build(src, **kw))
    (first,) = load_sessions(folder.parent, cache=True)
    assert first.meta["status"] == "in progress" and len(built) == 1
    an_hour_later = time.time() + 3600
    monkeypatch.setattr(meta_module, "time", SimpleNamespace(time=lambda: an_hour_later))
    (second,) = load_sessions(folder.parent, cache=True)
    assert len(built) == 1  # from the cache, files unchanged
    assert second.meta["status"] == "incomplete" and second.meta["idle_s"] >= 3600
