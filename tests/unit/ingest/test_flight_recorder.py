"""PyTorch Flight Recorder dumps: the real ones the emitter wrote in sample_logs/why_slow/hang (two
gloo ranks, rank 1 stopped before its gradient sync), dumps torch makes here in both of its forms
(pickle and JSON), and a hostile pickle that must never run. Expected values are read from the
dumps with plain pickle/json here, never from logkit."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys

import pytest

from logkit.analysis import analyze
from logkit.ingest.readers import read_file, sniff
from logkit.run.load import load_sessions
from tests.support.launch import REPO, analyze_logs

HANG = REPO / "sample_logs" / "why_slow" / "hang"


def _dumps():
    return sorted(HANG.glob("*/*_flight_recorder_rank*.pkl"))


def _last(doc: dict) -> dict:
    return max((e for e in doc["entries"] if not e["is_p2p"]), key=lambda e: e["collective_seq_id"])


def test_the_emitters_dumps_give_each_ranks_last_collective():
    dumps = _dumps()
    assert [p.name[-9:] for p in dumps] == ["rank0.pkl", "rank1.pkl"]
    for rank, path in enumerate(dumps):
        assert sniff(path) == "flight_recorder"
        doc = pickle.loads(path.read_bytes())  # our own fixture: safe to unpickle plainly here
        want = _last(doc)
        (ev,) = read_file(path).tables["events"].to_pylist()
        assert ev["kind"] == "flight_recorder" and ev["rank"] == rank
        assert ev["seq"] == want["collective_seq_id"] and ev["op"] == want["profiling_name"]
        assert ev["numel"] == want["input_sizes"][0][0] and ev["status"] == want["state"]
        assert ev["timeout_ms"] == want["timeout_ms"] and ev["pg_name"] == want["process_group"][1]
        assert "commhook.py" in ev["stack"]  # the DDP hook that launched it, torch's own frames left out


def test_the_rank_behind_in_the_dumps_is_the_hang_culprit():
    ranks = {i: _last(pickle.loads(p.read_bytes()))["collective_seq_id"] for i, p in enumerate(_dumps())}
    assert ranks[1] < ranks[0]  # rank 1 never enqueued the all-reduce rank 0 waited in
    (s,) = load_sessions(HANG)
    (hang,) = [f for f in analyze([s]).findings if f.kind == "hang"]
    assert hang.extra["culprit_ranks"] == [1] and hang.extra["waiting_ranks"] == [0]
    assert f"rank 1's last was #{ranks[1]}" in hang.detail


def test_dumps_alone_in_a_folder_are_one_session_with_its_culprit(tmp_path):
    for p in _dumps():
        shutil.copy(p, tmp_path / f"nccl_trace_rank_{p.name[-5]}")  # torch's own default names
    seqs = {int(p.name[-5]): _last(pickle.loads(p.read_bytes())) for p in _dumps()}
    r = analyze_logs(str(tmp_path), "--no-cache", "--diagnose", "--json", "--fail-on", "critical")
    assert r.returncode == 1, r.stderr
    doc = json.loads(r.stdout)
    (hang,) = [f for f in doc["findings"] if f["kind"] == "hang"]
    assert hang["severity"] == "critical" and hang["culprit_ranks"] == [1] and hang["waiting_ranks"] == [0]
    top = seqs[0]
    assert f"never reached collective #{top['collective_seq_id']} ({top['profiling_name']})" in hang["title"]
    assert hang["evidence"][0] == "nccl_trace_rank_1"


class _Boom:
    def __reduce__(self):
        return (os.system, ("touch PWNED",))


def test_a_pickle_naming_code_is_refused_and_never_run(tmp_path, monkeypatch):
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(pickle.dumps({"version": "2.10", "pg_config": {}, "pg_status": {}, "entries": [_Boom()]},
                                  protocol=2))
    monkeypatch.chdir(tmp_path)  # where os.system('touch PWNED') would write, undone after the test
    res = read_file(path)
    assert not (tmp_path / "PWNED").exists()
    assert "events" not in res.tables
    (d,) = res.diagnostics
    assert "refused" in d["reason"] and "GLOBAL" in d["reason"]


def test_a_pickle_whose_memo_index_is_huge_is_refused_before_it_allocates(tmp_path):
    # a dump with one memo index made huge (found by fuzzing: the unpickler sizes its memo by it)
    data = bytearray(pickle.dumps({"entries": [{"collective_seq_id": 1}], "pg_config": {}}, protocol=2))
    at = data.index(pickle.BINPUT)
    data[at:at + 2] = pickle.LONG_BINPUT + (741432074).to_bytes(4, "little")
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(bytes(data))
    res = read_file(path)
    assert "memo index 741432074" in res.diagnostics[0]["reason"]


def test_a_cut_dump_is_noted_not_raised(tmp_path):
    data = _dumps()[0].read_bytes()
    path = tmp_path / "nccl_trace_rank_0"
    path.write_bytes(data[: len(data) // 2])
    res = read_file(path, format="flight_recorder")
    assert "events" not in res.tables and "not read as a Flight Recorder dump" in res.diagnostics[0]["reason"]


_TORCH_DUMP = """
import datetime, os, sys, torch, torch.distributed as dist
dist.init_process_group("gloo", init_method="file://" + sys.argv[1] + "/store", rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=30))
for _ in range(3):
    dist.all_reduce(torch.ones(10))
dist.broadcast(torch.ones(6, 2), 0)
from torch._C import _distributed_c10d as c
open(sys.argv[1] + "/fr_rank_0", "wb").write(c._dump_fr_trace())
open(sys.argv[1] + "/fr_rank_0.json", "wb").write(c._dump_fr_trace_json())
dist.destroy_process_group()
"""


def test_torchs_own_dumps_pickle_and_json_read_alike(tmp_path):
    # what this torch writes today: four collectives, the last a broadcast of 12 elements
    env = {**os.environ, "TORCH_FR_BUFFER_SIZE": "100", "OMP_NUM_THREADS": "1"}
    proc = subprocess.run([sys.executable, "-c", _TORCH_DUMP, str(tmp_path)], env=env, capture_output=True,
                          text=True, timeout=120)
    if proc.returncode != 0 and "_dump_fr_trace" in proc.stderr:
        pytest.skip("this torch has no Flight Recorder dump")
    assert proc.returncode == 0, proc.stderr
    js = json.loads((tmp_path / "fr_rank_0.json").read_text())
    last = max(js["entries"], key=lambda e: e["collective_seq_id"])
    assert last["collective_seq_id"] == 4 and last["profiling_name"].endswith("broadcast")
    for name in ("fr_rank_0", "fr_rank_0.json"):
        assert sniff(tmp_path / name) == "flight_recorder", name
        (ev,) = read_file(tmp_path / name).tables["events"].to_pylist()
        assert (ev["rank"], ev["seq"], ev["op"], ev["numel"]) == (0, 4, last["profiling_name"], 12), name
