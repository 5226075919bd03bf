"""NCCL Inspector's per-process JSON lines read as communication records timed by NCCL itself, alone and
beside our own streams (tests/data/nccl_inspector/README.md: the files, built exactly as the plugin's
source writes them, and the plugin README's own example). Expected values are read off the files by eye
and computed here with Inspector's formulas (inspectorComputeOpBw)."""

from __future__ import annotations

import json
import shutil

import pytest

import logkit
from logkit.ingest.readers.sniff import sniff
from tests.support.excerpts import DATA
from tests.support.launch import analyze_logs

HERE = DATA / "nccl_inspector"
MB = 1e6


def _rows(s, rank=None):
    c = s.comm
    c = c if rank is None else c[c["rank"] == rank]
    return c.to_dict("records")


def test_a_file_is_recognised_and_read_as_one_process(tmp_path):
    path = tmp_path / "node01-pid4242.log"
    shutil.copy(HERE / path.name, path)
    assert sniff(path) == "nccl_inspector"
    s = logkit.load_session(path)
    rows = _rows(s)
    # 6 lines: AllGather x2, ReduceScatter, AllReduce, Broadcast (sub-communicator), Send
    assert [r["op"] for r in rows] == ["AllGather", "AllGather", "ReduceScatter", "AllReduce", "Broadcast", "Send"]
    assert {r["rank"] for r in rows} == {0} and {r["timing_source"] for r in rows} == {"nccl_inspector"}
    ag = rows[0]
    # line 1: 1048576 bytes per rank on 2 ranks in 1500 us; traffic = 2 x 1048576 (Inspector's and nccl-tests' size)
    assert ag["size_bytes"] == 2 * 1048576 and ag["duration_ms"] == pytest.approx(1.5)
    assert ag["algbw_mb_s"] == pytest.approx(2 * 1048576 / MB / 1.5e-3, abs=1e-3)  # 1.398101 GB/s as written
    assert ag["busbw_mb_s"] == pytest.approx(ag["algbw_mb_s"] / 2, abs=1e-3)  # (n-1)/n on 2 ranks
    assert ag["group_size"] == 2 and ag["inspector_timing"] == "kernel_gpu"
    ar = rows[3]  # 8192 bytes, 40 us: the message itself, busbw = 2(n-1)/n x algbw = algbw on 2 ranks
    assert ar["size_bytes"] == 8192 and ar["busbw_mb_s"] == pytest.approx(8192 / MB / 40e-6, abs=1e-3)
    assert rows[4]["group_size"] == 1 and rows[4]["algbw_mb_s"] == 0  # 0 us: Inspector writes 0
    assert rows[5]["peer"] == 1 and rows[5]["size_bytes"] == 16384
    m = s.meta
    assert m.world_size == 2 and m.nodes == 1 and m.hosts == ["node01"] and m.backend == "nccl"
    assert m.world_size_from.startswith("stated: Inspector's n_ranks")


def test_a_verbose_objects_start_is_its_time(tmp_path):
    s = logkit.load_session(HERE / "node01-pid4242.log")
    (ar,) = [r for r in _rows(s) if r["op"] == "AllReduce"]
    assert ar["time_s"] is not None and ar["time_s"] == ar["time_s"]  # coll_start_ts, the only timed line


def test_the_ranks_files_gather_into_one_session_and_a_cut_line_is_a_diagnostic(tmp_path):
    folder = tmp_path / "nccl-inspector-unknown-jobid"
    folder.mkdir()
    for name in ("node01-pid4242.log", "node01-pid4243.log"):
        shutil.copy(HERE / name, folder / name)
    (s,) = logkit.load_sessions(folder)
    assert sorted(s.comm["rank"].unique().tolist()) == [0, 1]
    r1 = _rows(s, 1)
    # rank 1's second AllGather took 1350 us (line 2 of its file)
    assert [r["duration_ms"] for r in r1 if r["op"] == "AllGather"] == pytest.approx([1.5, 1.35])
    d = s.diagnostics
    assert len(d) == 1 and d.iloc[0]["file"].endswith("node01-pid4243.log") and d.iloc[0]["line"] == 5


def test_the_plugin_readmes_example(tmp_path):
    s = logkit.load_session(HERE / "readme_example.log")
    (r,) = _rows(s)
    assert (r["op"], r["rank"], r["group_size"], r["size_bytes"]) == ("AllReduce", 2, 8, 17179869184)
    assert r["algbw_mb_s"] == pytest.approx(277210.914) and r["busbw_mb_s"] == pytest.approx(485119.099)
    assert r["duration_ms"] == pytest.approx(61.974) and r["inspector_timing"] is None
    assert s.meta.world_size == 8


def test_beside_our_streams_through_the_cli_each_source_has_its_rows(tmp_path):
    """Inspector's files dropped into our session folder: the CLI's communication table holds the emitter's
    rows and Inspector's, each with its timing source and the role of its op in the run's strategy."""
    session = tmp_path / "logs" / "training_x"
    session.mkdir(parents=True)
    start = {"type": "session_start", "time_s": 0.0, "rank": 0, "world_size": 2, "strategy": "fsdp2",
             "session_id": "training_x", "timestamp": "2026-01-01T00:00:00"}
    recs = [start] + [{"type": "communication", "time_s": 0.1 * i, "rank": 0, "step": i, "op": "all_gather",
                       "size_bytes": 2097152, "duration_ms": 3.0, "group_size": 2, "timing_source": "cuda_event",
                       "phase": "forward"} for i in range(1, 4)]
    (session / "training_x_rank0.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recs))
    shutil.copy(HERE / "node01-pid4242.log", session / "node01-pid4242.log")
    proc = analyze_logs(str(tmp_path / "logs"), "--communication", "--json", "--no-cache", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = {(r["rank"], r["op"]): r for r in json.loads(proc.stdout)["communication"]}
    assert rows[(0, "all_gather")]["timing_source"] == "cuda_event" and rows[(0, "all_gather")]["count"] == 3
    ins = rows[(0, "AllGather")]
    assert ins["timing_source"] == "nccl_inspector" and ins["count"] == 2
    assert ins["p50_ms"] == pytest.approx((1.5 + 1.25) / 2)  # the two AllGathers of the file
    assert "parameter shards" in ins["role"]  # FSDP2's all-gather, as the session_start says


def test_two_hosts_files_make_the_rows_inter_node_with_no_nvlink_peak(tmp_path):
    """Inspector's files of two hosts (rank 1's moved to node02, nnodes 2: a variation of the fixture) give
    the session its nodes (Inspector's nnodes), so its collectives are inter-node; the logs name no network,
    so no peak is claimed (never the GPUs' NVLink)."""
    folder = tmp_path / "inspector"
    folder.mkdir()
    shutil.copy(HERE / "node01-pid4242.log", folder / "node01-pid4242.log")
    text = (HERE / "node01-pid4243.log").read_text()
    text = text.replace('"hostname":"node01"', '"hostname":"node02"').replace('"nnodes":1', '"nnodes":2')
    (folder / "node02-pid4243.log").write_text(text)
    (folder / "node01-pid4242.log").write_text((folder / "node01-pid4242.log").read_text().replace('"nnodes":1', '"nnodes":2'))
    proc = analyze_logs(str(folder), "--json", "--compare", "--communication", "--no-cache")
    assert proc.returncode in (0, 1), proc.stderr
    doc = json.loads(proc.stdout)
    (s,) = doc["sessions"]
    assert s["nodes"] == 2 and "node01" in [h["host"] for h in s["hosts"]]
    rows = [r for r in doc["communication"] if r["group_size"] == 2]
    assert rows and {r["scope"] for r in rows} == {"inter-node"}
    assert all(r["peak_busbw_gb_s"] is None and "NVLink" not in (r["link"] or "") for r in rows)
