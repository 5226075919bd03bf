"""Whole lines of a stream, a chunk at a time: how the fast engine (``jsonl_arrow``) reads our JSONL
streams in bulk.

One buffer is filled and handed out in place (never copied): a consumer is done with a chunk
before it asks for the next one. Memory is one chunk, whatever the size of the stream.
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


def whole_lines(path: Path, chunk_bytes: int) -> Iterator[tuple[bytearray, int, bool]]:
    """``(buffer, size, torn)``: the first ``size`` bytes of ``buffer`` are whole lines, about
    ``chunk_bytes`` of them. The last chunk is ``torn`` when the stream does not end with a
    newline (a writer cut off mid-line): it is the rest of the stream, unterminated. A line
    longer than the buffer grows it."""
    with open_stream(path) as fh:
        # no larger than the file (a new buffer is zero-filled: memory touched, time spent)
        size = chunk_bytes if path.name.endswith(".gz") else min(chunk_bytes, os.fstat(fh.fileno()).st_size + 1)
        buf, filled = bytearray(size), 0
        while True:
            with memoryview(buf) as view:
                got = fh.readinto(view[filled:])
            if not got:
                break
            filled += got
            cut = buf.rfind(b"\n", 0, filled) + 1
            if not cut:
                if filled == len(buf):
                    buf = buf + bytearray(len(buf))
                continue
            yield buf, cut, False
            tail = filled - cut
            buf[:tail] = buf[cut:filled]
            filled = tail
    if filled:
        yield buf, filled, True
