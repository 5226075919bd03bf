"""How a session ends when the process does not end it itself: SIGTERM with sync timings stuck
on a hung device, a signal arriving while the session is being ended, and an exit that never
closed the logger. Each in a child process, with real signals."""

from __future__ import annotations

import signal
import subprocess
import sys
import textwrap

import orjson
import pytest

from logkit.schema import SessionFiles
from tests.support.launch import REPO, ctrl_c_default, read_jsonl

PRELUDE = textwrap.dedent("""
    import os, signal, sys, time
    sys.path.insert(0, {repo!r})
    from trainer_hooks import session_logger as session_mod
    from trainer_hooks import timing_plan
    from trainer_hooks.distributed import RankInfo
    from trainer_hooks.session_logger import SessionLogger
    from trainer_hooks.lifecycle import end_on_exit

    class HungEvent:
        # a CUDA event behind a collective that never completes
        def query(self): return False
        def synchronize(self): time.sleep(3600)
        def elapsed_time(self, end): raise AssertionError("never read")

    class DoneEvent:
        def __init__(self, ms): self.ms = ms
        def query(self): return True
        def synchronize(self): pass
        def elapsed_time(self, end): return end.ms - self.ms

    session_mod.rank_info = lambda: RankInfo(0, 2, 0, "nccl", "cpu", "testhost")
    timing_plan.find_ddp = lambda m: m
    timing_plan.install_comm_hook = lambda ddp, timer: None
    log = SessionLogger({log_dir!r}, gpu_snapshot_interval=0)
    log.start(per_device_batch_size=2, max_steps=100)
    end_on_exit(log)
    log.attach_model(object())
    print(log.session_id, flush=True)
""")


def _child(tmp_path, body: str, timeout: float = 30) -> tuple[subprocess.CompletedProcess, list[dict], str]:
    code = PRELUDE.format(repo=str(REPO), log_dir=str(tmp_path)) + textwrap.dedent(body)
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=timeout)
    sid = proc.stdout.split()[0]
    return proc, read_jsonl(tmp_path / sid / SessionFiles(sid).rank_jsonl(0)), sid


def test_sigterm_with_a_hung_device_still_writes_session_end(tmp_path):
    proc, records, sid = _child(tmp_path, """
        for step in (1, 2, 3):
            log.step_begin()
            log.comm.pending.append((0, 1000, DoneEvent(0.0), DoneEvent(2.0), 0))
            if step == 3:  # step 3's second bucket never finishes
                log.comm.pending.append((1, 1000, DoneEvent(0.0), HungEvent(), 1))
            log.step_end(step, loss=1.0)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(60)  # not reached: the handler ends the session, then the signal kills
    """)
    assert proc.returncode == -signal.SIGTERM, proc.stderr
    end = records[-1]
    assert end["type"] == "session_end" and end["status"] == "interrupted"
    assert end["reason"] == "received SIGTERM" and end["comm_timings_dropped"] == 1
    comm = [(r["step"], r["bucket"]) for r in records if r["type"] == "communication"]
    assert comm == [(1, 0), (2, 0), (3, 0)]  # what the device had finished is kept
    (note,) = [r for r in records if r.get("kind") == "comm_timings_dropped"]
    assert note["value"] == 1 and "dropped unread" in note["message"]
    summary = orjson.loads((tmp_path / sid / SessionFiles(sid).summary_json).read_bytes())
    assert summary["status"] == "interrupted"


def test_a_signal_during_the_end_waits_for_the_end_to_be_written(tmp_path):
    proc, records, sid = _child(tmp_path, """
        log.step_begin()
        log.step_end(1, loss=1.0)
        real_end = log._end
        def slow_end(*args):  # the signal lands in the middle of writing the last records
            os.kill(os.getpid(), signal.SIGTERM)
            real_end(*args)
        log._end = slow_end
        log.end()
        print("not reached: the deferred SIGTERM kills the process once the end is written")
    """)
    assert proc.returncode == -signal.SIGTERM and "not reached" not in proc.stdout
    assert records[-1]["type"] == "session_end" and records[-1]["status"] == "completed"
    assert (tmp_path / sid / SessionFiles(sid).summary_json).exists()


@pytest.mark.parametrize("exit_code", [0, 1])
def test_an_exit_without_closing_is_a_failed_session(tmp_path, exit_code):
    proc, records, _ = _child(tmp_path, f"""
        log.step_begin()
        log.step_end(1, loss=1.0)
        sys.exit({exit_code})  # e.g. after catching the training's exception
    """)
    assert proc.returncode == exit_code
    end = records[-1]
    assert end["type"] == "session_end" and end["status"] == "failed" and end["total_steps"] == 1
    assert end["reason"] == "the process exited before training ended"
    (error,) = [r for r in records if r["type"] == "error"]
    assert error["kind"] == "exit_before_end" and error["message"] == f"Session not ended: {end['reason']}"


def test_sigint_from_outside_ends_the_session_as_interrupted(tmp_path):
    # Ctrl-C in a terminal: SIGINT from another process while the run is stepping
    code = PRELUDE.format(repo=str(REPO), log_dir=str(tmp_path)) + textwrap.dedent("""
        step = 0
        while True:
            step += 1
            log.step_begin()
            time.sleep(0.01)
            log.step_end(step, loss=1.0)
            if step == 5:
                print("stepping", flush=True)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=ctrl_c_default)
    try:
        sid = proc.stdout.readline().strip()
        assert proc.stdout.readline().strip() == "stepping", proc.stderr.read()
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        proc.kill()
    # the handler ends the session, then Python's own SIGINT handler raises KeyboardInterrupt
    assert proc.returncode == -signal.SIGINT, stderr  # as Python dies of an uncaught KeyboardInterrupt
    assert "KeyboardInterrupt" in stderr
    records = read_jsonl(tmp_path / sid / SessionFiles(sid).rank_jsonl(0))
    end = records[-1]
    assert end["type"] == "session_end" and end["status"] == "interrupted"
    assert end["reason"] == "received SIGINT" and end["total_steps"] >= 5
    assert [r["signal"] for r in records if r["type"] == "error"] == ["SIGINT"]
    assert [r for r in records if r["type"] == "session_end"] == [end]  # ended once, not again by the exception
    summary = orjson.loads((tmp_path / sid / SessionFiles(sid).summary_json).read_bytes())
    assert summary["status"] == "interrupted"
