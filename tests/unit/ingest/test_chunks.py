"""``chunks.whole_lines``: whole lines, about ``chunk_bytes`` at a time, whatever buffers it is handed."""

from __future__ import annotations

from logkit.ingest.chunks import Ring, whole_lines


def _lines(n: int) -> bytes:
    return b"".join(b'{"i": %d, "pad": "%s"}\n' % (i, b"x" * (i % 37)) for i in range(n))


def test_buffers_reused_from_a_bigger_read_keep_chunks_small(tmp_path):
    path = tmp_path / "s.jsonl"
    data = _lines(2000)
    path.write_bytes(data)
    buffers = [bytearray(1 << 20), bytearray(1 << 20)]  # what a read at 1 MB chunks leaves behind
    got = [(bytes(buf[:size]), torn) for buf, size, torn in whole_lines(path, 2048, Ring(1, buffers))]
    assert b"".join(chunk for chunk, _ in got) == data and not any(torn for _, torn in got)
    assert all(len(chunk) <= 2048 and chunk.endswith(b"\n") for chunk, _ in got)
    assert len(got) >= len(data) // 2048


def test_a_line_longer_than_the_chunk_grows_the_room_and_a_torn_tail_comes_last(tmp_path):
    path = tmp_path / "s.jsonl"
    long = b'{"x": "' + b"y" * 5000 + b'"}\n'
    data = b'{"a": 1}\n' + long + b'{"b": 2}\n{"c": 3'
    path.write_bytes(data)
    got = [(bytes(buf[:size]), torn) for buf, size, torn in whole_lines(path, 64)]
    assert b"".join(chunk for chunk, _ in got) == data
    assert got[-1] == (b'{"c": 3', True)
    assert any(long in chunk for chunk, _ in got)


def test_a_ring_read_across_streams_never_refills_a_held_chunk(tmp_path):
    """The fast engine reads a session's streams as one flow: the next stream's chunks go into the
    ring while the last ``held`` chunks of the one before are still being parsed."""
    b = tmp_path / "b.jsonl"
    b.write_bytes(_lines(500)[::-1].replace(b"\n", b"", 1) + b"\n")  # other bytes, still whole lines
    ends = set()
    for n in range(200, 400, 20):  # the first stream's last chunk at each turn of the ring
        a = tmp_path / f"a{n}.jsonl"
        a.write_bytes(_lines(n))
        ring, held = Ring(2), []
        for path in (a, b):
            for buf, size, _ in whole_lines(path, 1024, ring):
                held.append((buf, bytes(buf[:size])))
                # the last two chunks handed out (of either stream) are as they were handed out
                assert all(bytes(h[:len(copy)]) == copy for h, copy in held[-3:])
            if path == a:
                ends.add(ring.turn)
        assert b"".join(copy for _, copy in held) == a.read_bytes() + b.read_bytes()
        assert len(ring.buffers) == 3
    assert len(ends) == 3
