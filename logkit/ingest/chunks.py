"""Whole lines of a stream, a chunk at a time: how the fast engine (``jsonl_arrow``) reads our JSONL
streams in bulk.

Chunks are filled into a few buffers, taken in turn, and handed out in place (never copied): a
consumer may still be reading the last ``held`` chunks it was given when it asks for the next one
(the fast engine parses a few chunks at once, one per core), never more. Memory is ``held + 1``
chunks, whatever the size of the stream.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO


def open_stream(path: Path) -> BinaryIO:
    """The stream's bytes, gunzipped for ``.gz``."""
    return gzip.open(path, "rb") if path.name.endswith(".gz") else open(path, "rb")  # noqa: SIM115


def whole_lines(path: Path, chunk_bytes: int, held: int = 0,
                buffers: list[bytearray] | None = None) -> Iterator[tuple[bytearray, int, bool]]:
    """``(buffer, size, torn)``: the first ``size`` bytes of ``buffer`` are whole lines, about
    ``chunk_bytes`` of them. The last chunk is ``torn`` when the stream does not end with a
    newline (a writer cut off mid-line): it is the rest of the stream, unterminated. A line
    longer than the buffer grows it. A buffer is refilled ``held + 1`` chunks after it was
    handed out. ``buffers``: the buffers to fill in turn, made (or grown) here as the stream needs
    them; a caller that hands the same list to each stream has memory once touched reused."""
    buffers = [] if buffers is None else buffers
    with open_stream(path) as fh:
        # no larger than the file (a new buffer is zero-filled: memory touched, time spent)
        size = chunk_bytes if path.name.endswith(".gz") else min(chunk_bytes, os.fstat(fh.fileno()).st_size + 1)
        # a chunk is ``cap`` bytes at most, whatever the size of a buffer reused from a bigger read
        turn, filled, cap = 0, 0, size
        buf = _buffer(buffers, turn, cap)
        while True:
            with memoryview(buf) as view:
                got = fh.readinto(view[filled:cap])
            if not got:
                break
            filled += got
            cut = buf.rfind(b"\n", 0, filled) + 1
            if not cut:
                if filled == cap:  # a line longer than the chunk: twice the room
                    cap *= 2
                    if len(buf) < cap:
                        buf = buffers[turn] = buf + bytearray(cap - len(buf))
                continue
            yield buf, cut, False
            turn = (turn + 1) % (held + 1)
            tail = filled - cut
            nxt = _buffer(buffers, turn, cap)
            nxt[:tail] = buf[cut:filled]
            buf, filled = nxt, tail
    if filled:
        yield buf, filled, True


def _buffer(buffers: list[bytearray], turn: int, size: int) -> bytearray:
    """The ``turn``-th buffer, of at least ``size`` bytes."""
    if turn == len(buffers):
        buffers.append(bytearray(size))
    elif len(buffers[turn]) < size:
        buffers[turn] = bytearray(size)
    return buffers[turn]
