"""``analyze_logs DIR --json`` as a user types it (a subprocess, the installed script): each entry of
``sessions[]`` carries the run's facts with where they came from, and ``--diagnose`` says why a child
failed. The folders hold excerpts of real logs (``tests/data/ncclfacts/``, cited in its README);
expected values are read off them by eye."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

from tests.support.launch import REPO

DATA = REPO / "tests" / "data" / "ncclfacts"
ANALYZE_LOGS = Path(sys.executable).parent / "analyze_logs"


def analyze_logs(folder: Path, *options: str) -> dict:
    r = subprocess.run([str(ANALYZE_LOGS), str(folder), *options], capture_output=True, text=True, timeout=300,
                       cwd=folder)
    assert r.stdout.strip(), r.stderr
    return json.loads(r.stdout)


def folder_of(tmp_path: Path, *names: str) -> Path:
    for name in names:
        shutil.copy(DATA / name, tmp_path / name)
    return tmp_path


def test_sessions_carry_the_nccl_facts_and_their_provenance(tmp_path):
    doc = analyze_logs(folder_of(tmp_path, "nccl_429_ib_gdrdma_init_complete.log"), "--json")
    (s,) = doc["sessions"]
    name = "nccl_429_ib_gdrdma_init_complete.log"
    # line 13: "comm 0x7f4ce0006640 rank 5 nranks 16 cudaDev 5 busId 89000 - Init COMPLETE"
    assert s["world_size"] == 16 and s["world_size_from"] == f"stated: NCCL init: nranks 16 ({name}:13)"
    assert s["facts_source"]["world_size"] == f"{name}:13"
    # two hosts, machine-1 and machine-2 (no nNodes line: a lower bound)
    assert [h["host"] for h in s["hosts"]] == ["machine-1", "machine-2"] and s["nodes"] == 2 and s["nodes_from"].startswith("inferred")
    # three "via NET/IB/0/GDRDMA" and three "via P2P/direct pointer" lines
    assert s["transports"] == {"NET/IB": 3, "P2P/direct pointer": 3}
    assert s["network"] == "IB" and s["network_from"].startswith("derived: ")


def test_a_fallback_to_sockets_is_said(tmp_path):
    doc = analyze_logs(folder_of(tmp_path, "nccl_226_ib_not_found_socket.log"), "--json")
    (s,) = doc["sessions"]
    # line 1: "NET/IB : No device found.", line 2: "NET/Socket : Using [0]ens3:172.31.12.210<0>"
    assert s["network"] == "Socket" and s["network_fallback"].startswith("IB: NET/IB : No device found.")
    assert s["nics"] == ["ens3"]


def test_the_world_size_of_an_all_gather_in_the_json(tmp_path):
    doc = analyze_logs(folder_of(tmp_path, "trl_1099_allgather_4way.log"), "--json")
    (s,) = doc["sessions"]
    # NumelOut 262156288 / NumelIn 65539072 = 4
    assert s["world_size"] == 4 and s["world_size_from"].startswith("derived: NumelOut / NumelIn of an all-gather")


def test_diagnose_says_why_the_child_failed(tmp_path):
    doc = analyze_logs(folder_of(tmp_path, "r1v_42_cant_open_file.log"), "--diagnose", "--json")
    (f,) = [f for f in doc["findings"] if f["kind"] == "child_failed"]
    # line 10: python's "can't open file ..." ; line 11: torchrun's "failed (exitcode: 2) local_rank: 0 (pid: 1464)"
    assert f["detail"].startswith("local rank 0 (pid 1464) failed: /root/miniconda3/bin/python: can't open file "
                                  "'/root/R1-V/src/open_r1/grpo.py'")
    assert f["cause"] == {"cause": "file_not_found", "message": "/root/miniconda3/bin/python: can't open file "
                          "'/root/R1-V/src/open_r1/grpo.py': [Errno 2] No such file or directory",
                          "source": "r1v_42_cant_open_file.log:10", "rank": None}


def test_the_console_and_the_report_show_the_run_facts(tmp_path):
    folder = folder_of(tmp_path, "nccl_1189_nranks_nnodes.log")
    r = subprocess.run([str(ANALYZE_LOGS), str(folder)], capture_output=True, text=True, timeout=300, cwd=folder)
    # line 4: "comm 0x5b0bc60 rank 3 nRanks 4 nNodes 2 ..."
    assert "    world_size: 4  [stated: NCCL init: nranks 4 (nccl_1189_nranks_nnodes.log:4)]" in r.stdout
    subprocess.run([str(ANALYZE_LOGS), str(folder), "--report", str(tmp_path / "r.html")], capture_output=True,
                   text=True, timeout=300, cwd=folder, check=True)
    html = (tmp_path / "r.html").read_text(encoding="utf-8")
    assert "<h3>Run facts</h3>" in html and "stated: NCCL init: nNodes 2 (nccl_1189_nranks_nnodes.log:4)" in html
