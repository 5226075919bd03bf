"""The JSONL parser's memory: the pool pyarrow's parser allocates from, and its freed memory handed back
to the system (``hand_back``), once in a while as streams end (``HAND_BACK_BYTES`` read since the last
time: a folder of thousands of tiny streams does not pay a trim per stream)."""

from __future__ import annotations

import functools

import pyarrow as pa

# Bytes of streams read between two hand-backs (each costs ~0.1 ms: per tiny stream, most of its read).
HAND_BACK_BYTES = 64 << 20
_PARSE_POOL: pa.MemoryPool | None = None


def pool() -> pa.MemoryPool:
    """The parser's pool: the system allocator (it hands freed parser memory back when asked; the
    default mimalloc keeps tens of MB of it resident, and jemalloc parses ~10% slower)."""
    global _PARSE_POOL
    if _PARSE_POOL is None:
        _PARSE_POOL = pa.system_memory_pool()
    return _PARSE_POOL


@functools.lru_cache(maxsize=1)
def _malloc_trim():
    """The C library's ``malloc_trim`` (glibc), or None: the system allocator keeps the freed memory of
    threads' arenas resident until asked (``release_unused`` of pyarrow's system pool does not trim them)."""
    try:
        import ctypes

        return ctypes.CDLL(None).malloc_trim
    except (OSError, AttributeError):
        return None


def hand_back() -> None:
    """The parser's freed memory given back to the system (pyarrow's pools, then the C allocator's arenas)."""
    pool().release_unused()
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
