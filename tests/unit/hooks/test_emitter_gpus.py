"""Per-GPU figures on a multi-GPU node, through the emitter, with a fake NVML (two GPUs, the
second one idling): local rank 0 samples every GPU of its node, the other ranks the host only."""

from __future__ import annotations

import sys
import time
import types

import orjson
import pytest

from logkit.schema import GPU_UTIL_LOW, PROCESS_LINE, SessionFiles
from tests.support.launch import read_jsonl
from tests.unit.hooks.test_sampler import fake_pynvml
from trainer_hooks import session_logger as session_mod
from trainer_hooks import sysinfo
from trainer_hooks.distributed import RankInfo
from trainer_hooks.sampling import nvml as nvml_mod
from trainer_hooks.session_logger import SessionLogger

UTIL = {0: 92.0, 1: 45.2}  # NVML index -> utilization %: the second GPU is under the 50% threshold
MEM_PCT = {0: 5.0, 1: 10.0}  # the fake's 4 GB and 8 GB used of 80 GB


@pytest.fixture
def node_with_two_gpus(monkeypatch):
    nv = fake_pynvml(count=2)
    nv.nvmlDeviceGetUtilizationRates = lambda h: types.SimpleNamespace(gpu=UTIL[h], memory=0)
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.setattr(sysinfo, "gpu_list", lambda: [
        {"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-fake-{i}", "memory_total_mb": 80000.0}
        for i in (0, 1)])
    nvml_mod.reset_nvml()
    yield monkeypatch
    nvml_mod.reset_nvml()


def _rank(monkeypatch, tmp_path, rank: int, session_id: str | None = None) -> SessionLogger:
    monkeypatch.setattr(session_mod, "rank_info",
                        lambda: RankInfo(rank, 2, rank, "nccl", f"cuda:{rank}", "node0"))
    # GPU memory threshold between the two GPUs' 5% and 10%: the second one is "high"
    log = SessionLogger(tmp_path, "high", session_id=session_id, gpu_snapshot_interval=0.2, gpu_memory_high_pct=7.5)
    log.start(per_device_batch_size=2, max_steps=40)
    return log


def _train(*logs: SessionLogger, steps: int = 40) -> None:
    for step in range(1, steps + 1):
        for log in logs:
            log.step_begin()
        time.sleep(0.025)  # 1 s in all: several sampler intervals
        for log in logs:
            log.step_end(step, loss=1.0, learning_rate=1e-3)
    for log in logs:
        log.end()


@pytest.mark.parametrize("visible, idle", [(None, 1), ("GPU-fake-1,0", 0)])
def test_rank0_summary_and_warnings_cover_every_gpu_of_its_node(tmp_path, node_with_two_gpus, visible, idle):
    monkeypatch = node_with_two_gpus
    if visible is not None:  # CUDA ordinal 0 is NVML's GPU 1 (named by UUID), ordinal 1 NVML's GPU 0
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    nvml_of = {0: 1, 1: 0} if visible else {0: 0, 1: 1}
    rank0 = _rank(monkeypatch, tmp_path, 0)
    rank1 = _rank(monkeypatch, tmp_path, 1, session_id=rank0.session_id)
    _train(rank0, rank1)
    folder, files = tmp_path / rank0.session_id, SessionFiles(rank0.session_id)

    summary = orjson.loads((folder / files.summary_json).read_bytes())
    assert summary["mode"] == "MULTI-GPU" and summary["world_size"] == 2
    by_index = {g["index"]: g for g in summary["gpus"]}
    assert sorted(by_index) == [0, 1]
    for ordinal, g in by_index.items():
        assert g["avg_util"] == g["peak_util"] == UTIL[nvml_of[ordinal]]
        assert g["avg_memory_pct"] == MEM_PCT[nvml_of[ordinal]]

    stream0 = read_jsonl(folder / files.rank_jsonl(0))
    snaps = [r for r in stream0 if r["type"] == "gpu_snapshot"]
    assert len(snaps) >= 3
    for snap in snaps:
        assert [(d["index"], d["nvml_index"], d["utilization_percent"]) for d in snap["devices"]] == [
            (o, nvml_of[o], UTIL[nvml_of[o]]) for o in (0, 1)]
    low = [r for r in stream0 if r["type"] == "resource_warning" and r["kind"] == "gpu_util_low"]
    assert low and {(r["gpu"], r["value"]) for r in low} == {(idle, 45.2)}

    # the performance.log warning line, for the idle GPU only, once per interval that found it
    lines = [PROCESS_LINE.parse(x) for x in (folder / files.performance_log).read_text().splitlines()]
    warned = [GPU_UTIL_LOW.parse(p["message"]) for p in lines if p and GPU_UTIL_LOW.parse(p["message"])]
    assert warned == [{"gpu": idle, "utilization_pct": 45.2}] * len(low)
    assert all(p["level"] == "WARNING" for p in lines if p and GPU_UTIL_LOW.parse(p["message"]))

    high = [r for r in stream0 if r["type"] == "resource_warning" and r["kind"] == "gpu_memory_high"]
    assert high and {(r["gpu"], r["value"], r["threshold"]) for r in high} == {(idle, 10.0, 7.5)}
    assert (folder / files.performance_log).read_text().count(f"GPU {idle} memory usage high: 10.0%") == len(high)

    # rank 1 (local rank 1) samples the host only: its snapshots have no devices, no warnings
    stream1 = read_jsonl(folder / files.rank_jsonl(1))
    snaps1 = [r for r in stream1 if r["type"] == "gpu_snapshot"]
    assert snaps1 and all(s["devices"] == [] for s in snaps1)
    assert all(s["resource_usage"]["memory"]["usage_percent"] > 0 for s in snaps1)
    assert not [r for r in stream1 if r["type"] == "resource_warning" and r["kind"].startswith("gpu")]
