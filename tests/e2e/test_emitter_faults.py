"""Fault injection on real 2-rank accelerate launches: NaN at a known step, an exception,
SIGTERM to the launcher, kill -9 of a rank, an unwritable log folder."""

from __future__ import annotations

import os
import signal
import subprocess
import time

import orjson
import pytest

import logkit
from logkit.schema import SessionFiles
from tests.support.launch import BIN, REPO, accelerate_launch, free_port, read_jsonl, session_dirs

pytestmark = pytest.mark.slow

LOOP = "examples/train_accelerate_loop.py"


def _streams(log_dir):
    (session,) = session_dirs(log_dir)
    files = SessionFiles(session.name)
    return session, {rank: read_jsonl(session / files.rank_jsonl(rank)) for rank in (0, 1)}


def test_nan_at_a_known_step_is_reported_and_dumped(tmp_path):
    from safetensors import safe_open

    accelerate_launch(LOOP, ["--log-dir", str(tmp_path / "logs"), "--steps", "8", "--inject-nan-at", "4"], 2,
                      cwd=tmp_path)
    session, streams = _streams(tmp_path / "logs")
    for records in streams.values():
        nan = [r for r in records if r["type"] == "nan_detected"]
        # nothing before the injected step; the loss is where the NaN came from
        assert nan[0]["step"] == 4 and nan[0]["kind"] == "nan_loss"
        (loss,) = [t for t in nan[0]["tensors"] if t["kind"] == "loss"]
        assert (loss["name"], loss["shape"], loss["nan_count"], loss["numel"]) == ("loss", [], 1, 1)
        assert nan[0]["tensors"][0]["kind"] == "loss"  # listed first
        grads = {t["name"]: t for t in nan[0]["tensors"] if t["kind"] == "gradient"}
        assert set(grads) == {"module.0.weight", "module.0.bias", "module.2.weight", "module.2.bias"}
        assert all(t["nan_count"] == t["numel"] for t in grads.values())
        assert grads["module.0.weight"]["shape"] == [256, 32]
        with safe_open(str(session / nan[0]["dump_path"]), framework="pt") as f:
            dumped = f.get_tensor("module.0.weight.grad")
            dumped_loss = f.get_tensor("loss")
        assert tuple(dumped.shape) == (256, 32) and bool(dumped.isnan().all())
        assert tuple(dumped_loss.shape) == () and bool(dumped_loss.isnan())
        anomalies = [r["step"] for r in records if r["type"] == "anomaly" and r["kind"] == "nan_loss"]
        assert anomalies[0] == 4
        # training was not stopped: every step is there and the run completed
        assert [r["step"] for r in records if r["type"] == "training_step_complete"] == list(range(1, 9))
        assert records[-1]["status"] == "completed"
    main_log = (session / SessionFiles(session.name).main_log).read_text()
    assert "NaN/Inf DETECTED [rank 0] at step 4" in main_log


def test_an_exception_ends_every_stream_as_failed(tmp_path):
    with pytest.raises(AssertionError, match="launch failed"):
        accelerate_launch(LOOP, ["--log-dir", str(tmp_path / "logs"), "--steps", "8", "--fail-at", "5"], 2,
                          cwd=tmp_path)
    session, streams = _streams(tmp_path / "logs")
    for records in streams.values():
        assert records[-1]["type"] == "session_end" and records[-1]["status"] == "failed"
        (error,) = [r for r in records if r["type"] == "error"]
        assert error["exception_type"] == "RuntimeError" and "injected failure at step 5" in error["traceback"]
        assert max(r["step"] for r in records if r["type"] == "training_step_complete") == 4
    summary = orjson.loads((session / SessionFiles(session.name).summary_json).read_bytes())
    assert summary["status"] == "failed" and summary["total_steps"] == 4


def _launch_background(tmp_path, steps=2000):
    cmd = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
           str(REPO / LOOP), "--log-dir", str(tmp_path / "logs"), "--steps", str(steps), "--sleep", "0.02"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    return subprocess.Popen(cmd, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def _wait_for_steps(tmp_path, n, timeout=120):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if (tmp_path / "logs").exists() and session_dirs(tmp_path / "logs"):
            (session,) = session_dirs(tmp_path / "logs")
            files = SessionFiles(session.name)
            counts = []
            for rank in (0, 1):
                path = session / files.rank_jsonl(rank)
                counts.append(path.read_bytes().count(b'"training_step_complete"') if path.exists() else 0)
            if min(counts) >= n:
                return session
        time.sleep(0.2)
    raise AssertionError("the run did not reach its steps in time")


def test_sigterm_to_the_launcher_ends_every_stream_as_interrupted(tmp_path):
    proc = _launch_background(tmp_path)
    try:
        session = _wait_for_steps(tmp_path, 5)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    finally:
        proc.kill()
    assert proc.returncode != 0
    s = logkit.load_session(session)
    assert s.diagnostics.empty  # every line of every stream parses
    for records in _streams(tmp_path / "logs")[1].values():
        assert records[-1]["type"] == "session_end" and records[-1]["status"] == "interrupted"
        assert records[-1]["total_steps"] >= 5
    assert s.meta["status"] == "interrupted"
    summary = orjson.loads((session / SessionFiles(session.name).summary_json).read_bytes())
    assert summary["status"] == "interrupted"


def test_kill_9_of_a_rank_loses_at_most_its_last_line(tmp_path):
    proc = _launch_background(tmp_path)
    try:
        session = _wait_for_steps(tmp_path, 5)
        files = SessionFiles(session.name)
        start = read_jsonl(session / files.rank_jsonl(1))[0]
        os.kill(start["pid"], signal.SIGKILL)
        proc.wait(timeout=90)
    finally:
        proc.kill()
    s = logkit.load_session(session)
    assert len(s.diagnostics) <= 1  # a torn last line at most
    rank1 = s.steps[s.steps["rank"] == 1]
    assert len(rank1) >= 5 and list(rank1["step"]) == list(range(1, len(rank1) + 1))
    # the surviving rank lost its peer (gloo raises) or was torn down by the launcher, and said so
    rank0 = read_jsonl(session / files.rank_jsonl(0))
    assert rank0[-1]["type"] == "session_end" and rank0[-1]["status"] in ("failed", "interrupted")
    if rank0[-1]["status"] == "failed":
        assert [r for r in rank0 if r["type"] == "error"]


def test_an_unwritable_log_folder_does_not_stop_training(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_text("a file, where the log folder should be")
    proc = accelerate_launch(LOOP, ["--log-dir", str(blocker / "logs"), "--steps", "5",
                                    "--losses-out", str(tmp_path / "seen")], 2, cwd=tmp_path)
    for rank in (0, 1):
        assert len(orjson.loads((tmp_path / f"seen.rank{rank}.json").read_bytes())["losses"]) == 5
    assert "logkit:" in proc.stderr and "training goes on" in proc.stderr


def test_without_pynvml_training_runs_and_says_so_once(tmp_path):
    fake = tmp_path / "no_pynvml"
    fake.mkdir()
    (fake / "pynvml.py").write_text("raise ImportError('pynvml hidden by the test')\n")
    env = {"PYTHONPATH": os.pathsep.join([str(fake), os.environ.get("PYTHONPATH", "")])}
    accelerate_launch(LOOP, ["--log-dir", str(tmp_path / "logs"), "--steps", "6"], 2, cwd=tmp_path, env=env)
    session, streams = _streams(tmp_path / "logs")
    for rank, records in streams.items():
        notes = [r for r in records if r["type"] == "resource_warning" and r["kind"] == "sampling_degraded"]
        if rank == 0:  # local rank 0 samples the node's GPUs; rank 1 the host only: nothing to say
            assert len(notes) == 1 and "pynvml" in notes[0]["message"]
        else:
            assert notes == []
        steps = [r for r in records if r["type"] == "training_step_complete"]
        assert len(steps) == 6 and records[-1]["status"] == "completed"
        assert all(r["resource_usage"]["memory"]["usage_percent"] > 0 for r in steps[1:])  # host still sampled
    assert not (session / SessionFiles(session.name).errors_log).exists()
