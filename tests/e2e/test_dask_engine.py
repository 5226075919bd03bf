"""The engine on a real Dask cluster: a ``dask scheduler`` and two ``dask worker`` processes started
here on free ports (torn down after), ``analyze_logs DIR --dask ADDRESS``.

By design, the equivalence test compares the Dask engine's JSON with the embedded engine's (both
logkit's output): the figures themselves are checked against files and independent computations
elsewhere (test_golden for sample_logs; here, the synthetic fleet's counts and sums against the
records the test reads itself)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from benchmarks.fleet import write_fleet
from logkit.cli import analyze_logs
from tests.support.launch import REPO

distributed = pytest.importorskip("distributed")

SECTIONS = ("--performance", "--communication", "--compare")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop(procs) -> None:
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """The scheduler's address, with two single-threaded workers connected to it."""
    tmp = tmp_path_factory.mktemp("dask")
    dask = str(Path(sys.executable).parent / "dask")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")])}
    port = _free_port()
    address = f"tcp://127.0.0.1:{port}"
    procs = [subprocess.Popen([dask, "scheduler", "--host", "127.0.0.1", "--port", str(port), "--no-dashboard"],
                              cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)]
    try:
        for i in range(2):
            procs.append(subprocess.Popen(
                [dask, "worker", address, "--nthreads", "1", "--no-nanny", "--no-dashboard", "--name", f"w{i}",
                 "--local-directory", str(tmp / f"w{i}"), "--death-timeout", "60"],
                cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        with distributed.Client(address, timeout=60) as client:
            client.wait_for_workers(2, timeout=60)
        yield address
    finally:
        _stop(procs[::-1])


def _json(folder, *extra) -> dict:
    r = CliRunner().invoke(analyze_logs, [str(folder), "--no-cache", "--json", *SECTIONS, *extra],
                           catch_exceptions=False)
    assert r.exit_code == 0, r.output
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory) -> Path:
    """Two synthetic sessions: 12 ranks x 15 steps x 3 buckets; 5 ranks whose records name no world size
    nor group size (the merge maps those ranks again with the session's), rank 2 without step records."""
    root = tmp_path_factory.mktemp("fleet")
    write_fleet(root, 12, steps=15, buckets=3)
    write_fleet(root, 5, steps=10, buckets=2, sid="training_20270101_000500", keep_world_size=False,
                stepless_ranks=(2,))
    return root


@pytest.mark.parametrize("folder", ["sample_logs/qlora_tiny_cpu/logs", "sample_logs/why_slow/logs"])
def test_dask_gives_the_embedded_engines_json_on_sample_logs(cluster, folder):
    embedded = _json(REPO / folder)
    assert embedded["communication"]  # the comm records went through the per-rank reduction
    assert _json(REPO / folder, "--dask", cluster) == embedded
    with distributed.Client(cluster) as client:  # the workers did the reading
        assert any(client.run(lambda: "logkit.run.engine" in sys.modules).values())


def test_dask_gives_the_embedded_engines_json_on_a_fleet(cluster, fleet, monkeypatch):
    embedded = _json(fleet)
    monkeypatch.setenv("LOGKIT_DASK_SCHEDULER", cluster)
    assert _json(fleet) == embedded
    # the figures themselves, against the records read here
    comm = [json.loads(line) for p in sorted(fleet.rglob("*_rank*.jsonl")) for line in p.open()
            if '"communication"' in line]
    rows = {(r["session_id"], r["rank"]): r for r in embedded["communication"]}
    assert len(rows) == 12 + 5
    for sid, n in (("training_20270101_000000", 12), ("training_20270101_000500", 5)):
        for rank in range(n):
            mine = [c for c in comm if c["session_id"] == sid and c["rank"] == rank]
            row = rows[(sid, rank)]
            assert row["count"] == len(mine)
            assert row["total_bytes"] == sum(c["size_bytes"] for c in mine)
            durations = sorted(c["duration_ms"] for c in mine)
            mid = len(durations) // 2
            median = durations[mid] if len(durations) % 2 else (durations[mid - 1] + durations[mid]) / 2
            assert row["p50_ms"] == pytest.approx(median, rel=1e-12)
    # records without group_size: busbw = algbw x 2(n-1)/n with the session's world size, n = 5
    assert rows[("training_20270101_000500", 0)]["busbw_from"].endswith("(n = 5)")


def test_an_unreachable_scheduler_is_one_line_and_exit_2():
    import dask

    with dask.config.set({"distributed.comm.timeouts.connect": "2s"}):
        r = CliRunner().invoke(analyze_logs, [str(REPO / "sample_logs/why_slow/logs"), "--no-cache",
                                              "--dask", f"tcp://127.0.0.1:{_free_port()}"])
    assert r.exit_code == 2
    assert "cannot reach the Dask scheduler" in r.output
    assert "Traceback" not in r.output
