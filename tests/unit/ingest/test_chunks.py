"""``chunks.whole_lines``: whole lines, about ``chunk_bytes`` at a time, whatever buffers it is handed."""

from __future__ import annotations

from logkit.ingest.chunks import whole_lines


def _lines(n: int) -> bytes:
    return b"".join(b'{"i": %d, "pad": "%s"}\n' % (i, b"x" * (i % 37)) for i in range(n))


def test_buffers_reused_from_a_bigger_read_keep_chunks_small(tmp_path):
    path = tmp_path / "s.jsonl"
    data = _lines(2000)
    path.write_bytes(data)
    buffers = [bytearray(1 << 20), bytearray(1 << 20)]  # what a read at 1 MB chunks leaves behind
    got = [(bytes(buf[:size]), torn) for buf, size, torn in whole_lines(path, 2048, 1, buffers)]
    assert b"".join(chunk for chunk, _ in got) == data and not any(torn for _, torn in got)
    assert all(len(chunk) <= 2048 and chunk.endswith(b"\n") for chunk, _ in got)
    assert len(got) >= len(data) // 2048


def test_a_line_longer_than_the_chunk_grows_the_room_and_a_torn_tail_comes_last(tmp_path):
    path = tmp_path / "s.jsonl"
    long = b'{"x": "' + b"y" * 5000 + b'"}\n'
    data = b'{"a": 1}\n' + long + b'{"b": 2}\n{"c": 3'
    path.write_bytes(data)
    got = [(bytes(buf[:size]), torn) for buf, size, torn in whole_lines(path, 64, 0, [])]
    assert b"".join(chunk for chunk, _ in got) == data
    assert got[-1] == (b'{"c": 3', True)
    assert any(long in chunk for chunk, _ in got)
