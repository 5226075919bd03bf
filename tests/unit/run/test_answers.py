"""The answers' cache (``run.answers``): a second ``analyze_logs`` of the same command on unchanged files
prints what the first printed, with its exit status, from a process that imports no pandas; a changed file,
a new session, other options, a session not ended, or --no-cache give a fresh analysis."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.launch import REPO
from tests.support.synth import rank_file, write_session

# Runs the CLI as the console script does, then says whether pandas got imported.
_CLI = """
import sys
from logkit.cli import main
try:
    main(sys.argv[1:])
except SystemExit as exc:
    code = exc.code
else:
    code = 0
print("pandas" in sys.modules, file=sys.stderr)
sys.exit(code)
"""


@pytest.fixture
def logs(tmp_path):
    root = tmp_path / "logs"
    write_session(root, "cpu_single", world_size=1, step_times=[0.5] * 6, start="2026-11-22T01:00:00+00:00")
    write_session(root, "cpu_multi", world_size=2, step_times=[0.3] * 6, start="2026-11-22T02:00:00+00:00")
    return root


def cli(*args, cache: Path) -> tuple[int, str, str, bool]:
    """(exit status, stdout, stderr less the last line, whether pandas was imported) of a fresh process."""
    env = {**os.environ, "LOGKIT_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", _CLI, *map(str, args)], capture_output=True, text=True, cwd=REPO,
                         env=env, timeout=120)
    *err, pandas = out.stderr.splitlines()
    return out.returncode, out.stdout, "\n".join(err), pandas == "True"


def test_a_second_run_prints_the_same_answer_without_pandas(logs, tmp_path):
    cache = tmp_path / "cache"
    args = (logs, "--performance", "--diagnose", "--fail-under-efficiency", "0.99")
    first = cli(*args, cache=cache)
    assert first[0] == 1 and "scaling efficiency" in first[2] and first[3]  # the gate failed, said so
    second = cli(*args, cache=cache)
    assert second == (*first[:3], False)
    json_first = cli(logs, "--json", cache=cache)  # other options: another answer
    assert json_first[0] == 0 and json_first[1].startswith("{") and json_first[3]
    assert cli(logs, "--json", cache=cache) == (*json_first[:3], False)
    assert cli(logs, "--json", "--no-cache", cache=cache)[:3] == json_first[:3]


def test_a_changed_file_or_a_new_session_is_analysed_again(logs, tmp_path):
    cache = tmp_path / "cache"
    first = cli(logs, "--communication", "--json", cache=cache)
    stream = rank_file(logs / "cpu_multi", "cpu_multi", 1)
    data = stream.read_bytes()
    stream.write_bytes(data.replace(b'"duration_ms":2.0', b'"duration_ms":4.0'))  # same size
    st = stream.stat()
    os.utime(stream, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    changed = cli(logs, "--communication", "--json", cache=cache)
    assert changed[3] and changed[1] != first[1]
    assert changed[:3] == cli(logs, "--communication", "--json", "--no-cache", cache=tmp_path / "other")[:3]
    write_session(logs, "cpu_third", world_size=2, step_times=[0.4] * 6, start="2026-11-22T03:00:00+00:00")
    more = cli(logs, "--communication", "--json", cache=cache)
    assert more[3] and "cpu_third" in more[1] and "cpu_third" not in changed[1]
    assert cli(logs, "--communication", "--json", cache=cache) == (*more[:3], False)


def test_no_answer_is_kept_while_a_session_may_still_be_written(tmp_path):
    """A session without an end is judged against the clock ("in progress" while written): every run
    analyses it."""
    logs = tmp_path / "logs"
    write_session(logs, "running", world_size=1, step_times=[0.5] * 6, summary=False, end=False)
    cache = tmp_path / "cache"
    first = cli(logs, "--json", cache=cache)
    assert first[0] == 0 and first[3]
    assert cli(logs, "--json", cache=cache)[3]
    assert not (cache / "answers").exists() or not any((cache / "answers").iterdir())


def test_runs_that_write_files_are_not_kept(logs, tmp_path):
    cache = tmp_path / "cache"
    report = tmp_path / "r.html"
    for _ in range(2):
        code, out, _, pandas = cli(logs, "--report", report, cache=cache)
        assert code == 0 and pandas and "HTML report written" in out
    assert not (cache / "answers").exists()
