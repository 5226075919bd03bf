"""The writer thread: every file of a session is written here, never on the training thread.

The training thread hands over plain dicts (``put``): one append to a deque, no lock, no
wake-up of this thread (a futex wake per record cost the training thread more than building
the record did). This thread wakes every ``flush_interval_s`` (0.5 s: each wake-up works on
cold caches, so fewer, larger batches cost less CPU), takes everything handed over,
serialises it with orjson, renders the human-readable text lines from the same records,
writes whole lines and flushes them to the OS. Failures of the logger itself go to the errors
log, or to stderr when even that fails, and are never raised into training.
"""

from __future__ import annotations

import os
import sys
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from pathlib import Path

import orjson

from trainer_hooks.layout import COMMON_PART, top_key

_STOP = object()
# a record's wall-clock time: a float when handed over, written as ISO 8601 here
_TIMESTAMP = top_key(COMMON_PART, "timestamp")
_JSONL_OPTIONS = orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE


class _Call:
    """Work for the writer thread: ``fn(*args)`` returns the records to write."""

    __slots__ = ("fn", "args")

    def __init__(self, fn, args) -> None:
        self.fn, self.args = fn, args


# whole second -> "YYYY-mm-ddTHH:MM:SS": formatted once per second, not per record (a few
# seconds kept: a step's own time and its ETA alternate); a dict's get/set are atomic
_ISO_SECONDS: dict[int, str] = {}
_LAST_ISO: tuple[float | None, str] = (None, "")  # the last time formatted, and its text


def iso_timestamp(wall: float) -> str:
    """ISO 8601 with microseconds and the UTC offset: a record's ``timestamp``.

    >>> iso_timestamp(1733495422.5)
    '2024-12-06T14:30:22.500000+00:00'
    """
    global _LAST_ISO
    last = _LAST_ISO
    if last[0] == wall:  # the records built together share their time (a step's collectives)
        return last[1]
    second = int(wall // 1)
    micro = int(round((wall - second) * 1e6))
    if micro >= 1_000_000:
        second, micro = second + 1, micro - 1_000_000
    prefix = _ISO_SECONDS.get(second)
    if prefix is None:
        if len(_ISO_SECONDS) >= 16:
            _ISO_SECONDS.clear()
        prefix = _ISO_SECONDS[second] = datetime.fromtimestamp(second, tz=timezone.utc).strftime("%Y-%m-%dT%H:%M:%S")
    text = f"{prefix}.{micro:06d}+00:00"
    _LAST_ISO = (wall, text)  # one tuple: a reader on another thread sees the old pair or the new one, whole
    return text


class RecordWriter:
    """Owns the files of one rank and the thread that writes them.

    ``jsonl_path``: this rank's event stream. ``render``: turns a record (and its wall time)
    into ``(text_file_path, line)`` pairs (rank 0's text logs), called on the writer thread.
    ``errors_path``: where failures of the logger go.
    """

    def __init__(
        self,
        jsonl_path: Path,
        errors_path: Path,
        render: Callable[[dict, float], Iterable[tuple[Path, str]]] | None = None,
        flush_interval_s: float = 0.5,
        mirror_path: Path | None = None,
        retry_after_s: float = 10.0,
    ) -> None:
        self.jsonl_path = Path(jsonl_path)
        self.errors_path = Path(errors_path)
        self._render = render
        self._mirror = Path(mirror_path) if mirror_path else None
        self._flush_interval_s = flush_interval_s
        self._retry_after_s = retry_after_s
        self._buffer: deque = deque()  # append/popleft are atomic: no lock on either side
        # close() wakes the thread at once by releasing this lock, held otherwise: a timed acquire is one
        # C call per wake-up, where Event.wait runs a Condition's Python code and allocates a lock
        self._wake = threading.Lock()
        self._wake.acquire()
        self._files: dict[Path, object] = {}
        self._failed_paths: dict[Path, float] = {}  # path -> when it failed (retried later)
        self._stderr_said = False
        self.records_written = 0
        self._thread = threading.Thread(target=self._run, name="logkit-writer", daemon=True)
        self._thread.start()

    # -- training thread -------------------------------------------------------------
    def put(self, record: dict) -> None:
        """Hand over a record; costs one deque append on the caller's thread. It reaches the
        file within ``flush_interval_s``."""
        self._buffer.append(record)

    def put_call(self, fn, *args) -> None:
        """Hand over ``fn(*args)``, run on the writer thread; it returns a list of records."""
        self._buffer.append(_Call(fn, args))

    def put_text(self, path: Path, line: str) -> None:
        self._buffer.append((Path(path), line))

    def wake(self) -> None:
        """Have the writer thread take what was handed over now, not at its next interval."""
        try:
            self._wake.release()
        except RuntimeError:  # released already: it wakes anyway
            pass

    def pending(self) -> int:
        """Items handed over and not yet taken by the writer thread."""
        return len(self._buffer)

    def close(self, timeout: float = 10.0) -> None:
        """Write everything handed over, close the files, stop the thread."""
        if self._thread.is_alive():
            self._buffer.append(_STOP)
            self.wake()
            self._thread.join(timeout)

    def report_error(self, what: str, exc: BaseException | None = None) -> None:
        """A failure of the logger: to the errors log (from any thread)."""
        text = what
        if exc is not None:
            text += ": " + "".join(traceback.format_exception_only(type(exc), exc)).strip()
        self._buffer.append((self.errors_path, f"{iso_timestamp(time.time())} | ERROR | {text}"))

    # -- writer thread ---------------------------------------------------------------
    def _run(self) -> None:
        last_check = time.monotonic()
        while True:
            self._wake.acquire(timeout=self._flush_interval_s)
            handled = len(self._buffer)
            stop = self._drain()
            if handled:  # now in the OS: a kill -9 loses at most the last interval's records
                self._flush()
            if stop:
                self._close_files()
                return
            now = time.monotonic()
            if now - last_check >= 1.0:
                self._check_files()
                last_check = now

    def _drain(self) -> bool:
        """Handle everything handed over; True when ``close`` asked to stop."""
        buffer = self._buffer
        while buffer:
            item = buffer.popleft()
            if item is _STOP:
                self._drain()  # whatever other threads added meanwhile
                return True
            try:
                self._handle(item)
            except Exception as exc:  # this thread must outlive any one bad item
                self._last_resort(f"logkit: writer error: {exc!r}")
        return False

    def _handle(self, item) -> None:
        if isinstance(item, tuple):
            self._write(item[0], item[1])
            return
        if isinstance(item, _Call):
            try:
                records = item.fn(*item.args)
            except Exception as exc:
                self._write(self.errors_path, f"{iso_timestamp(time.time())} | ERROR | building a record: {exc!r}")
                return
            for record in records:
                self._handle_record(record)
            return
        self._handle_record(item)

    def _handle_record(self, item: dict) -> None:
        wall = item.get(_TIMESTAMP)
        if not isinstance(wall, float):
            wall = time.time()
        try:
            item[_TIMESTAMP] = iso_timestamp(wall)
            data = orjson.dumps(item, option=_JSONL_OPTIONS, default=_fallback)
        except Exception as exc:  # a value orjson cannot take: keep the record, as text
            self._write(self.errors_path, f"{iso_timestamp(time.time())} | ERROR | unserialisable record: {exc}")
            data = orjson.dumps(_plain(item), option=orjson.OPT_APPEND_NEWLINE)
        self._write(self.jsonl_path, data)
        if self._mirror is not None:
            self._write(self._mirror, data)
        self.records_written += 1
        if self._render is not None:
            try:
                for path, line in self._render(item, wall):
                    self._write(path, line)
            except Exception as exc:
                self._write(self.errors_path, f"{iso_timestamp(time.time())} | ERROR | text log: {exc!r}")

    def _write(self, path: Path, line: str | bytes) -> None:
        """One whole line: a text line (str, no newline) or a JSONL record (bytes, with it)."""
        failed_at = self._failed_paths.get(path)
        if failed_at is not None:
            if time.monotonic() - failed_at < self._retry_after_s:
                return  # degraded: this file is skipped for a while, training goes on
            del self._failed_paths[path]
        try:
            fh = self._files.get(path)
            if fh is None:
                path.parent.mkdir(parents=True, exist_ok=True)
                fh = open(path, "ab")  # noqa: SIM115 (kept open); bytes: orjson's output as it is
                self._files[path] = fh
            fh.write(line if isinstance(line, bytes) else (line + "\n").encode("utf-8", "replace"))
        except Exception as exc:
            self._failed_paths[path] = time.monotonic()
            fh = self._files.pop(path, None)
            if fh is not None:
                try:
                    fh.close()
                except Exception:
                    pass
            self._last_resort(f"logkit: cannot write {path}: {exc}; lines for it are dropped for "
                              f"{self._retry_after_s:.0f}s, training goes on")
            if path != self.errors_path:
                self._write(self.errors_path, f"{iso_timestamp(time.time())} | ERROR | cannot write {path}: {exc!r}")

    def _check_files(self) -> None:
        """A file removed underneath (log rotation, a cleanup script) is recreated."""
        for path, fh in list(self._files.items()):
            try:
                if os.fstat(fh.fileno()).st_nlink == 0:
                    fh.close()
                    del self._files[path]
                    if path != self.errors_path:
                        self._write(self.errors_path, f"{iso_timestamp(time.time())} | WARNING | {path} was removed "
                                    "while in use: recreated, earlier lines are lost")
            except Exception:
                pass

    def _flush(self) -> None:
        for path, fh in list(self._files.items()):
            try:
                fh.flush()
            except Exception as exc:  # e.g. ENOSPC: buffered writes fail here, not in write()
                self._files.pop(path, None)
                self._failed_paths[path] = time.monotonic()
                self._last_resort(f"logkit: cannot write {path}: {exc}; lines for it are dropped for "
                                  f"{self._retry_after_s:.0f}s, training goes on")
                if path != self.errors_path:
                    self._write(self.errors_path, f"{iso_timestamp(time.time())} | ERROR | cannot write {path}: "
                                f"{exc!r}")
                    self._flush_one(self.errors_path)

    def _flush_one(self, path: Path) -> None:
        fh = self._files.get(path)
        if fh is not None:
            try:
                fh.flush()
            except Exception:
                self._files.pop(path, None)

    def _close_files(self) -> None:
        self._flush()  # a failing flush is reported like any other
        for path, fh in list(self._files.items()):
            try:
                fh.flush()
                os.fsync(fh.fileno())
                fh.close()
            except Exception as exc:
                self._last_resort(f"logkit: cannot close {path}: {exc}")
        self._files.clear()

    def _last_resort(self, text: str) -> None:
        # stderr once: a full disk must not flood the console.
        if self._stderr_said:
            return
        self._stderr_said = True
        try:
            print(text, file=sys.stderr, flush=True)
        except Exception:
            pass


def _plain(value, depth: int = 0):
    """A value any JSON writer takes, whatever it held: text that is not UTF-8 (a host name, an id
    with lone surrogates) with those escaped, integers beyond 64 bits as floats, other objects as
    ``_fallback`` makes them; nesting past 32 levels as text."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
            return value
        except UnicodeEncodeError:
            return value.encode("utf-8", "backslashreplace").decode("utf-8")
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -(2**63) <= value < 2**63 else float(value) if abs(value) < 2**1023 else str(value)
    if depth > 32:
        return _plain(str(value), depth)
    if isinstance(value, dict):
        return {_plain(str(k), depth): _plain(v, depth + 1) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_plain(v, depth + 1) for v in value]
    return _plain(_fallback(value), depth + 1)


def _fallback(value):
    """orjson default: tensors, paths, sets and the like become plain values."""
    if hasattr(value, "item") and callable(value.item):
        try:
            return value.item()
        except Exception:
            pass
    if isinstance(value, (set, frozenset, tuple)):
        return list(value)
    return str(value)
