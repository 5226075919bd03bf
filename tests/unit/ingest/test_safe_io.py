"""``ingest.safe_io``: only regular files are opened, never waiting; every read bounded (the size at open,
the inflation of a gzip file, a document read whole); names that are not UTF-8 written with escapes."""

from __future__ import annotations

import gzip
import os
import socket

import pytest

from logkit.ingest import safe_io
from logkit.ingest.safe_io import Limits, Refused, Scope, TooLarge, check, display, open_file, read_whole


def test_what_is_no_regular_file_is_refused_saying_what_it_is(tmp_path):
    os.mkfifo(tmp_path / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tmp_path / "sock"))
    sock.close()
    (tmp_path / "dangling").symlink_to(tmp_path / "gone")
    (tmp_path / "zero").symlink_to("/dev/zero")
    (tmp_path / "dir").mkdir()
    said = {}
    for name in ("fifo", "sock", "dangling", "zero", "dir"):
        with pytest.raises(Refused) as caught:
            open_file(tmp_path / name)  # never blocks: a FIFO is looked at before it is opened
        said[name] = caught.value.why
    assert said == {"fifo": "a FIFO (named pipe): reading it would wait for a writer", "sock": "a socket",
                    "dangling": f"a dangling link (to {tmp_path / 'gone'})", "zero": "a character device",
                    "dir": "a folder"}
    assert isinstance(caught.value, OSError)  # every reader's "unreadable" path notes it


def test_a_link_out_of_the_folder_read_is_refused_unless_links_are_followed(tmp_path):
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    (outside / "secret.log").write_text("x\n")
    (inside / "a.log").write_text("a\n")
    (inside / "link.log").symlink_to(outside / "secret.log")
    (inside / "near.log").symlink_to(inside / "a.log")
    scope = Scope.of(inside)
    assert check(inside / "near.log", scope).st_size == 2
    with pytest.raises(Refused, match="a link out of the folder read"):
        check(inside / "link.log", scope)
    assert check(inside / "link.log", Scope.of(inside, follow_links=True)).st_size == 2


def test_a_file_still_written_is_read_up_to_its_size_when_opened(tmp_path):
    path = tmp_path / "grow.log"
    path.write_bytes(b"a\n" * 10)
    with open_file(path) as fh, open(path, "ab") as writer:
        writer.write(b"b\n" * 1000)
        writer.flush()
        assert fh.read() == b"a\n" * 10


def test_a_gzip_bomb_stops_at_the_inflation_cap(tmp_path, monkeypatch):
    monkeypatch.setattr(safe_io, "LIMITS", Limits(inflate_floor=1 << 20, inflate_ratio=10))
    path = tmp_path / "bomb.log.gz"
    path.write_bytes(gzip.compress(b"\n" * (8 << 20), 9))
    got = 0
    with pytest.raises(TooLarge, match="inflates past"), open_file(path) as fh:
        while chunk := fh.read(1 << 16):
            got += len(chunk)
    assert got == 1 << 20  # the floor: 10x the few KB it is on disk is less


def test_a_document_read_whole_is_refused_past_the_limit(tmp_path):
    path = tmp_path / "big.json"
    path.write_bytes(b" " * 1000)
    assert read_whole(path, limit=1000) == b" " * 1000
    with pytest.raises(TooLarge, match="larger than 999 bytes"):
        read_whole(path, limit=999)


def test_names_that_are_not_utf8_are_written_with_escapes():
    name = os.fsdecode(b"run_\xff\xfe.log")
    assert display(name) == "run_\\xff\\xfe.log"
    assert display("lone \ud800") == "lone \\ud800"
    assert display("plain é") == "plain é"
