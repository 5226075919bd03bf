"""Sessions that did not end, as ``analyze_logs`` reports them: a run killed before the writer's
first flush (real emitter processes, SIGKILLed right after ``start``) is found by its file names,
with its ranks, and said to have stopped before its first record; our text logs holding only
their first line likewise; a run whose stream is being written is in progress, one silent for an
hour was cut off. Times are set by the test (os.utime); every expected value is read off the files
the test made."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from datetime import datetime, timezone

import orjson

from logkit.schema import SessionFiles
from tests.support.launch import REPO, analyze_logs, fixture_session, free_port

KILLED_EARLY = textwrap.dedent("""
    import os, signal, sys
    sys.path.insert(0, {repo!r})
    import torch.distributed as dist
    from trainer_hooks import writer

    dist.init_process_group("gloo")  # the ranks of one run (a process outside a group is a run of its own)
    from trainer_hooks.session_logger import SessionLogger

    # the writer's first flush never comes before the kill (it flushes every 0.5 s otherwise)
    init = writer.RecordWriter.__init__
    writer.RecordWriter.__init__ = lambda self, *a, **k: init(self, *a, **{{**k, "flush_interval_s": 3600}})
    log = SessionLogger({log_dir!r}, gpu_snapshot_interval=0)
    log.start(per_device_batch_size=2, max_steps=100)
    log.step_begin()
    log.step_end(1, loss=1.0)
    print(log.session_id, flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")
NO_RECORD = "stopped before its first record"


def _kill_early(log_dir, sid: str, world_size: int) -> list[subprocess.CompletedProcess]:
    """Each rank a process of its own in one gloo process group (RANK / WORLD_SIZE, the id from
    LOGKIT_SESSION_ID), killed right after it started its session."""
    code = KILLED_EARLY.format(repo=str(REPO), log_dir=str(log_dir))
    port = str(free_port())
    procs = [subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env={**os.environ, "RANK": str(r), "WORLD_SIZE": str(world_size),
                                   "LOCAL_RANK": str(r), "LOGKIT_SESSION_ID": sid, "MASTER_ADDR": "127.0.0.1",
                                   "MASTER_PORT": port, "OMP_NUM_THREADS": "1"})
             for r in range(world_size)]
    out = []
    for p in procs:
        stdout, stderr = p.communicate(timeout=60)
        out.append(subprocess.CompletedProcess(p.args, p.returncode, stdout, stderr))
    return out


def _age(folder, seconds: float) -> float:
    at = float(int(time.time() - seconds))
    for path in [*folder.iterdir(), folder]:
        os.utime(path, (at, at))
    return at


def _json(*args) -> dict:
    r = analyze_logs(*map(str, args))
    assert r.returncode == 0, r.stderr
    return json.loads(r.stdout)


def test_a_run_killed_before_its_first_flush_is_found_with_its_ranks(tmp_path):
    logs = tmp_path / "logs"
    procs = _kill_early(logs, "killed_early", 2)
    assert [p.returncode for p in procs] == [-signal.SIGKILL] * 2, [p.stderr for p in procs]
    assert [p.stdout.split() for p in procs] == [["killed_early"]] * 2
    folder = logs / "killed_early"
    files = SessionFiles("killed_early")
    # what the emitter left: the two ranks' streams, empty
    assert sorted(p.name for p in folder.iterdir()) == [files.rank_jsonl(0), files.rank_jsonl(1)]
    assert [p.stat().st_size for p in sorted(folder.iterdir())] == [0, 0]

    _age(folder, 3600)
    r = analyze_logs(str(logs))
    assert r.returncode == 0, r.stderr  # not "no logkit sessions found" (exit 2)
    assert "  Session: killed_early" in r.stdout
    assert f"  Status: {NO_RECORD}: its files hold no record" in r.stdout
    (s,) = _json(logs, "--json")["sessions"]
    assert (s["session_id"], s["status"], s["world_size"]) == ("killed_early", NO_RECORD, 2)
    (f,) = [f for f in _json(logs, "--diagnose", "--json")["findings"] if f["session_id"] == "killed_early"]
    assert (f["severity"], f["kind"], f["title"]) == ("warning", "no_records", "Run stopped before writing its first "
                                                                                "record")
    assert f["ranks"] == [0, 1] and f["evidence"] == [files.rank_jsonl(0), files.rank_jsonl(1)]
    assert "the streams of rank(s) 0, 1 but not one record" in f["detail"]


def test_a_run_killed_a_moment_ago_may_still_be_starting(tmp_path):
    logs = tmp_path / "logs"
    procs = _kill_early(logs, "just_now", 1)
    assert procs[0].returncode == -signal.SIGKILL, procs[0].stderr
    (s,) = _json(logs, "--json")["sessions"]
    assert s["status"] == "in progress"
    assert s["status_detail"].startswith("still running (last written ")
    assert s["status_detail"].endswith(" s ago; no record written yet)")


def test_text_logs_with_only_their_first_line_are_found(tmp_path):
    real = fixture_session(1)
    sid = real.name
    folder = tmp_path / "logs" / sid
    folder.mkdir(parents=True)
    files = SessionFiles(sid)
    first = (real / files.main_log).read_bytes().splitlines(keepends=True)[0]
    assert b"TRAINING SESSION STARTED" in first
    (folder / files.main_log).write_bytes(first)
    (folder / files.multigpu_log).write_bytes(b"")
    (folder / files.performance_log).write_bytes(b"")
    _age(folder, 3600)
    r = analyze_logs(str(folder.parent))
    assert r.returncode == 0, r.stderr
    assert f"  Session: {sid}" in r.stdout
    (s,) = _json(folder.parent, "--json")["sessions"]
    assert (s["session_id"], s["status"]) == (sid, NO_RECORD)
    (f,) = [f for f in _json(folder.parent, "--diagnose", "--json")["findings"] if f["kind"] == "no_records"]
    assert "holds its files but not one record" in f["detail"]
    assert set(f["evidence"]) == {files.main_log, files.multigpu_log, files.performance_log}


def _unended_copy(tmp_path, last_record_at: float):
    """The real 1-rank run's stream without its session_end line, its records' times moved so that
    the last was written at ``last_record_at``."""
    real = fixture_session(1)
    records = [orjson.loads(x) for x in (real / SessionFiles(real.name).rank_jsonl(0)).read_bytes().splitlines()]
    assert records[-1]["type"] == "session_end"
    records = records[:-1]
    t0 = last_record_at - max(r["elapsed_s"] for r in records)
    for r in records:
        r["timestamp"] = datetime.fromtimestamp(t0 + r["elapsed_s"], tz=timezone.utc).isoformat()
    folder = tmp_path / "logs" / real.name
    folder.mkdir(parents=True)
    (folder / SessionFiles(real.name).rank_jsonl(0)).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    return folder


def test_a_run_being_written_is_in_progress_not_cut_off(tmp_path):
    folder = _unended_copy(tmp_path, time.time() - 3)
    _age(folder, 3)
    (s,) = _json(folder.parent, "--json")["sessions"]
    assert s["status"] == "in progress" and s["status_detail"].startswith("still running (last written ")
    found = {f["kind"]: f for f in _json(folder.parent, "--diagnose", "--json")["findings"]}
    assert found["status"]["severity"] == "info"
    assert found["status"]["title"].startswith("Run in progress: still running (last written ")
    assert "Run cut off" not in json.dumps(found)


def test_a_run_silent_for_an_hour_was_cut_off(tmp_path):
    folder = _unended_copy(tmp_path, time.time() - 3600)
    at = _age(folder, 3600)
    (s,) = _json(folder.parent, "--json")["sessions"]
    assert s["status"] == "incomplete" and s.get("status_detail") is None
    found = {f["kind"]: f for f in _json(folder.parent, "--diagnose", "--json")["findings"]}
    assert (found["status"]["severity"], found["status"]["title"]) == ("warning", "Run cut off (no session_end record)")
    idle = int(found["status"]["detail"].split("were last written ")[1].split(" s ago")[0])
    assert 3600 <= idle <= time.time() - at + 1
