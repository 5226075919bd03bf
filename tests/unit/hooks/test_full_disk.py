"""A full disk never leaves an empty or cut summary.json, and never stops training.

A child process logs a short run through a real SessionLogger under a file-size limit
(RLIMIT_FSIZE, with SIGXFSZ ignored: a write past the limit fails with EFBIG, as a write to a
full disk fails with ENOSPC, whoever runs the test). The summary is larger than the limit: it
must be absent, not cut at the limit; the run must finish (exit 0) and say so on stderr.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import orjson

from logkit.schema import SessionFiles
from tests.support.launch import REPO

LIMIT = 400  # bytes: less than the run's summary.json (about 500 bytes)

CHILD = textwrap.dedent("""
    import resource, signal, sys
    sys.path.insert(0, {repo!r})
    from trainer_hooks.session_logger import SessionLogger

    log = SessionLogger({log_dir!r}, gpu_snapshot_interval=0)
    log.start(per_device_batch_size=4)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, ({limit}, {limit}))
    for step in range(1, 31):
        log.step_begin()
        log.step_end(step, loss=1.0 / step)
    log.end()
    print(log.session_id, flush=True)
""")


def test_a_full_disk_leaves_no_cut_summary_and_training_finishes(tmp_path):
    logs = tmp_path / "logs"
    code = CHILD.format(repo=str(REPO), log_dir=str(logs), limit=LIMIT)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    sid = proc.stdout.decode().strip()
    files = SessionFiles(sid)
    folder = logs / sid
    summary = folder / files.summary_json
    assert not summary.exists(), f"a {summary.stat().st_size}-byte summary.json was left"
    assert not (folder / files.summary_txt).exists()
    assert not [p.name for p in folder.iterdir() if p.name.endswith(".part")]
    assert b"cannot write the summary" in proc.stderr
    assert (folder / files.rank_jsonl(0)).stat().st_size <= LIMIT  # the limit held for the stream too


def test_without_a_limit_the_same_run_writes_its_summary(tmp_path):
    """The control: the limit, not the run, is what leaves the summary out."""
    logs = tmp_path / "logs"
    code = CHILD.format(repo=str(REPO), log_dir=str(logs), limit=-1)  # RLIM_INFINITY
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert proc.returncode == 0, proc.stderr.decode()
    sid = proc.stdout.decode().strip()
    doc = orjson.loads((logs / sid / SessionFiles(sid).summary_json).read_bytes())
    assert doc["total_steps"] == 30 and len(orjson.dumps(doc, option=orjson.OPT_INDENT_2)) > LIMIT
