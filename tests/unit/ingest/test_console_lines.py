"""A console capture is opened once when it is small (``readers.base.Lines``): its three passes (a
sample for the prefixes, the year, the whole) go over the lines read once, with what the streamed
passes give (tables, meta, diagnostics: compared over the real captures of ``sample_logs/``, and over
a capture with a byte-order mark, CRLF, ANSI colours and bytes that are not UTF-8)."""

from __future__ import annotations

import pytest

from logkit.ingest import safe_io
from logkit.ingest.readers import base, console
from tests.support.launch import REPO

CAPTURES = sorted((REPO / "sample_logs").rglob("*.log"))


def _opens(monkeypatch) -> list:
    opened = []
    real = safe_io.open_file

    def counted(path, *args, **kwargs):
        opened.append(path)
        return real(path, *args, **kwargs)

    monkeypatch.setattr(base, "open_file", counted)
    return opened


def _streamed(monkeypatch, path):
    with monkeypatch.context() as m:
        m.setattr(base, "SMALL_FILE_BYTES", -1)
        return console.read_console(path)


def _same(a, b) -> None:
    assert a.tables.keys() == b.tables.keys()
    for name in a.tables:
        # pandas' equals: a NaN a log states (a loss gone NaN) is the same in both, where Arrow's equals says no
        assert a.tables[name].schema == b.tables[name].schema, name
        assert a.tables[name].to_pandas().equals(b.tables[name].to_pandas()), name
    assert a.meta.to_dict() == b.meta.to_dict()
    assert a.diagnostics == b.diagnostics
    assert (a.lines, a.used) == (b.lines, b.used)


@pytest.mark.parametrize("path", CAPTURES, ids=[p.name for p in CAPTURES])
def test_a_small_capture_is_opened_once_and_read_as_streamed(path, monkeypatch):
    opened = _opens(monkeypatch)
    once = console.read_console(path)
    assert len(opened) == (1 if path.stat().st_size <= base.SMALL_FILE_BYTES else 3)
    _same(once, _streamed(monkeypatch, path))


def test_odd_bytes_are_noted_once_as_in_the_streamed_read(tmp_path, monkeypatch):
    path = tmp_path / "job.log"
    path.write_bytes(b"\xef\xbb\xbf[rank0]: NCCL INFO Bootstrap : Using eth0\r\n"
                     b"\x1b[31m[rank1]: NCCL WARN bad \xff byte\x1b[0m\r\n\n"
                     b"2024-05-01 10:00:00 INFO step 3 loss 0.5\n")
    read = console.read_console(path)
    # line 2 holds the byte that is not UTF-8 (written above): one note, as the streamed read gives
    assert [(d["line"], d["reason"]) for d in read.diagnostics if "UTF-8" in d["reason"]] == \
        [(2, "invalid UTF-8 bytes replaced with U+FFFD")]
    _same(read, _streamed(monkeypatch, path))
