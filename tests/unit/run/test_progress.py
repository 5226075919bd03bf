"""The progress bars on stderr: a count of the files looked at while the sessions are found, then the
bytes read, advanced file by file as each stream or capture is read (a session of hundreds of tiny
streams moves the bar as it goes), ending at the folder's size; none off a terminal unless asked."""

from __future__ import annotations

import pytest

from logkit.run import load
from logkit.run.load import load_for_analysis, load_sessions
from tests.fuzz.hostile import _many_ranks


@pytest.fixture
def folder(tmp_path):
    _many_ranks(2 * 12, 2)(tmp_path)  # 2 sessions of 12 ranks: read whole, stream by stream
    return tmp_path


def _spy(monkeypatch) -> dict:
    seen = {"files": [], "end": None}
    file, close = load._Bar.file, load._Bar.close

    def on_file(self, path):
        seen["files"].append(path.name)
        file(self, path)

    def on_close(self):
        seen["end"] = (self.bar.n, self.bar.total)
        close(self)

    monkeypatch.setattr(load._Bar, "file", on_file)
    monkeypatch.setattr(load._Bar, "close", on_close)
    return seen


@pytest.mark.parametrize("read", [load_sessions, load_for_analysis])
def test_the_bar_moves_file_by_file_and_ends_at_the_folder_size(folder, read, monkeypatch, capsys):
    seen = _spy(monkeypatch)
    read(folder, progress=True)
    err = capsys.readouterr().err
    assert "finding logs" in err and "reading logs (24 files, 2 sessions)" in err
    size = sum(p.stat().st_size for p in folder.rglob("*.jsonl"))
    assert seen["end"] == (size, size)
    names = [f"training_20270101_{s:06d}_rank{r}.jsonl" for s in range(2) for r in range(12)]
    assert seen["files"] == names  # each stream as it is read, in order


def test_no_bar_off_a_terminal_unless_asked(folder, capsys):
    load_for_analysis(folder)
    assert capsys.readouterr().err == ""
