"""Whole lines of a stream, a chunk at a time: how the fast engine (``jsonl_arrow``) reads our JSONL
streams in bulk.

Chunks are filled into a few buffers (a ``Ring``), taken in turn, and handed out in place (never
copied): a consumer may still be reading the last ``held`` chunks it was given when it asks for the
next one (the fast engine parses a few chunks at once, the next stream's while the last of the one
before is mapped), never more. Memory is ``held + 1`` chunks, whatever the size of the streams.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from logkit.ingest.safe_io import TooLarge, open_file

# The longest line a stream may have (a record of ours is a few KB; a Flight Recorder line a few MB).
MAX_LINE_BYTES = 64 << 20


def open_stream(path: Path) -> BinaryIO:
    """The stream's bytes, gunzipped for ``.gz``: a regular file only, read up to its size when opened
    (``safe_io.open_file``)."""
    return open_file(path)


class Ring:
    """The buffers chunks are filled into, taken in turn across the streams read with it: one is
    refilled ``held + 1`` chunks after it was handed out. ``buffers``: ones a read before left
    (memory once touched, reused); made (or grown) here as the streams need them."""

    def __init__(self, held: int = 0, buffers: list[bytearray] | None = None) -> None:
        self.held, self.buffers, self.turn = held, [] if buffers is None else buffers, 0

    def buffer(self, size: int) -> bytearray:
        """This turn's buffer, of at least ``size`` bytes."""
        if self.turn == len(self.buffers):
            self.buffers.append(bytearray(size))
        elif len(self.buffers[self.turn]) < size:
            self.buffers[self.turn] = bytearray(size)
        return self.buffers[self.turn]

    def grow(self, size: int) -> bytearray:
        """This turn's buffer grown to ``size`` bytes, its content kept."""
        buf = self.buffers[self.turn]
        if len(buf) < size:
            buf = self.buffers[self.turn] = buf + bytearray(size - len(buf))
        return buf

    def next(self) -> None:
        self.turn = (self.turn + 1) % (self.held + 1)


def whole_lines(path: Path, chunk_bytes: int, ring: Ring | None = None) -> Iterator[tuple[bytearray, int, bool]]:
    """``(buffer, size, torn)``: the first ``size`` bytes of ``buffer`` are whole lines, about
    ``chunk_bytes`` of them. The last chunk is ``torn`` when the stream does not end with a
    newline (a writer cut off mid-line): it is the rest of the stream, unterminated. A line
    longer than the buffer grows it. The buffers are ``ring``'s, in turn (default: one)."""
    ring = Ring() if ring is None else ring
    with open_stream(path) as fh:
        # no larger than the file (a new buffer is zero-filled: memory touched, time spent)
        size = chunk_bytes if path.name.endswith(".gz") else min(chunk_bytes, os.fstat(fh.fileno()).st_size + 1)
        # a chunk is ``cap`` bytes at most, whatever the size of a buffer reused from a bigger read
        filled, cap = 0, size
        buf = ring.buffer(cap)
        while True:
            with memoryview(buf) as view:
                got = fh.readinto(view[filled:cap])
            if not got:
                break
            filled += got
            cut = buf.rfind(b"\n", 0, filled) + 1
            if not cut:
                if filled == cap:  # a line longer than the chunk: twice the room
                    if cap >= MAX_LINE_BYTES:
                        raise TooLarge(f"a line of more than {MAX_LINE_BYTES} bytes (no newline)")
                    cap *= 2
                    buf = ring.grow(cap)
                continue
            yield buf, cut, False
            ring.next()
            tail = filled - cut
            nxt = ring.buffer(cap)
            nxt[:tail] = buf[cut:filled]
            buf, filled = nxt, tail
    if filled:
        yield buf, filled, True


_NONEMPTY = re.compile(rb"[^\n]+")


def numbered_lines(fh: BinaryIO, max_line: int = MAX_LINE_BYTES, chunk: int = 1 << 20
                   ) -> Iterator[tuple[int, bytes, bool, bool]]:
    """``(line number, bytes without the newline, terminated, cut)`` of each line of ``fh`` that is not
    empty, a chunk at a time: a run of empty lines costs what scanning its bytes costs (a file of
    newlines, a gzip bomb of them). A line longer than ``max_line`` is given once by its first
    ``max_line`` bytes (``cut``), the rest skipped up to its newline: line numbers stay the file's."""
    number, tail, skipping = 1, b"", False  # number: the line the tail starts
    while data := fh.read(chunk):
        data = tail + data if tail else data
        start = 0
        if skipping:
            start = data.find(b"\n") + 1
            if not start:
                tail = b""
                continue
            skipping, number = False, number + 1
        cut = data.rfind(b"\n", start) + 1
        if not cut:
            tail = data[start:] if start else data
            if len(tail) > max_line:
                yield number, tail[:max_line], False, True
                tail, skipping = b"", True
            continue
        tail, line, pos = data[cut:], number, start
        for m in _NONEMPTY.finditer(data, start, cut - 1):
            line += data.count(b"\n", pos, m.start())
            pos = m.start()
            raw = m.group()
            yield line, raw[:max_line], True, len(raw) > max_line
        number += data.count(b"\n", start, cut)
    if tail and not skipping:
        yield number, tail[:max_line], False, len(tail) > max_line
