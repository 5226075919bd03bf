"""Every file logkit reads is opened here: regular files only, never a wait, every read bounded.

People point ``analyze_logs`` at whatever holds their logs: a shared scratch space, a folder other jobs
still write into, a half-copied archive. So, before a file is opened, it is looked at (``check``): a
FIFO, a socket, a device, a folder or a dangling link is no log (a FIFO would be waited on for ever,
``/dev/zero`` read for ever), nor is a link that leads out of the folder read unless the user asked
for links to be followed (``Scope``). Such a file is skipped with a diagnostic that names it and says
why. Then it is opened without blocking (``O_NONBLOCK``: a file swapped for a FIFO between the look and
the open does not hang either) and checked again on its descriptor.

Every read is bounded (``open_file``):

- a file is read up to the size it had when it was opened: a file still being written gives what it
  held then, never an endless read;
- a compressed file is inflated up to ``LIMITS.inflate_ratio`` times its size (and at least
  ``LIMITS.inflate_floor``), never past ``LIMITS.inflated_bytes``: a small gzip file that inflates to
  gigabytes stops there, with a diagnostic, and what came before is read;
- a document read whole (a JSON document, a Flight Recorder dump, a text log read at once) is refused
  past ``LIMITS.whole_bytes``: streams are read in chunks, whatever their size.

The limits are read from the environment (``LOGKIT_MAX_WHOLE_BYTES``, ``LOGKIT_MAX_INFLATE_RATIO``,
``LOGKIT_MAX_INFLATED_BYTES``) and may be set in code (``LIMITS``). ``display`` is how a path (or any
text from a file name) is written out: a name that is not UTF-8 keeps its bytes as ``\\xff`` escapes.

Standard library only: discovery reads it.
"""

from __future__ import annotations

import gzip
import io
import os
import stat
import zlib
from dataclasses import dataclass

__all__ = ["Refused", "TooLarge", "Limits", "LIMITS", "Scope", "check", "open_file", "read_whole", "display",
           "kind_of", "is_gzip_name"]


def _env_int(name: str, default: int) -> int:
    try:
        value = int(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if value > 0 else default


@dataclass
class Limits:
    """How much logkit reads of one file (see the module doc)."""

    whole_bytes: int = 256 << 20
    inflate_ratio: int = 100
    inflate_floor: int = 64 << 20
    inflated_bytes: int = 32 << 30

    @classmethod
    def from_env(cls) -> Limits:
        base = cls()
        return cls(whole_bytes=_env_int("LOGKIT_MAX_WHOLE_BYTES", base.whole_bytes),
                   inflate_ratio=_env_int("LOGKIT_MAX_INFLATE_RATIO", base.inflate_ratio),
                   inflate_floor=base.inflate_floor,
                   inflated_bytes=_env_int("LOGKIT_MAX_INFLATED_BYTES", base.inflated_bytes))

    def inflated_cap(self, compressed: int) -> int:
        """How many bytes a compressed file of ``compressed`` bytes may inflate to."""
        return min(self.inflated_bytes, max(self.inflate_floor, self.inflate_ratio * compressed))


LIMITS = Limits.from_env()


class Refused(OSError):
    """A file that is not read, and why (an ``OSError``: every reader's "unreadable" path notes it)."""

    def __init__(self, path, why: str) -> None:
        super().__init__(f"not read: {why}")
        self.path, self.why = path, why

    def __str__(self) -> str:
        return f"not read: {self.why}"


class TooLarge(OSError):
    """A read stopped at a limit (what came before it is kept)."""

    def __str__(self) -> str:
        return str(self.args[0]) if self.args else "past the limit"


def display(value) -> str:
    """A path or a name as text that any output takes: bytes of a name that is not UTF-8 (Python's
    surrogate escapes) written as ``\\xNN``, lone surrogates from a JSON escape as ``\\udNNN``."""
    text = os.fspath(value) if isinstance(value, os.PathLike) else value
    if isinstance(text, bytes):
        return text.decode("utf-8", "backslashreplace")
    text = str(text)
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace") \
            if _escaped_bytes_only(text) else text.encode("utf-8", "backslashreplace").decode("utf-8")


def _escaped_bytes_only(text: str) -> bool:
    """Every surrogate of ``text`` is a byte a file name had (U+DC80-U+DCFF)."""
    return all(not 0xD800 <= ord(c) <= 0xDFFF or 0xDC80 <= ord(c) <= 0xDCFF for c in text)


_KINDS = ((stat.S_ISFIFO, "a FIFO (named pipe): reading it would wait for a writer"),
          (stat.S_ISSOCK, "a socket"), (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISDIR, "a folder"))


def kind_of(mode: int) -> str | None:
    """What a file of ``mode`` is when it is no regular file (None for a regular file)."""
    if stat.S_ISREG(mode):
        return None
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


@dataclass(frozen=True)
class Scope:
    """The folder being read (its real path) and whether links leading out of it are followed."""

    root: str | None = None
    follow_links: bool = False

    @classmethod
    def of(cls, root, follow_links: bool = False) -> Scope:
        return cls(os.path.realpath(root), follow_links)

    def inside(self, real: str) -> bool:
        if self.root is None or self.follow_links:
            return True
        return real == self.root or real.startswith(self.root.rstrip(os.sep) + os.sep)


ANYWHERE = Scope()


def check(path, scope: Scope = ANYWHERE) -> os.stat_result:
    """The ``stat`` of ``path``'s regular file, or ``Refused`` saying what it is instead."""
    path = os.fspath(path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        if os.path.islink(path):
            raise Refused(path, f"a dangling link (to {display(os.readlink(path))})") from None
        raise
    what = kind_of(st.st_mode)
    if what is not None:
        raise Refused(path, what)
    if scope.root is not None and not scope.follow_links and os.path.islink(path):
        real = os.path.realpath(path)
        if not scope.inside(real):
            raise Refused(path, f"a link out of the folder read (to {display(real)}; --follow-links reads it)")
    return st


class _Upto(io.RawIOBase):
    """A file descriptor's bytes up to ``size`` (the file's size when it was opened)."""

    def __init__(self, fd: int, size: int) -> None:
        super().__init__()
        self.fd, self.left = fd, size

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        if self.left <= 0:
            return 0
        with memoryview(buf) as view:
            n = os.readv(self.fd, [view[:min(len(view), self.left)]])
        self.left -= n
        return n

    def fileno(self) -> int:
        return self.fd

    def close(self) -> None:
        if not self.closed:
            try:
                os.close(self.fd)
            finally:
                super().close()


class _Capped(io.RawIOBase):
    """A decompressed stream that stops at ``cap`` bytes with ``TooLarge`` (a gzip bomb)."""

    def __init__(self, inner, cap: int, path, compressed: int) -> None:
        super().__init__()
        self.inner, self.cap, self.path, self.compressed, self.given = inner, cap, path, compressed, 0

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        with memoryview(buf) as view:
            room = self.cap - self.given
            if room <= 0:
                if self.inner.read(1):
                    raise TooLarge(f"inflates past {self.cap} bytes ({self.compressed} compressed; the limit is "
                                   f"{LIMITS.inflate_ratio}x, at least {LIMITS.inflate_floor} and at most "
                                   f"{LIMITS.inflated_bytes} bytes): read up to there")
                return 0
            n = self.inner.readinto(view[:min(len(view), room)])
        self.given += n
        return n

    def close(self) -> None:
        if not self.closed:
            try:
                self.inner.close()
            finally:
                super().close()


def is_gzip_name(path) -> bool:
    return os.fspath(path).endswith(".gz")


def open_file(path, unzip: bool | None = None, scope: Scope = ANYWHERE, buffering: int = 1 << 16):
    """``path`` opened for reading, bounded (see the module doc); gunzipped when ``unzip`` (default: a
    ``.gz`` name). Raises ``Refused`` for what is no regular file, ``OSError`` as ``open`` does."""
    check(path, scope)
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_NOCTTY", 0) | getattr(os, "O_CLOEXEC", 0)
    fd = os.open(path, flags)
    try:
        st = os.fstat(fd)
        what = kind_of(st.st_mode)
        if what is not None:
            raise Refused(path, what)
        raw = _Upto(fd, st.st_size)
    except BaseException:
        os.close(fd)
        raise
    fh = io.BufferedReader(raw, buffering)
    if unzip if unzip is not None else is_gzip_name(path):
        inner = gzip.GzipFile(fileobj=fh, mode="rb")
        return io.BufferedReader(_Capped(inner, LIMITS.inflated_cap(st.st_size), path, st.st_size), buffering)
    return fh


def read_whole(path, unzip: bool | None = None, scope: Scope = ANYWHERE, limit: int | None = None) -> bytes:
    """The bytes of a file read whole (gunzipped for ``.gz``), refused past ``limit`` (default
    ``LIMITS.whole_bytes``) with ``TooLarge``. Raises as ``open_file``, and ``EOFError`` / ``zlib.error``
    / ``gzip.BadGzipFile`` for a damaged gzip file."""
    limit = LIMITS.whole_bytes if limit is None else limit
    with open_file(path, unzip, scope) as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise TooLarge(f"larger than {limit} bytes, the most read at once (LOGKIT_MAX_WHOLE_BYTES)")
    return data


# what reading a damaged or hostile file may raise, beside Refused and TooLarge (both OSError)
READ_ERRORS = (OSError, EOFError, zlib.error, gzip.BadGzipFile)


def size_of(path) -> int:
    """The size of a regular file, 0 for anything else (or a file gone)."""
    try:
        st = os.stat(path)
    except OSError:
        return 0
    return st.st_size if stat.S_ISREG(st.st_mode) else 0
