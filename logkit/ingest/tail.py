"""Incremental tailing of the rank streams under a folder: what ``analyze_logs --follow`` reads.

Each ``<session_id>_rank<N>.jsonl`` is read from where the last poll stopped: one ``stat`` per
stream and poll, and a read of the bytes appended since (never the whole file again), so the
cost of a poll follows what was written since the previous one, not the size of the stream.

- A torn last line (the writer hands whole lines to the OS, but a reader may see a write half
  done) is kept until its newline arrives; only whole lines are decoded, by the per-line
  decoder of the JSONL engines (``jsonl_lines.decode_line``).
- A stream that shrinks, or is replaced by another file (another inode, or other first bytes),
  is read again from its start, and the poll says so (``Chunk.reset``): its rank starts over.
- New streams and new session folders are found by walking the folder (``MAX_DEPTH`` levels),
  listing a folder again only when its modification time changed.

    >>> tail = FolderTail("logs")                               # doctest: +SKIP
    >>> for stream in tail.discover(): tail.follow(stream)      # doctest: +SKIP
    >>> for chunk in tail.poll(): print(chunk.stream.rank, len(chunk.records))  # doctest: +SKIP
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path

from logkit.ingest.jsonl_lines import decode_line
from logkit.ingest.safe_io import check
from logkit.schema.files import RANK_JSONL_RE

MAX_DEPTH = 4  # folders below the root searched for streams (logs/<session>/ is depth 1)
MAX_READ = 1 << 20  # bytes read from one stream in one poll (a long stream is caught up over several)
HEAD_BYTES = 64  # a stream's first bytes, compared to tell a replaced file from a grown one
PEEK_BYTES = 64 << 10  # how far back from the end the last whole line is looked for
SETTLE_NS = 2_000_000_000  # a folder changed this recently is listed again at the next poll


@dataclass(frozen=True)
class FollowedStream:
    """One rank's stream: its session folder (relative to the root), session id and rank."""

    path: Path
    folder: str
    session_id: str
    rank: int


@dataclass
class Chunk:
    """What one poll read from one stream: ``records`` as (line number, record), ``notes`` as
    (line number, reason, text) for lines that are no record, ``reset`` when the stream was read
    again from its start (it shrank or was replaced), ``nbytes`` the bytes read, ``age_s`` seconds
    since the file was last written (its mtime; 0 when written now)."""

    stream: FollowedStream
    records: list[tuple[int, dict]] = field(default_factory=list)
    notes: list[tuple[int, str, str]] = field(default_factory=list)
    reset: bool = False
    nbytes: int = 0
    age_s: float = 0.0


class StreamTail:
    """One file, read incrementally: ``poll()`` gives the whole lines appended since the last poll."""

    def __init__(self, path: str | Path, max_read: int = MAX_READ):
        self.path = Path(path)
        self.max_read = max_read
        self.offset = 0  # bytes consumed (whole lines and the kept partial line)
        self.line = 0  # whole lines seen
        self.partial = b""  # an unterminated last line, waiting for its newline
        self.bytes_read = 0  # every byte read, over the tail's life (for tests and the benchmark)
        self.behind = False  # the last poll left bytes unread (more than ``max_read`` were new)
        self._fh = None
        self._ident: tuple[int, int] | None = None
        self._head = b""

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def _restart(self, st: os.stat_result) -> None:
        self.close()
        check(self.path)  # a regular file only: a FIFO in its place would be waited on for ever
        self._fh = open(self.path, "rb", buffering=0)  # noqa: SIM115 - kept open between polls
        self._ident = (st.st_dev, st.st_ino)
        self.offset, self.line, self.partial, self._head = 0, 0, b"", b""

    def _replaced(self, st: os.stat_result) -> bool:
        """The file at ``path`` is not the one read so far: another inode, shorter, or other first bytes."""
        if self._ident != (st.st_dev, st.st_ino) or st.st_size < self.offset:
            return True
        if self._head:
            return os.pread(self._fh.fileno(), len(self._head), 0) != self._head
        return False

    def poll(self, chunk: Chunk | None = None) -> Chunk | None:
        """The records of the whole lines appended since the last poll (None: the file is gone or
        has nothing new). ``chunk``: fill this one (its ``stream`` is the caller's)."""
        self.behind = False
        try:
            st = os.stat(self.path)
        except OSError:
            return None  # gone (or not yet there): wait for it
        reset = False
        if self._fh is None or (st.st_size != self.offset and self._replaced(st)):
            reset = self._fh is not None
            try:
                self._restart(st)
            except OSError:
                return None
        if st.st_size == self.offset and not reset:
            return None
        out = chunk if chunk is not None else Chunk(FollowedStream(self.path, "", "", -1))
        out.reset = reset
        out.age_s = max(0.0, time.time() - st.st_mtime)
        try:
            self._read(min(st.st_size - self.offset, self.max_read), out)
        except OSError as exc:
            out.notes.append((self.line + 1, f"unreadable: {exc}", ""))
        self.behind = st.st_size > self.offset
        return out

    def _read(self, size: int, out: Chunk) -> None:
        data = os.pread(self._fh.fileno(), size, self.offset) if size > 0 else b""
        self.offset += len(data)
        self.bytes_read += len(data)
        out.nbytes += len(data)
        if len(self._head) < HEAD_BYTES and self.offset - len(data) < HEAD_BYTES:
            self._head = os.pread(self._fh.fileno(), HEAD_BYTES, 0)
        lines = (self.partial + data).split(b"\n")
        self.partial = lines.pop()  # b"" after a newline; otherwise a line still being written
        for raw in lines:
            self.line += 1
            raw = raw.rstrip(b"\r")
            if not raw.strip():
                continue
            record, note, text = decode_line(raw, True)
            if note is not None:
                out.notes.append((self.line, note, text))
            if record is not None:
                out.records.append((self.line, record))


def last_record(path: str | Path) -> dict | None:
    """The record of a stream's last whole line (None: empty, unreadable, or no record there):
    read from the end, so that a finished stream of any size costs one small read."""
    try:
        check(path)
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            start = max(0, size - PEEK_BYTES)
            data = os.pread(fh.fileno(), size - start, start)
    except OSError:
        return None
    end = data.rfind(b"\n")
    if end < 0:
        return None
    begin = data.rfind(b"\n", 0, end) + 1
    if begin == 0 and start > 0:
        return None  # a line longer than the peek: not known from here
    record, _, _ = decode_line(data[begin:end].rstrip(b"\r"), True)
    return record


class FolderTail:
    """Every rank stream under ``root``: ``discover()`` finds new ones, ``follow()`` starts
    reading one, ``poll()`` reads what the followed streams gained since the last poll."""

    def __init__(self, root: str | Path, max_depth: int = MAX_DEPTH, max_read: int = MAX_READ):
        self.root = Path(root)
        self.max_depth = max_depth
        self.max_read = max_read
        self.tails: dict[Path, tuple[FollowedStream, StreamTail]] = {}
        self._seen: set[Path] = set()
        self._dirs: dict[Path, int] = {}  # folder -> its mtime when last listed
        self._subdirs: dict[Path, list[Path]] = {}

    @property
    def bytes_read(self) -> int:
        return sum(t.bytes_read for _, t in self.tails.values())

    @property
    def behind(self) -> bool:
        """A followed stream has bytes its last poll left unread."""
        return any(t.behind for _, t in self.tails.values())

    def discover(self) -> list[FollowedStream]:
        """Streams that appeared since the last call (each once), in path order."""
        found: list[FollowedStream] = []
        self._walk(self.root, 0, found)
        return sorted(found, key=lambda s: (s.folder, s.session_id, s.rank))

    def _walk(self, folder: Path, depth: int, found: list[FollowedStream]) -> None:
        try:
            mtime = os.stat(folder).st_mtime_ns
        except OSError:
            return
        if self._dirs.get(folder) == mtime:
            # an unchanged listing: only its subfolders may hold something new
            for sub in self._subdirs.get(folder, ()):
                self._walk(sub, depth + 1, found)
            return
        try:
            entries = list(os.scandir(folder))
        except OSError:
            return
        # a listing is trusted again only once its mtime is old enough: a file system whose clock
        # is coarse may give a folder changed twice within a tick one mtime
        if time.time_ns() - mtime > SETTLE_NS:
            self._dirs[folder] = mtime
        subdirs = []
        for entry in entries:
            path = Path(entry.path)
            if entry.is_dir(follow_symlinks=False):
                if depth < self.max_depth and not entry.name.startswith("."):
                    subdirs.append(path)
                    self._walk(path, depth + 1, found)
            elif path not in self._seen:
                match = RANK_JSONL_RE.match(entry.name)
                if match is None or entry.name.endswith(".gz") or not entry.is_file():
                    continue  # a FIFO, a device, a dangling link: no stream
                self._seen.add(path)
                rel = folder.relative_to(self.root).as_posix() if folder != self.root else "."
                found.append(FollowedStream(path, rel, match["session_id"], int(match["rank"])))
        self._subdirs[folder] = subdirs

    def follow(self, stream: FollowedStream) -> None:
        if stream.path not in self.tails:
            self.tails[stream.path] = (stream, StreamTail(stream.path, self.max_read))

    def poll(self) -> list[Chunk]:
        """One chunk per followed stream that gained bytes (or was reset), in path order."""
        out = []
        for path in sorted(self.tails):
            stream, tail = self.tails[path]
            chunk = tail.poll(Chunk(stream))
            if chunk is not None:
                out.append(chunk)
        return out

    def close(self) -> None:
        for _, tail in self.tails.values():
            tail.close()
