"""Processes a launcher started together that never formed a process group are never read as one run:
two processes under torchrun that never call ``init_process_group``, and accelerate's fallback on a
machine without GPUs (``accelerate launch --use_fsdp --num_processes 2``: ``DistributedType.NO``, one
process each, though torch's default group was initialised). Each is a session of its own, rank 0 of a
world of 1, and ``--diagnose`` says what happened with the launcher's facts.

The launcher's facts expected here are what the test launched (2 processes, the launcher's name and the
port it chose); the environment each process saw was read off a real launch (RANK, WORLD_SIZE,
LOCAL_RANK, MASTER_ADDR/PORT set by the launcher, ACCELERATE_* by accelerate launch)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from logkit.schema import SessionFiles
from tests.support.launch import BIN, REPO, analyze_logs, free_port, read_jsonl, session_dirs, torchrun

pytestmark = pytest.mark.slow

PROCS, STEPS = 2, 5
TITLE = "2 processes were launched but formed no process group: each trained alone on all the data"


def _sessions(logs) -> list[dict]:
    """Per session folder: the session_start of its only stream (rank 0, a world of 1)."""
    out = []
    for folder in session_dirs(logs):
        files = SessionFiles(folder.name)
        assert sorted(p.name for p in folder.glob("*.jsonl")) == [files.rank_jsonl(0)], folder
        (start,) = [r for r in read_jsonl(folder / files.rank_jsonl(0)) if r["type"] == "session_start"]
        out.append(start)
    return out


def _check(logs, tmp_path, launcher: str, group: str, port: int) -> None:
    starts = _sessions(logs)
    assert len(starts) == PROCS
    assert {(s["rank"], s["world_size"], s["process_group"]) for s in starts} == {(0, 1, group)}
    assert sorted(s["launcher"]["rank"] for s in starts) == [0, 1]
    assert {(s["launcher"]["name"], s["launcher"]["world_size"], s["launcher"]["master"]) for s in starts} == {
        (launcher, PROCS, f"127.0.0.1:{port}")}
    doc = json.loads(analyze_logs(str(logs), "--json", cwd=tmp_path).stdout)
    assert sorted(s["world_size"] for s in doc["sessions"]) == [1, 1]
    proc = analyze_logs(str(logs), "--diagnose", "--json", cwd=tmp_path)
    (f,) = [f for f in json.loads(proc.stdout)["findings"] if f["kind"] == "no_process_group"]
    assert f["title"] == TITLE and f["severity"] == "error" and f["ranks"] == [0, 1]
    assert f"{launcher} started 2 processes (WORLD_SIZE=2, rendezvous 127.0.0.1:{port}" in f["detail"]
    assert sorted(f["sessions"]) == sorted(p.name for p in session_dirs(logs))
    text = analyze_logs(str(logs), "--diagnose", cwd=tmp_path).stdout
    assert TITLE in text


def test_torchrun_processes_without_init_process_group_are_sessions_of_their_own(tmp_path):
    port = free_port()
    cmd = [str(BIN / "torchrun"), "--nproc_per_node", str(PROCS), "--master_addr", "127.0.0.1", "--master_port",
           str(port), str(REPO / "tests/support/fsdp_train.py"), "--log-dir", str(tmp_path / "logs"), "--mode",
           "alone", "--steps", str(STEPS)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO),
           "LOGKIT_SESSION_ID": "same_id"}  # the same id asked for by both: each still gets a folder of its own
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert sorted(p.name for p in session_dirs(tmp_path / "logs")) == ["same_id", "same_id_2"]
    _check(tmp_path / "logs", tmp_path, "torchrun", "none", port)


def test_accelerate_fsdp_fallback_without_gpus_is_sessions_of_their_own(tmp_path):
    port = free_port()
    # this accelerate's FSDP plugin asks for a device when it syncs module states or loads
    # efficiently: both off, it falls back to DistributedType.NO on CPUs
    cmd = [str(BIN / "accelerate"), "launch", "--use_fsdp", "--fsdp_sync_module_states", "false",
           "--fsdp_cpu_ram_efficient_loading", "false", "--num_processes", str(PROCS), "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
           str(REPO / "tests/support/fsdp_train.py"), "--log-dir", str(tmp_path / "logs"), "--mode", "accelerate",
           "--steps", str(STEPS)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}
    proc = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-4000:]
    _check(tmp_path / "logs", tmp_path, "accelerate launch", "unused", port)


def test_torchrun_ranks_in_a_group_are_still_one_session(tmp_path):
    torchrun("tests/support/fsdp_train.py", ["--log-dir", str(tmp_path / "logs"), "--steps", "3"], PROCS,
             cwd=tmp_path)
    (folder,) = session_dirs(tmp_path / "logs")
    files = SessionFiles(folder.name)
    for rank in range(PROCS):
        (start,) = [r for r in read_jsonl(folder / files.rank_jsonl(rank)) if r["type"] == "session_start"]
        assert (start["rank"], start["world_size"], start["process_group"]) == (rank, PROCS, "formed")
