"""The writer thread in-process: what reaches the files, when, and in which form; each expected
value written out here (a timestamp formatted by hand, the lines a record must give)."""

from __future__ import annotations

import time
from datetime import datetime, timezone
from pathlib import Path

import numpy as np
import orjson
import pytest

from trainer_hooks.writer import RecordWriter, _fallback, iso_timestamp

FLUSH_PROMISE_S = 0.5  # README: records reach the OS within half a second
SLACK_S = 1.0  # the writer thread scheduled late on a loaded machine


def _lines(path: Path) -> list[bytes]:
    return path.read_bytes().splitlines() if path.exists() else []


@pytest.mark.parametrize("wall, text", [
    (0.0, "1970-01-01T00:00:00.000000+00:00"),
    (1733495422.5, "2024-12-06T14:30:22.500000+00:00"),
    (1733495422.000001, "2024-12-06T14:30:22.000001+00:00"),
    (1733495422.9999996, "2024-12-06T14:30:23.000000+00:00"),  # microseconds round up into the next second
])
def test_iso_timestamp_by_hand(wall, text):
    assert iso_timestamp(wall) == text


def test_iso_timestamp_agrees_with_datetime_over_many_seconds():
    for wall in np.linspace(1.7e9, 1.7e9 + 40, 97):  # more seconds than the formatter keeps
        expected = datetime.fromtimestamp(round(float(wall), 6), tz=timezone.utc).isoformat(timespec="microseconds")
        assert iso_timestamp(float(wall)) == expected


def test_a_record_reaches_the_file_within_the_flush_interval_without_close(tmp_path):
    path = tmp_path / "stream.jsonl"
    writer = RecordWriter(path, tmp_path / "errors.log")  # the default interval: what a session uses
    try:
        time.sleep(0.05)  # the thread is up and waiting
        handed = time.monotonic()
        writer.put({"type": "x", "timestamp": 1733495422.5})
        while not _lines(path) and time.monotonic() - handed < 10:
            time.sleep(0.01)
        took = time.monotonic() - handed
        assert _lines(path), "nothing written in 10 s"
        assert took < FLUSH_PROMISE_S + SLACK_S, f"the record took {took:.2f} s to reach the file"
    finally:
        writer.close()


def test_close_writes_everything_in_order_with_iso_timestamps(tmp_path):
    path, errors = tmp_path / "stream.jsonl", tmp_path / "errors.log"
    writer = RecordWriter(path, errors, flush_interval_s=60)  # only close() writes
    for i in range(5):
        writer.put({"type": "x", "i": i, "timestamp": 1733495422.5 + i})
    writer.put({"type": "no_time"})  # no float timestamp: the time it is written
    writer.put_call(lambda n: [{"type": "built", "i": n}, {"type": "built", "i": n + 1}], 10)
    assert writer.pending() == 7
    before = datetime.now(timezone.utc)
    writer.close()
    records = [orjson.loads(x) for x in _lines(path)]
    assert [r.get("i") for r in records] == [0, 1, 2, 3, 4, None, 10, 11]
    assert records[0]["timestamp"] == "2024-12-06T14:30:22.500000+00:00"
    assert records[4]["timestamp"] == "2024-12-06T14:30:26.500000+00:00"
    written_at = datetime.fromisoformat(records[5]["timestamp"])
    assert abs((written_at - before).total_seconds()) < 5
    assert writer.records_written == 8 and writer.pending() == 0
    assert not errors.exists()
    writer.close()  # a second close does nothing


def test_text_lines_errors_and_a_failing_builder(tmp_path):
    path, errors, text = tmp_path / "stream.jsonl", tmp_path / "errors.log", tmp_path / "main.log"
    writer = RecordWriter(path, errors, flush_interval_s=60)
    writer.put_text(text, "first line")
    writer.put_text(str(text), "second line")  # a path as text works the same
    writer.report_error("disk trouble", OSError(28, "No space left on device"))
    writer.report_error("plain")

    def broken():
        raise ValueError("bad record")

    writer.put_call(broken)
    writer.close()
    assert text.read_text() == "first line\nsecond line\n"
    lines = errors.read_text().splitlines()
    assert len(lines) == 3
    assert lines[0].endswith(" | ERROR | disk trouble: OSError: [Errno 28] No space left on device")
    assert lines[1].endswith(" | ERROR | plain")
    assert lines[2].endswith(" | ERROR | building a record: ValueError('bad record')")
    for line in lines:
        datetime.fromisoformat(line.split(" | ")[0])  # each starts with its ISO time
    assert not _lines(path)


def test_rendered_text_lines_and_the_mirror(tmp_path):
    path, mirror, text = tmp_path / "stream.jsonl", tmp_path / "mirror.jsonl", tmp_path / "main.log"
    seen = []

    def render(record, wall):
        seen.append(wall)
        return [(text, f"{record['type']} at {record['timestamp']}")]

    writer = RecordWriter(path, tmp_path / "errors.log", render=render, mirror_path=mirror, flush_interval_s=60)
    writer.put({"type": "x", "timestamp": 1733495422.5})
    writer.close()
    assert path.read_bytes() == mirror.read_bytes() == b'{"type":"x","timestamp":"2024-12-06T14:30:22.500000+00:00"}\n'
    assert seen == [1733495422.5]  # the render gets the wall time as a number
    assert text.read_text() == "x at 2024-12-06T14:30:22.500000+00:00\n"


def test_a_failing_render_keeps_the_record_and_says_why(tmp_path):
    path, errors = tmp_path / "stream.jsonl", tmp_path / "errors.log"

    def render(record, wall):
        raise KeyError("template")

    writer = RecordWriter(path, errors, render=render, flush_interval_s=60)
    writer.put({"type": "x", "timestamp": 1.0})
    writer.close()
    assert len(_lines(path)) == 1
    assert errors.read_text().strip().endswith("| ERROR | text log: KeyError('template')")


def test_values_json_cannot_take_are_kept_as_plain_values(tmp_path):
    path, errors = tmp_path / "stream.jsonl", tmp_path / "errors.log"
    writer = RecordWriter(path, errors, flush_interval_s=60)
    writer.put({"type": "x", "timestamp": 1.0, "n": np.float32(1.5), "arr": np.arange(3), "where": Path("a/b"),
                "tags": {"only"}, "pair": (1, 2)})
    writer.put({"type": "y", "timestamp": 1.0, "d": {3: "int key"}, "ok": 1})  # orjson refuses a non-str key
    writer.close()
    first, second = (orjson.loads(x) for x in _lines(path))
    assert first == {"type": "x", "timestamp": "1970-01-01T00:00:01.000000+00:00", "n": 1.5, "arr": [0, 1, 2],
                     "where": "a/b", "tags": ["only"], "pair": [1, 2]}
    # the record is kept, the dict's key as text (JSON's keys are strings)
    assert second == {"type": "y", "timestamp": "1970-01-01T00:00:01.000000+00:00", "d": {"3": "int key"}, "ok": 1}
    assert "unserialisable record" in errors.read_text()


def test_fallback_turns_values_into_plain_ones():
    class Broken:
        def item(self):
            raise RuntimeError

        def __str__(self):
            return "broken"

    assert _fallback(np.int64(7)) == 7 and isinstance(_fallback(np.int64(7)), int)
    assert _fallback(frozenset([2])) == [2] and _fallback((1, "a")) == [1, "a"] and _fallback({3}) == [3]
    assert _fallback(Path("x/y")) == "x/y"
    assert _fallback(Broken()) == "broken"


def test_an_unwritable_path_is_skipped_then_retried(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be")
    errors = tmp_path / "errors.log"
    writer = RecordWriter(blocker / "stream.jsonl", errors, flush_interval_s=0.05, retry_after_s=0.3)
    writer.put({"type": "lost", "timestamp": 1.0})
    time.sleep(0.15)
    writer.put({"type": "skipped", "timestamp": 1.0})  # within the retry delay: not even tried
    time.sleep(0.15)
    blocker.unlink()  # the folder can be made now
    time.sleep(0.3)
    writer.put({"type": "kept", "timestamp": 1.0})
    writer.close()
    assert [orjson.loads(x)["type"] for x in _lines(blocker / "stream.jsonl")] == ["kept"]
    said = capsys.readouterr().err
    assert said.count("logkit: cannot write") == 1 and "dropped for 0s, training goes on" in said
    assert errors.read_text().count("| ERROR | cannot write") == 1


def test_stderr_hears_of_a_failing_file_once_however_often_it_fails(tmp_path, capsys):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where a folder should be")
    writer = RecordWriter(blocker / "stream.jsonl", tmp_path / "errors.log", flush_interval_s=0.02, retry_after_s=0)
    for _ in range(3):  # retried at once, failing each time: a full disk must not flood the console
        writer.put({"type": "lost", "timestamp": 1.0})
        time.sleep(0.1)
    writer.close()
    assert capsys.readouterr().err.count("logkit:") == 1
    assert (tmp_path / "errors.log").read_text().count("| ERROR | cannot write") == 3


def test_records_wait_half_the_flush_interval_on_average(tmp_path):
    """Records handed over between the writer's wake-ups wait less than its interval (measured
    here: a mean of 0.32 s at 0.5 s, 1.32 s at 1.5 s): the mean over ten records, with room for a
    loaded machine, tells the default interval from a longer one, where one record's delay cannot."""
    path = tmp_path / "stream.jsonl"
    writer = RecordWriter(path, tmp_path / "errors.log")  # the default interval
    delays = []
    try:
        time.sleep(0.05)
        for i in range(10):
            handed = time.monotonic()
            writer.put({"type": "x", "timestamp": 1.0, "i": i})
            while len(_lines(path)) <= i and time.monotonic() - handed < 10:
                time.sleep(0.005)
            delays.append(time.monotonic() - handed)
            time.sleep(0.13 + 0.017 * i)  # the next one lands at another phase of the interval
    finally:
        writer.close()
    assert len(_lines(path)) == 10
    assert max(delays) < FLUSH_PROMISE_S + SLACK_S, delays
    assert np.mean(delays) < 1.5 * FLUSH_PROMISE_S, delays


def test_the_writer_is_a_daemon_thread_named_logkit_writer(tmp_path):
    import threading

    writer = RecordWriter(tmp_path / "s.jsonl", tmp_path / "errors.log")
    try:
        (thread,) = [t for t in threading.enumerate() if t.name == "logkit-writer"]
        assert thread.daemon  # a run that never closes its logger still exits
    finally:
        writer.close()
    assert not [t for t in threading.enumerate() if t.name == "logkit-writer"]


def test_a_record_kept_as_plain_values_ends_its_line(tmp_path):
    path = tmp_path / "stream.jsonl"
    writer = RecordWriter(path, tmp_path / "errors.log", flush_interval_s=60)
    writer.put({"type": "y", "timestamp": 1.0, "d": {3: "int key"}})  # the fallback serialisation
    writer.put({"type": "z", "timestamp": 1.0})
    writer.close()
    data = path.read_bytes()
    assert data.endswith(b"\n") and [orjson.loads(x)["type"] for x in data.split(b"\n")[:-1]] == ["y", "z"]


def test_timestamps_are_utc_whatever_the_local_zone(monkeypatch):
    import time as time_module

    from trainer_hooks import writer as writer_module

    monkeypatch.setenv("TZ", "Asia/Kolkata")  # UTC+05:30, no daylight saving
    time_module.tzset()
    try:
        writer_module._ISO_SECONDS.clear()
        assert iso_timestamp(1733495422.25) == "2024-12-06T14:30:22.250000+00:00"
    finally:
        monkeypatch.undo()
        time_module.tzset()
        writer_module._ISO_SECONDS.clear()


def test_missing_folders_are_made_and_undecodable_text_is_replaced_not_dropped(tmp_path):
    stream, text = tmp_path / "a" / "b" / "stream.jsonl", tmp_path / "c" / "d" / "main.log"
    writer = RecordWriter(stream, tmp_path / "errors.log", flush_interval_s=60)
    writer.put({"type": "x", "timestamp": 1.0})
    writer.put_text(text, "loss \udcff ok")  # a lone surrogate (a mis-decoded byte) cannot be UTF-8
    writer.close()
    assert len(_lines(stream)) == 1
    assert text.read_bytes() == b"loss ? ok\n"
    assert not (tmp_path / "errors.log").exists()


def test_close_leaves_no_file_open(tmp_path):
    import os

    path, text = tmp_path / "stream.jsonl", tmp_path / "main.log"
    writer = RecordWriter(path, tmp_path / "errors.log", flush_interval_s=60)
    writer.put({"type": "x", "timestamp": 1.0})
    writer.put_text(text, "a line")
    writer.close()
    fds = Path("/proc/self/fd")
    if not fds.is_dir():
        pytest.skip("no /proc: open files cannot be listed")
    open_paths = set()
    for fd in fds.iterdir():
        try:
            open_paths.add(os.readlink(fd))
        except OSError:
            pass
    assert str(path) not in open_paths and str(text) not in open_paths
    assert len(_lines(path)) == 1 and text.read_text() == "a line\n"
