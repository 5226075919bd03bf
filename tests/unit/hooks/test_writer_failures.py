"""The writer's failure paths in-process (so a mutation run sees them): a write or a flush that
fails with ENOSPC, a full disk for every file, a close that fails, a stuck writer thread, a file
removed underneath, a bad item. Files go through a fake ``open`` whose handles buffer lines and
write them to the real file with ``os.write`` on ``flush`` unless the disk is "full"; the writer's
clock is a fake one the test moves, so the 10 s retry and the 1 s file check are tested without
waiting them out. Each expected line is written out here."""

from __future__ import annotations

import errno
import os
import threading
import time
from datetime import datetime
from pathlib import Path
from types import SimpleNamespace

import orjson
import pytest

from trainer_hooks import writer as writer_module
from trainer_hooks.writer import RecordWriter, iso_timestamp

ENOSPC = OSError(errno.ENOSPC, "No space left on device")


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def monotonic(self) -> float:
        return self.now


@pytest.fixture
def clock(monkeypatch):
    c = _Clock(100.0)
    monkeypatch.setattr(writer_module, "time", SimpleNamespace(monotonic=c.monotonic, time=time.time))
    return c


class _Handle:
    def __init__(self, disk: _Disk, path: Path) -> None:
        self.disk, self.path, self.buf, self.closed = disk, path, [], False
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def write(self, data: bytes) -> int:
        if self.path in self.disk.write_fails:
            raise ENOSPC
        self.buf.append(data)
        return len(data)

    def flush(self) -> None:
        if self.path in self.disk.full:
            raise ENOSPC  # the buffered lines stay in this handle
        os.write(self.fd, b"".join(self.buf))
        self.buf.clear()

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if self.closed:
            return
        try:
            if self.path in self.disk.close_fails:
                raise OSError(errno.EIO, "Input/output error")
            self.flush()
        finally:
            self.closed = True
            os.close(self.fd)


class _Disk:
    def __init__(self) -> None:
        self.full: set[Path] = set()
        self.write_fails: set[Path] = set()
        self.close_fails: set[Path] = set()
        self.handles: list[_Handle] = []

    def open(self, path, mode):
        assert mode == "ab"
        handle = _Handle(self, Path(path))
        self.handles.append(handle)
        return handle

    def opened(self, path: Path) -> list[_Handle]:
        return [h for h in self.handles if h.path == path]


@pytest.fixture
def disk(monkeypatch):
    d = _Disk()
    monkeypatch.setattr(writer_module, "open", d.open, raising=False)
    yield d
    for h in d.handles:  # what the writer dropped without closing
        if not h.closed:
            os.close(h.fd)


def _types(path: Path) -> list[str]:
    return [orjson.loads(x)["type"] for x in path.read_bytes().splitlines()] if path.exists() else []


def _wait_until(predicate, timeout: float = 5.0) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.005)
    return predicate()


def _text(path: Path) -> str:
    return path.read_text() if path.exists() else ""


def _at(writer: RecordWriter, clock: _Clock, t: float, then=None) -> None:
    """On the writer thread, between the items around it: the clock reads ``t``, then ``then()``."""
    def move():
        clock.now = t
        if then is not None:
            then()
        return []
    writer.put_call(move)


def test_a_failed_write_drops_the_handle_and_retries_after_exactly_10_s(tmp_path, clock, disk, capsys):
    stream, errors = tmp_path / "stream.jsonl", tmp_path / "errors.log"
    writer = RecordWriter(stream, errors, flush_interval_s=60)  # the default retry delay: 10 s
    writer.put({"type": "a", "timestamp": 1.0})
    _at(writer, clock, 100.0, lambda: disk.write_fails.add(stream))
    writer.put({"type": "lost", "timestamp": 1.0})  # the write fails at t = 100
    _at(writer, clock, 109.999, lambda: disk.write_fails.discard(stream))
    writer.put({"type": "skipped", "timestamp": 1.0})  # 9.999 s later: not even tried
    _at(writer, clock, 110.0)
    writer.put({"type": "kept", "timestamp": 1.0})  # 10 s later: tried again, on a new handle
    writer.close()
    assert _types(stream) == ["a", "kept"]  # "a" reached the file when the failed handle was closed
    first, second = disk.opened(stream)
    assert first.closed and second.closed
    lines = errors.read_text().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(f" | ERROR | cannot write {stream}: OSError(28, 'No space left on device')")
    assert capsys.readouterr().err == (f"logkit: cannot write {stream}: [Errno 28] No space left on device; lines "
                                       "for it are dropped for 10s, training goes on\n")


def test_a_failed_flush_is_reported_at_once_and_once_then_the_file_is_reopened(tmp_path, clock, disk, capsys):
    stream, errors = tmp_path / "stream.jsonl", tmp_path / "errors.log"
    writer = RecordWriter(stream, errors, flush_interval_s=0.02)
    try:
        writer.put({"type": "a", "timestamp": 1.0})
        assert _wait_until(lambda: _types(stream) == ["a"])
        disk.full.add(stream)
        writer.put({"type": "b", "timestamp": 1.0})  # buffered; its flush fails at t = 100
        # the failure is in errors.log at once, not when the next record comes
        assert _wait_until(lambda: "cannot write" in _text(errors)), "the error line was not flushed"
        clock.now = 105.0
        writer.put({"type": "c", "timestamp": 1.0})  # within 10 s: dropped, the file not touched
        assert _wait_until(lambda: writer.pending() == 0 and writer.records_written == 3)
        time.sleep(0.1)  # a few wake-ups: a handle kept or the file retried would fail (and say so) again
        disk.full.discard(stream)
        clock.now = 110.0
        writer.put({"type": "d", "timestamp": 1.0})
    finally:
        writer.close()
    assert _types(stream) == ["a", "d"]  # b went with the handle that failed
    assert len(disk.opened(stream)) == 2
    lines = errors.read_text().splitlines()
    assert len(lines) == 1
    assert lines[0].endswith(f" | ERROR | cannot write {stream}: OSError(28, 'No space left on device')")
    assert capsys.readouterr().err.count("logkit: cannot write") == 1


def test_a_full_disk_for_every_file_never_stops_the_writer(tmp_path, clock, disk, capsys):
    stream, errors = tmp_path / "stream.jsonl", tmp_path / "errors.log"
    writer = RecordWriter(stream, errors, flush_interval_s=0.02)
    try:
        writer.put({"type": "a", "timestamp": 1.0})
        writer.report_error("first")  # both files open now, the stream first
        assert _wait_until(lambda: _types(stream) == ["a"] and "first" in _text(errors))
        disk.full.update({stream, errors})
        writer.put({"type": "b", "timestamp": 1.0})  # both flushes fail, the errors log's twice
        assert _wait_until(lambda: writer.pending() == 0)
        time.sleep(0.1)
        disk.full.clear()
        clock.now = 110.0
        writer.put({"type": "c", "timestamp": 1.0})
        writer.report_error("second")
        assert _wait_until(lambda: _types(stream) == ["a", "c"]), "the writer stopped writing"
    finally:
        writer.close()
    messages = [line.split(" | ", 1)[1] for line in errors.read_text().splitlines()]
    assert messages == ["ERROR | first", "ERROR | second"]  # the failure's own line had nowhere to go
    assert capsys.readouterr().err.count("logkit:") == 1


def test_a_removed_file_is_noticed_at_the_first_wake_up_a_second_after_the_last_check(tmp_path, clock):
    text, side, errors = tmp_path / "main.log", tmp_path / "side.log", tmp_path / "errors.log"
    clock.now = 1000.0
    writer = RecordWriter(tmp_path / "stream.jsonl", errors, flush_interval_s=0.02)
    try:
        ticks = 0

        def tick() -> None:  # a line, and wait until it is flushed (with anything else buffered)
            nonlocal ticks
            ticks += 1
            writer.put_text(side, f"tick {ticks}")
            assert _wait_until(lambda: _text(side).count("\n") == ticks)

        writer.put_text(text, "one")
        assert _wait_until(lambda: _text(text) == "one\n")
        text.unlink()
        clock.now = 1000.5
        time.sleep(0.1)  # several wake-ups, half a second after the check at start: none checks
        tick()
        assert not errors.exists()
        clock.now = 1001.0  # a second after it: the next wake-up checks
        for _ in range(100):
            tick()
            if "was removed while in use" in _text(errors):
                break
        assert _text(errors).count("was removed while in use") == 1
        writer.put_text(text, "two")
    finally:
        writer.close()
    assert text.read_text() == "two\n"


def test_a_failing_close_is_said_on_stderr(tmp_path, disk, capsys):
    stream = tmp_path / "stream.jsonl"
    writer = RecordWriter(stream, tmp_path / "errors.log", flush_interval_s=60)
    writer.put({"type": "a", "timestamp": 1.0})
    disk.close_fails.add(stream)
    writer.close()
    assert capsys.readouterr().err == f"logkit: cannot close {stream}: [Errno 5] Input/output error\n"
    assert _types(stream) == ["a"]  # flushed before the close that failed


def test_close_syncs_every_file_and_says_nothing(tmp_path, monkeypatch, capsys):
    synced = []
    real_fsync = os.fsync

    def fsync(fd):
        synced.append(os.readlink(f"/proc/self/fd/{fd}") if os.path.isdir("/proc/self/fd") else fd)
        real_fsync(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    stream, text = tmp_path / "stream.jsonl", tmp_path / "main.log"
    writer = RecordWriter(stream, tmp_path / "errors.log", flush_interval_s=60)
    writer.put({"type": "a", "timestamp": 1.0})
    writer.put_text(text, "line")
    writer.close()
    assert len(synced) == 2
    if os.path.isdir("/proc/self/fd"):
        assert sorted(synced) == sorted([str(text), str(stream)])
    assert capsys.readouterr().err == ""


def test_close_gives_up_on_a_stuck_writer_after_its_timeout(tmp_path):
    release = threading.Event()
    writer = RecordWriter(tmp_path / "stream.jsonl", tmp_path / "errors.log", flush_interval_s=60)
    writer.put_call(lambda: release.wait(5) and [])  # the writer thread stuck in a call for up to 5 s
    started = time.monotonic()
    writer.close(timeout=0.2)
    took = time.monotonic() - started
    release.set()
    writer.close()  # now it ends
    assert took < 1.5, f"close(timeout=0.2) took {took:.2f} s"


def test_close_waits_10_s_by_default(tmp_path, monkeypatch):
    waited = []
    real_join = threading.Thread.join

    def join(self, timeout=None):
        waited.append(timeout)
        real_join(self, timeout)

    writer = RecordWriter(tmp_path / "stream.jsonl", tmp_path / "errors.log", flush_interval_s=60)
    monkeypatch.setattr(threading.Thread, "join", join)
    writer.close()
    assert waited == [10.0]


def test_a_bad_item_is_said_on_stderr_and_the_writer_goes_on(tmp_path, capsys):
    stream = tmp_path / "stream.jsonl"
    writer = RecordWriter(stream, tmp_path / "errors.log", flush_interval_s=60)
    writer.put(42)  # not a record
    writer.put({"type": "a", "timestamp": 1.0})
    writer.close()
    assert _types(stream) == ["a"]
    assert capsys.readouterr().err == "logkit: writer error: AttributeError(\"'int' object has no attribute 'get'\")\n"


def test_an_error_with_notes_keeps_them(tmp_path):
    errors = tmp_path / "errors.log"
    writer = RecordWriter(tmp_path / "stream.jsonl", errors, flush_interval_s=60)
    exc = ValueError("bad value")
    exc.add_note("while reading step 3")
    writer.report_error("parsing", exc)
    writer.close()
    assert errors.read_text().endswith(" | ERROR | parsing: ValueError: bad value\nwhile reading step 3\n")


def test_iso_timestamp_before_1970():
    assert iso_timestamp(-0.25) == "1969-12-31T23:59:59.750000+00:00"


def test_iso_timestamp_formats_each_second_once_and_keeps_few(monkeypatch):
    formatted = []

    class CountingDatetime(datetime):
        @classmethod
        def fromtimestamp(cls, t, tz=None):
            formatted.append(t)
            return datetime.fromtimestamp(t, tz=tz)

    monkeypatch.setattr(writer_module, "datetime", CountingDatetime)
    writer_module._ISO_SECONDS.clear()
    try:
        for k in range(10):
            iso_timestamp(1733495422 + k / 10)
        assert formatted == [1733495422]  # ten records in one second: formatted once
        for k in range(40):
            iso_timestamp(1733495500.5 + k)
            assert len(writer_module._ISO_SECONDS) <= 16  # constant memory however long the run
    finally:
        writer_module._ISO_SECONDS.clear()
