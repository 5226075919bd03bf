"""Running things as a user does: accelerate launch on CPU ranks, and the CLI."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import orjson

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
QLORA_FIXTURE = REPO / "sample_logs" / "qlora_tiny_cpu"


def fixture_session(world_size: int) -> Path:
    """The session folder of the real tiny QLoRA run on ``world_size`` CPU ranks (1 or 2) in
    sample_logs/qlora_tiny_cpu (its name is the time ``make fixtures`` ran: look it up)."""
    folders = sorted(p for p in (QLORA_FIXTURE / "logs").iterdir() if p.is_dir())
    for folder in folders:
        (stream,) = folder.glob("*_rank0.jsonl")
        first = orjson.loads(stream.read_bytes().split(b"\n", 1)[0])
        if first["world_size"] == world_size:
            return folder
    raise LookupError(f"no {world_size}-rank session in {QLORA_FIXTURE}")


def ctrl_c_default() -> None:
    """preexec_fn for a child that a test stops with SIGINT: a shell runs background jobs with SIGINT
    ignored, the child would inherit that and never see Ctrl-C (`make test &` would then time out)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def kill_tree(pid: int, grace_s: float = 0.0) -> None:
    """SIGKILL a process and every process under it (the ranks of ``accelerate launch`` run in sessions of
    their own: killing the launcher's process group leaves them running); ``grace_s``: SIGTERM first and
    wait that long (each rank's logger ends its session), then SIGKILL what is left."""
    import psutil

    try:
        root = psutil.Process(pid)
        procs = [*root.children(recursive=True), root]
    except psutil.NoSuchProcess:
        return
    for signal_it in (["terminate"] if grace_s > 0 else []) + ["kill"]:
        for proc in procs:
            try:
                getattr(proc, signal_it)()
            except psutil.NoSuchProcess:
                pass
        procs = psutil.wait_procs(procs, timeout=grace_s if signal_it == "terminate" else 10)[1]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def accelerate_launch(script: str, args: list[str], nprocs: int, cwd: Path, timeout: int = 300,
                      env: dict | None = None) -> subprocess.CompletedProcess:
    """``accelerate launch`` of ``script`` on ``nprocs`` CPU ranks (gloo when more than one)."""
    cmd = [str(BIN / "accelerate"), "launch", "--num_processes", str(nprocs), "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port())]
    if nprocs > 1:
        cmd.insert(2, "--multi_gpu")
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", **(env or {})}
    proc = subprocess.run(cmd + [str(REPO / script), *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"launch failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc


def analyze_logs(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    """The console script, as a user types it."""
    return subprocess.run([str(BIN / "analyze_logs"), *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def read_jsonl(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def session_dirs(log_dir: Path) -> list[Path]:
    return sorted(p for p in Path(log_dir).iterdir() if p.is_dir())


def torchrun(script: str, args: list[str], nprocs: int, cwd: Path, timeout: int = 120,
             env: dict | None = None) -> subprocess.CompletedProcess:
    """``torchrun --nproc_per_node nprocs script`` on CPU (the script picks its backend, or none)."""
    cmd = [str(BIN / "torchrun"), "--nproc_per_node", str(nprocs), "--master_port", str(free_port())]
    full_env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO),
                **(env or {})}
    proc = subprocess.run(cmd + [str(REPO / script), *args], cwd=cwd, env=full_env, capture_output=True,
                          text=True, timeout=timeout)
    if proc.returncode != 0:
        raise AssertionError(f"torchrun failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-6000:]}")
    return proc
