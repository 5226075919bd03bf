"""What the emitter writes, the reader reads: a session written under any id, on any host, under any
folder is found and read back whole (its id, every step, its host, its end and its summary), whatever
the text (path parts, dots, control characters, lone surrogates, any length)."""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from unittest import mock

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from logkit.run.load import load_sessions
from trainer_hooks.session_logger import SessionLogger

STEPS = 3
# a folder name: any text a file system takes (no NUL, no "/", at most 200 bytes), not hidden: a folder whose
# name begins with a dot is skipped when a folder above it is read, as .git and .cache are (discover); read
# itself, it is read (test_a_hidden_log_folder_is_read_when_named below)
_FOLDER = st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\x00/"), min_size=1,
                  max_size=40).filter(lambda t: not t.startswith(".") and len(t.encode()) <= 200)
_IDS = st.one_of(st.text(max_size=300), st.sampled_from(["../../x", "..", ".hidden", "a/b/../c", "x_rank0",
                                                         "x_summary", "run.jsonl", " ", "\\", "~", "-"]))


def _written(host: str) -> str:
    """The host as a JSON record can hold it: text that is not UTF-8 keeps its escapes."""
    try:
        host.encode("utf-8")
        return host
    except UnicodeEncodeError:
        return host.encode("utf-8", "backslashreplace").decode("utf-8")


def _emit(log_dir: Path, session_id: str, host: str) -> SessionLogger:
    with mock.patch("socket.gethostname", return_value=host):
        log = SessionLogger(log_dir=log_dir, verbosity="high", session_id=session_id, gpu_snapshot_interval=0)
        log.start(total_batch_size=4, max_steps=STEPS)
        for step in range(1, STEPS + 1):
            log.step_begin()
            log.step_end(step, loss=1.0 / step)
        log.end()
    return log


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(session_id=_IDS, host=st.text(max_size=300), folder=_FOLDER)
def test_every_session_the_emitter_writes_is_read_back_whole(session_id, host, folder):
    root = Path(tempfile.mkdtemp(prefix="logkit-roundtrip-"))
    try:
        log = _emit(root / folder, session_id, host)
        assert log.folder.parent == root / folder  # never outside its log folder
        (session,) = load_sessions(root)
        assert session.session_id == log.session_id
        assert session.steps["step"].tolist() == list(range(1, STEPS + 1))
        assert session.meta.hostname == _written(host)
        assert session.meta.status == "completed" and isinstance(session.meta.summary, dict)
        assert session.meta.world_size == 1
        assert session.diagnostics.empty, session.diagnostics.to_dict("records")
    finally:
        shutil.rmtree(root, ignore_errors=True)


def test_a_hidden_log_folder_is_read_when_named(tmp_path):
    log = _emit(tmp_path / ".0", "run", "h")
    assert load_sessions(tmp_path) == []  # hidden: skipped when the folder above is read
    (session,) = load_sessions(tmp_path / ".0")
    assert session.session_id == log.session_id and session.steps["step"].tolist() == list(range(1, STEPS + 1))
