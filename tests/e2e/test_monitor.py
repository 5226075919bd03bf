"""monitor_gpu, run as a user types it: records parse, carry the required keys, exit status passes through."""

from __future__ import annotations

import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

from logkit.schema import REQUIRED_KEYS
from tests.support.launch import REPO

REPO = REPO
PY = shlex.quote(sys.executable)


def monitor(*args: str, cwd: Path, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "trainer_hooks.monitor", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=timeout,
                          env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})


def test_monitor_training_writes_snapshots(tmp_path):
    out = tmp_path / "current_training.jsonl"
    proc = monitor("--output", str(out), "--interval", "0.3",
                   "--monitor-training", f'{PY} -c "import time; time.sleep(1.5)"', cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    records = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    # 1.5 s of sleep plus interpreter start, in 0.3 s intervals, plus the last partial one
    assert 4 <= len(records) <= 12, len(records)
    for r in records:
        assert set(REQUIRED_KEYS) <= set(r)
        assert r["type"] == "gpu_snapshot" and r["rank"] == 0 and r["world_size"] == 1
        assert r["session_id"].startswith("monitor_")
        assert r["timestamp"].endswith("+00:00")  # ISO with offset
        assert isinstance(r["devices"], list) and r["samples"] >= 1
        usage = r["resource_usage"]
        cpu = usage["cpu"]["usage_percent"]
        assert (cpu is None or 0 <= cpu <= 100) and usage["memory"]["used_gb"] > 0
    assert any(r["resource_usage"]["cpu"]["usage_percent"] is not None for r in records)
    elapsed = [r["elapsed_s"] for r in records]
    assert elapsed == sorted(elapsed)
    assert len({r["session_id"] for r in records}) == 1
    # the child's process tree was sampled: its interpreter is resident at some point
    assert max(r["resource_usage"]["memory"]["process_rss_gb_max"] or 0 for r in records) > 0.001
    if not any(r["devices"] for r in records):  # this machine: no GPU, said once on stderr
        assert proc.stderr.count("GPU metrics off") == 1


def test_child_exit_status_propagates(tmp_path):
    out = tmp_path / "m.jsonl"
    proc = monitor("--output", str(out), "--interval", "0.3",
                   "--monitor-training", f'{PY} -c "import sys; sys.exit(3)"', cwd=tmp_path)
    assert proc.returncode == 3, proc.stderr
    assert out.exists() and out.read_bytes().strip()  # the final partial interval is kept


def test_sigterm_is_forwarded_to_the_child(tmp_path):
    out = tmp_path / "m.jsonl"
    child = ("import signal, sys, time; signal.signal(signal.SIGTERM, lambda *a: sys.exit(7)); "
             "print('ready', flush=True); time.sleep(30)")
    proc = subprocess.Popen([sys.executable, "-m", "trainer_hooks.monitor", "--output", str(out), "--interval",
                             "0.2", "--monitor-training", f"{PY} -c {shlex.quote(child)}"],
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={"PYTHONPATH": str(REPO), "PATH": "/usr/bin:/bin"})
    assert proc.stdout.readline().strip() == "ready"
    time.sleep(0.2)
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=20) == 7
    assert out.read_bytes().strip()


def test_json_document_and_duration(tmp_path):
    out = tmp_path / "current_training.json"
    proc = monitor("--output", str(out), "--interval", "0.2", "--duration", "0.7", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(out.read_bytes())
    assert doc["command"] is None and doc["session_id"].startswith("monitor_")
    assert 3 <= len(doc["records"]) <= 6
    assert all(set(REQUIRED_KEYS) <= set(r) for r in doc["records"])


def test_usage_errors_exit_2(tmp_path):
    proc = monitor("--duration", "1", "--monitor-training", "true", cwd=tmp_path)
    assert proc.returncode == 2 and "exclude each other" in proc.stderr
    proc = monitor("--monitor-training", "no-such-command-xyz", cwd=tmp_path)
    assert proc.returncode == 127 and "cannot run" in proc.stderr and "Traceback" not in proc.stderr
