"""Two and three "nodes" on one host: each machine rank of ``accelerate launch --num_machines N`` in its own
UTS namespace (``hostname nodeR``) and, past node 0, its own time namespace whose monotonic clock runs
R x 1000 s ahead (``unshare --time --monotonic``). The expected values are what the test launched: the
hosts and their ranks (accelerate numbers the ranks of machine R from R x procs), the clock offsets,
the slow rank.

Checked through the CLI: ``sessions[].nodes`` and ``hosts`` ({host, ranks, local_ranks, gpus}), the
gradient sync's ``scope`` (inter-node) and ``transport`` (gloo/TCP) with no NVLink peak, the clock
offset each node's ranks measured at start with its uncertainty and the skew finding, the straggler
found across the offset clocks, and a hang across nodes (one node's rank stops before its sync)."""

from __future__ import annotations

import json
import os
import subprocess
import time

import pytest

from tests.support.launch import BIN, REPO, analyze_logs, free_port, kill_tree, session_dirs

pytestmark = pytest.mark.slow

PROCS = 2  # processes per node (one in the three-node and hang runs, to keep them short)


def _unshare_works() -> str | None:
    """Why the namespaces cannot be made here (None where they can)."""
    try:
        proc = subprocess.run(["unshare", "--fork", "--uts", "--time", "--monotonic", "1000", "sh", "-c",
                               "hostname nodeX && hostname"], capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return f"unshare not runnable: {exc}"
    if proc.returncode != 0 or proc.stdout.strip() != "nodeX":
        return f"unshare --uts --time refused (needs root or user namespaces): {proc.stderr.strip()[:200]}"
    return None


def launch(tmp_path, nodes: int, *args: str, procs: int = PROCS, timeout: float = 120, expect_ok: bool = True) -> list:
    """``nodes`` machine ranks of one accelerate launch, each in its namespaces; their exit codes (a run
    still going at ``timeout`` is killed: None). The runs take 20-60 s here, mostly starting the processes
    (importing torch), more on a busy machine: the timeout leaves room for that."""
    why = _unshare_works()
    if why:
        pytest.skip(why)
    port, running = free_port(), []
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(REPO)}
    for r in range(nodes):
        clock = ["--time", "--monotonic", str(1000 * r)] if r else []
        cmd = (f"hostname node{r} && exec {BIN / 'accelerate'} launch --multi_gpu --num_processes {nodes * procs} "
               f"--num_machines {nodes} --machine_rank {r} --main_process_ip 127.0.0.1 --main_process_port {port} "
               f"--mixed_precision no --dynamo_backend no {REPO / 'examples/train_accelerate_loop.py'} "
               f"--log-dir {tmp_path / 'logs'} --batch-size 4 " + " ".join(args))
        running.append(subprocess.Popen(["unshare", "--fork", "--uts", *clock, "sh", "-c", cmd], env=env, cwd=tmp_path,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    if not expect_ok:
        # a hang: once one node's launcher has ended (its rank timed out in the collective), the node whose rank
        # stopped never will: give its streams a moment, then stop it
        end = time.monotonic() + timeout
        while time.monotonic() < end and all(p.poll() is None for p in running):
            time.sleep(0.5)
        for p in running:
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                kill_tree(p.pid)
    codes = []
    for p in running:
        try:
            out, _ = p.communicate(timeout=timeout)
            codes.append(p.returncode)
            if expect_ok and p.returncode:
                raise AssertionError(f"node launch failed ({p.returncode}):\n{out[-4000:]}")
        except subprocess.TimeoutExpired:
            kill_tree(p.pid)
            p.communicate()
            codes.append(None)
            if expect_ok:
                raise AssertionError(f"node launch still running after {timeout} s") from None
    return codes


def _json(logs, *flags) -> dict:
    proc = analyze_logs(str(logs), "--json", *flags)
    assert proc.returncode in (0, 1, 2), proc.stderr[-3000:]
    return json.loads(proc.stdout)


@pytest.fixture(scope="module")
def two_nodes(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("two_nodes")
    # rank 3 (node1's local rank 1) spends 60 ms more in each forward: the straggler
    launch(tmp, 2, "--steps", "8", "--slow-rank", "3", "--slow-compute", "0.06", "--log-setting", "comm_log_interval=1")
    return tmp / "logs"


def test_two_nodes_give_nodes_and_hosts(two_nodes):
    (s,) = _json(two_nodes)["sessions"]
    assert s["nodes"] == 2 and s["nodes_from"].startswith("stated:")
    # machine rank R runs global ranks R*2 and R*2+1, its local ranks 0 and 1; no GPU on either
    assert s["hosts"] == [{"host": "node0", "ranks": [0, 1], "local_ranks": [0, 1], "gpus": []},
                          {"host": "node1", "ranks": [2, 3], "local_ranks": [0, 1], "gpus": []}]


def test_the_gradient_sync_crosses_nodes_over_tcp_and_no_nvlink_peak(two_nodes):
    doc = _json(two_nodes, "--communication")
    rows = [r for r in doc["communication"] if r["op"] == "gradient_sync"]
    assert sorted(r["rank"] for r in rows) == [0, 1, 2, 3]
    for r in rows:
        assert (r["scope"], r["transport"]) == ("inter-node", "gloo/TCP")
        assert "NVLink" not in (r["link"] or "") and "NVLink" not in r["peak_source"]
        if r["peak_busbw_gb_s"] is None:  # this host's NIC reports no speed: no peak, and it says why
            assert "no interface speed" in r["peak_source"] and r["pct_of_peak"] is None
        else:
            assert "GbE" in r["peak_source"] or "Gb/s" in r["peak_source"]


def test_clock_offsets_are_stated_and_the_skew_reported(two_nodes):
    (s,) = _json(two_nodes)["sessions"]
    doc = _json(two_nodes, "--diagnose")
    clocks = {c["host"]: c for c in s["clock_offsets"]}
    assert clocks["node0"]["offset_s"] == 0.0
    # node1's monotonic clock was started 1000 s ahead (unshare --monotonic 1000); the barrier's release
    # latency bounds the error of the measurement
    assert clocks["node1"]["offset_s"] == pytest.approx(1000.0, abs=0.5)
    assert 0 <= clocks["node1"]["uncertainty_s"] < 0.5
    (skew,) = [f for f in doc["findings"] if f["kind"] == "clock_skew"]
    assert skew["host"] == "node1" and skew["ranks"] == [2, 3]
    (net,) = [f for f in doc["findings"] if f["kind"] == "fabric"]
    assert net["transport"] == "gloo/TCP" and "of each step" in net["detail"]
    assert any(v.startswith("Inter-node gradient sync goes over TCP sockets") for v in doc["verdict"])


def test_the_straggler_is_found_across_the_offset_clocks(two_nodes):
    doc = _json(two_nodes, "--performance")
    strag = {r["rank"]: r for r in doc["stragglers"]}
    assert strag[3]["is_straggler"] and not any(strag[r]["is_straggler"] for r in (0, 1, 2))


def test_three_nodes(tmp_path):
    launch(tmp_path, 3, "--steps", "4", procs=1)
    (s,) = _json(tmp_path / "logs")["sessions"]
    doc = _json(tmp_path / "logs", "--communication")
    assert s["nodes"] == 3 and [h["host"] for h in s["hosts"]] == ["node0", "node1", "node2"]
    assert [(h["ranks"], h["local_ranks"]) for h in s["hosts"]] == [([0], [0]), ([1], [0]), ([2], [0])]
    offsets = {c["host"]: c["offset_s"] for c in s["clock_offsets"]}
    assert offsets["node2"] == pytest.approx(2000.0, abs=0.5) and offsets["node1"] == pytest.approx(1000.0, abs=0.5)
    assert {r["scope"] for r in doc["communication"] if r["op"] == "gradient_sync"} == {"inter-node"}


def test_a_hang_across_nodes_names_the_rank_on_the_other_node(tmp_path):
    # rank 1 (node1, a clock 1000 s ahead) stops before its gradient sync at step 2; rank 0 (node0) waits
    # in it until the process group's timeout
    launch(tmp_path, 2, "--steps", "4", "--slow-rank", "1", "--hang-at", "2", "--pg-timeout", "5",
           "--log-setting", "stall_min_s=2", procs=1, expect_ok=False)
    (s,) = _json(tmp_path / "logs")["sessions"]
    assert s["nodes"] == 2 and [h["ranks"] for h in s["hosts"]] == [[0], [1]]
    doc = _json(tmp_path / "logs", "--diagnose")
    (hang,) = [f for f in doc["findings"] if f["kind"] == "hang"]
    assert hang["culprit_ranks"] == [1] and hang["waiting_ranks"] == [0]
    assert len(session_dirs(tmp_path / "logs")) == 1
