"""Real sharded runs on one NVIDIA H200 (sample_logs/gpu_sharded/, see its README): the collectives each
wrapper issued, timed with CUDA events, as the CLI reports them. Expected values are counted here from the
raw rank streams, independently of logkit's readers."""

from __future__ import annotations

import collections
import json

import orjson
import pytest

from tests.support.launch import REPO, analyze_logs, read_jsonl
from tests.support.stream_oracles import collectives

GPU = REPO / "sample_logs" / "gpu_sharded"


def _raw() -> dict[str, dict]:
    out = {}
    for path in sorted(GPU.glob("*/*_rank0.jsonl")):
        records = read_jsonl(path)
        start = next(r for r in records if r["type"] == "session_start")
        comm = collectives(records)
        out[start["session_id"]] = {"start": start, "comm": comm}
    return out


@pytest.fixture(scope="module")
def report():
    proc = analyze_logs(str(GPU), "--json", "--compare", "--communication", "--no-cache")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_every_collective_was_timed_with_cuda_events():
    raw = _raw()
    assert len(raw) == 4
    for sid, run in raw.items():
        assert run["comm"], sid
        assert {r["timing_source"] for r in run["comm"]} == {"cuda_event"}, sid
        assert run["start"]["gpus"][0]["name"] == "NVIDIA H200"


def test_the_communication_table_counts_each_op_as_the_streams_do(report):
    raw = _raw()
    table = collections.Counter()
    for row in report["communication"]:
        table[(row["session_id"], row["op"])] += row["count"]
        assert row["timing_source"] == "cuda_event"
    expected = collections.Counter((sid, r["op"]) for sid, run in raw.items() for r in run["comm"])
    assert table == expected
    # DeepSpeed ZeRO-3 through the Trainer: its gradients reduce-scattered, its partitions broadcast
    ds = next(sid for sid, run in raw.items() if run["start"]["strategy"] == "deepspeed")
    assert {op for s, op in expected if s == ds} == {"reduce_scatter", "all_reduce", "broadcast"}


def test_the_strategy_and_timing_source_of_each_session_as_its_start_record_says(report):
    raw = _raw()
    for s in report["sessions"]:
        start = raw[s["session_id"]]["start"]
        assert (s["strategy"], s["timing_source"]) == (start["strategy"], start["timing_source"])
    assert sorted(r["start"]["strategy"] for r in raw.values()) == ["ddp", "deepspeed", "fsdp1", "fsdp1"]


def test_the_median_duration_is_the_records_median(report):
    raw = _raw()
    for row in report["communication"]:
        ms = sorted(r["duration_ms"] for r in raw[row["session_id"]]["comm"]
                    if r["op"] == row["op"] and r["rank"] == row["rank"])
        mid = len(ms) // 2
        median = ms[mid] if len(ms) % 2 else (ms[mid - 1] + ms[mid]) / 2
        assert row["p50_ms"] == pytest.approx(median)


def test_the_streams_are_json_lines():
    for path in GPU.glob("*/*_rank0.jsonl"):
        for line in path.read_bytes().splitlines():
            orjson.loads(line)
