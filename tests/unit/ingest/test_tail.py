"""The incremental tail of ``--follow``: only appended bytes are read (every read counted at the
system call), a torn last line waits for its newline, a file replaced or truncated is read again
from its start, new streams and new session folders are found, a long stream is caught up in
bounded reads."""

from __future__ import annotations

import os

import orjson

from logkit.ingest import tail as tail_mod
from logkit.ingest.tail import FolderTail, StreamTail, last_record
from logkit.schema.files import SessionFiles
from logkit.schema.records import SESSION_END, TRAINING_STEP


def step_record(step: int, rank: int = 0, sid: str = "s1") -> dict:
    return TRAINING_STEP.build(timestamp="2026-01-01T00:00:00.000000+00:00", time_s=step * 0.5, type=TRAINING_STEP.type,
                               level="INFO", message=f"Step {step}", session_id=sid, rank=rank, world_size=2,
                               step=step, step_time_s=0.5, loss=1.0 / step)


def line(record: dict) -> bytes:
    return orjson.dumps(record) + b"\n"


def steps_of(records) -> list[int]:
    return [TRAINING_STEP["step"].read(r) for _, r in records]


class PreadCounter:
    """Every os.pread of the tail module: (bytes asked for, offset, bytes returned)."""

    def __init__(self, monkeypatch):
        self.calls: list[tuple[int, int, int]] = []
        real = os.pread

        def pread(fd, n, offset):
            data = real(fd, n, offset)
            self.calls.append((n, offset, len(data)))
            return data

        monkeypatch.setattr(tail_mod.os, "pread", pread)

    def data_reads(self):
        """The reads of stream content (not the first-bytes check of HEAD_BYTES at offset 0)."""
        return [c for c in self.calls if not (c[1] == 0 and c[0] == tail_mod.HEAD_BYTES)]


def test_only_the_appended_bytes_are_read(tmp_path, monkeypatch):
    path = tmp_path / "s1_rank0.jsonl"
    first = b"".join(line(step_record(s)) for s in range(1, 41))
    path.write_bytes(first)
    reads = PreadCounter(monkeypatch)
    tail = StreamTail(path)
    assert steps_of(tail.poll().records) == list(range(1, 41))
    assert [(off, got) for _, off, got in reads.data_reads()] == [(0, len(first))]
    total = len(first)
    for batch in range(3):  # three more polls, each after an append
        more = b"".join(line(step_record(s)) for s in range(41 + 10 * batch, 51 + 10 * batch))
        with open(path, "ab") as fh:
            fh.write(more)
        reads.calls.clear()
        chunk = tail.poll()
        assert steps_of(chunk.records) == list(range(41 + 10 * batch, 51 + 10 * batch))
        # one read of exactly the new bytes, from where the file ended; the first-bytes check is small
        assert [(off, got) for _, off, got in reads.data_reads()] == [(total, len(more))]
        assert sum(got for _, _, got in reads.calls) <= len(more) + tail_mod.HEAD_BYTES
        total += len(more)
    reads.calls.clear()
    assert tail.poll() is None and reads.calls == []  # nothing new: a stat, no read
    assert tail.bytes_read == path.stat().st_size == total


def test_a_torn_line_waits_for_its_newline(tmp_path):
    path = tmp_path / "s1_rank0.jsonl"
    whole, torn = line(step_record(1)), line(step_record(2))
    path.write_bytes(whole + torn[:37])
    tail = StreamTail(path)
    chunk = tail.poll()
    assert steps_of(chunk.records) == [1] and chunk.notes == []  # the torn part is no note: it is waited for
    with open(path, "ab") as fh:
        fh.write(torn[37:-1])  # the rest, still without its newline
    chunk = tail.poll()
    assert chunk.records == [] and chunk.notes == []
    with open(path, "ab") as fh:
        fh.write(b"\n")
    chunk = tail.poll()
    assert [(n, r) for n, r in chunk.records] == [(2, step_record(2))]


def test_a_broken_line_is_a_note_with_its_number(tmp_path):
    path = tmp_path / "s1_rank0.jsonl"
    path.write_bytes(line(step_record(1)) + b"{not json\n" + line(step_record(2)))
    chunk = StreamTail(path).poll()
    assert steps_of(chunk.records) == [1, 2] and [n for n, _, _ in chunk.notes] == [2]


def test_a_replaced_or_truncated_file_is_read_from_its_start(tmp_path):
    path = tmp_path / "s1_rank0.jsonl"
    path.write_bytes(b"".join(line(step_record(s)) for s in range(1, 21)))
    tail = StreamTail(path)
    assert len(tail.poll().records) == 20
    # replaced by a shorter file (another inode)
    other = tmp_path / "new.jsonl"
    other.write_bytes(b"".join(line(step_record(s, sid="s2")) for s in range(1, 4)))
    os.replace(other, path)
    chunk = tail.poll()
    assert chunk.reset and steps_of(chunk.records) == [1, 2, 3] and chunk.records[0][0] == 1
    # truncated in place, then written again beyond the old length with other first bytes
    longer = b"".join(line(step_record(s, rank=1)) for s in range(100, 110))
    with open(path, "r+b") as fh:
        fh.truncate(0)
        fh.write(longer)
    chunk = tail.poll()
    assert chunk.reset and steps_of(chunk.records) == list(range(100, 110))
    # shrunk in place
    with open(path, "r+b") as fh:
        fh.truncate(len(line(step_record(100, rank=1))))
    chunk = tail.poll()
    assert chunk.reset and steps_of(chunk.records) == [100]
    # grown, same file: no reset
    with open(path, "ab") as fh:
        fh.write(line(step_record(101, rank=1)))
    chunk = tail.poll()
    assert not chunk.reset and steps_of(chunk.records) == [101]


def test_a_long_stream_is_caught_up_in_bounded_reads(tmp_path, monkeypatch):
    path = tmp_path / "s1_rank0.jsonl"
    data = b"".join(line(step_record(s)) for s in range(1, 501))
    path.write_bytes(data)
    reads = PreadCounter(monkeypatch)
    tail = StreamTail(path, max_read=4096)
    seen, polls = [], 0
    while True:
        chunk = tail.poll()
        polls += 1
        seen += steps_of(chunk.records)
        if not tail.behind:
            break
    assert seen == list(range(1, 501))
    assert polls == -(-len(data) // 4096)
    assert max(got for _, _, got in reads.data_reads()) <= 4096


def test_new_streams_and_new_session_folders_are_found(tmp_path):
    root = tmp_path / "logs"
    one = root / "s1"
    one.mkdir(parents=True)
    (one / SessionFiles("s1").rank_jsonl(0)).write_bytes(line(step_record(1)))
    (one / SessionFiles("s1").main_log).write_text("14:30:22 | INFO  | hello\n")
    (one / "s1_rank1.jsonl.gz").write_bytes(b"")  # a finished, compressed stream: not tailed
    tail = FolderTail(root)
    found = tail.discover()
    assert [(s.folder, s.session_id, s.rank) for s in found] == [("s1", "s1", 0)]
    assert tail.discover() == []  # each stream once
    (one / SessionFiles("s1").rank_jsonl(1)).write_bytes(line(step_record(1, rank=1)))
    two = root / "v1" / "multi_gpu" / "logs" / "s2"
    two.mkdir(parents=True)
    (two / SessionFiles("s2").rank_jsonl(3)).write_bytes(b"")
    found = tail.discover()
    assert [(s.folder, s.session_id, s.rank) for s in found] == [("s1", "s1", 1), ("v1/multi_gpu/logs/s2", "s2", 3)]
    for stream in found:
        tail.follow(stream)
    chunks = tail.poll()
    assert [(c.stream.rank, steps_of(c.records)) for c in chunks] == [(1, [1])]  # the empty stream has nothing yet


def test_the_last_record_is_read_from_the_end(tmp_path):
    path = tmp_path / "s1_rank0.jsonl"
    end = SESSION_END.build(type=SESSION_END.type, rank=0, world_size=1, status="completed")
    body = b"".join(line(step_record(s)) for s in range(1, 3000))
    path.write_bytes(body + line(end))
    assert last_record(path) == end
    path.write_bytes(body + line(end) + b'{"type": "trai')  # a torn last line: the whole one before it
    assert last_record(path) == end
    path.write_bytes(b"")
    assert last_record(path) is None
