"""Real 2-rank DeepSpeed ZeRO runs (stages 1, 2 and 3 on gloo CPU ranks under torchrun, ``DS_ACCELERATOR=cpu``,
torch's AdamW as the client optimizer, ``TrainingLogger``): every collective DeepSpeed issues reaches
torch.distributed and is timed by the ``torch_distributed`` source, with the bytes DeepSpeed's own
partitioning gives, and a slow-data rank is named with its cause.

Runs only where deepspeed is importable: logkit does not depend on it (the ranks get the folder deepspeed
was imported from on their PYTHONPATH). The byte oracles, from the model's parameter shapes and the
rank count ``n`` as DeepSpeed lays them out:

- ZeRO-1/2 (``runtime/zero/stage_1_and_2.py``): the gradients of the step go in one reduce bucket
  (``reduce_bucket_size`` 5e8 elements by default, far above this model) and are all-reduced whole; after
  the optimizer step each rank's partition of the flat parameter group is all-gathered: the group's numel
  padded to a multiple of ``nccl_start_alignment_factor`` (2) x n (``parameter_alignment`` off by default).
- ZeRO-3 (``runtime/zero/partition_parameters.py``): each parameter is partitioned on its own, padded to a
  multiple of n (ceil(numel / n) per rank); a step's forward gathers every parameter once (step 1 module by
  module, later steps in one prefetched all-gather) and the gradients are reduce-scattered, all parameters
  together, at the end of backward.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest
from torch import nn

from logkit.schema import SessionFiles
from tests.support.fsdp_train import make_model
from tests.support.launch import analyze_logs, read_jsonl, session_dirs, torchrun
from tests.support.straggler_checks import assert_slow_data_rank_1
from tests.support.stream_oracles import collectives

deepspeed = pytest.importorskip("deepspeed", reason="deepspeed is not installed: logkit does not depend on it")
pytestmark = pytest.mark.slow

RANKS, STEPS, SLOW_MS = 2, 30, 50
PARAM_BYTES = [p.numel() * 4 for p in make_model().parameters()]  # float32, in module order


def _run(tmp: Path, stage: int, *extra: str, steps: int) -> dict:
    ds_home = str(Path(deepspeed.__file__).resolve().parents[1])
    env = {"DS_ACCELERATOR": "cpu", "PYTHONPATH": os.pathsep.join([str(Path(__file__).resolve().parents[2]), ds_home])}
    torchrun("tests/support/deepspeed_train.py", ["--log-dir", str(tmp / "logs"), "--stage", str(stage), "--steps",
                                                  str(steps), *extra], RANKS, cwd=tmp, timeout=300, env=env)
    (session,) = session_dirs(tmp / "logs")
    files = SessionFiles(session.name)
    return {r: read_jsonl(session / files.rank_jsonl(r)) for r in range(RANKS)}


@pytest.fixture(scope="module")
def zero2(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("zero2")
    streams = _run(tmp, 2, "--slow-rank", "1", "--slow-ms", str(SLOW_MS), "--sleep", "0.1", steps=STEPS)
    return tmp / "logs", streams


def _comm(records: list[dict], step: int) -> list[dict]:
    return [r for r in collectives(records) if r["step"] == step]


def _check_bandwidths(records: list[dict]) -> None:
    factor = {"all_reduce": 2 * (RANKS - 1) / RANKS, "all_gather": (RANKS - 1) / RANKS,
              "reduce_scatter": (RANKS - 1) / RANKS, "broadcast": 1.0}
    for r in collectives(records):
        if not r["size_bytes"]:
            continue
        algbw = r["size_bytes"] / 1e6 / (r["duration_ms"] / 1e3)
        assert r["group_size"] == RANKS and r["timing_source"] == "wall"
        assert r["algbw_mb_s"] == pytest.approx(algbw, rel=1e-5, abs=5.1e-5)
        assert r["busbw_mb_s"] == pytest.approx(algbw * factor[r["op"]], rel=1e-5, abs=5.1e-5)


def _check_zero12(streams: dict, steps: int) -> None:
    align = 2 * RANKS
    gathered = math.ceil(sum(PARAM_BYTES) / 4 / align) * align * 4
    assert gathered != sum(PARAM_BYTES)  # 13550 elements: the padding shows
    for rank, records in streams.items():
        for step in range(1, steps + 1):
            mine = _comm(records, step)
            big = [(r["op"], r["phase"], r["size_bytes"]) for r in mine if r["size_bytes"] > 64]
            # the gradients all-reduced at the end of backward, the updated partitions gathered after the step
            assert big == [("all_reduce", "backward", sum(PARAM_BYTES)), ("all_gather", "optimizer", gathered)], \
                (rank, step, mine)
        _check_bandwidths(records)


def test_zero2_bytes_phases_and_bandwidths(zero2):
    _, streams = zero2
    _check_zero12(streams, STEPS)


def test_zero1_bytes_and_phases(tmp_path):
    _check_zero12(_run(tmp_path, 1, steps=3), 3)


@pytest.mark.parametrize("via", ["deepspeed", "accelerate"])
def test_zero3_gathers_every_parameter_and_reduce_scatters_the_gradients(tmp_path, via):
    # "accelerate": the engine from accelerate's DeepSpeed plugin, logged through TrainingLogger(accelerator=...)
    streams = _run(tmp_path, 3, "--via", via, steps=3)
    for records in streams.values():
        (start,) = [r for r in records if r["type"] == "session_start"]
        assert start["strategy"] == "deepspeed" and start["strategy_facts"]["zero_stage"] == 3
        assert start["timing_source"] == "torch_distributed"
    padded = [math.ceil(b / 4 / RANKS) * RANKS * 4 for b in PARAM_BYTES]
    per_module = [sum(padded[i:i + 2]) for i in range(0, len(padded), 2)]  # each Linear's weight and bias
    assert len(per_module) == len([m for m in make_model() if isinstance(m, nn.Linear)])
    for rank, records in streams.items():
        for step in range(1, 4):
            mine = _comm(records, step)
            forward = [r["size_bytes"] for r in mine if r["op"] == "all_gather" and r["phase"] == "forward"]
            assert sum(forward) == sum(padded), (rank, step, mine)
            scattered = [r["size_bytes"] for r in mine if r["op"] == "reduce_scatter"]
            assert scattered == [sum(padded)] and {r["phase"] for r in mine if r["op"] == "reduce_scatter"} == \
                {"backward"}, (rank, step)
        # step 1 gathers module by module: in forward order, and again in backward in reverse
        first = [(r["phase"], r["size_bytes"]) for r in _comm(records, 1) if r["op"] == "all_gather"]
        assert first == [("forward", b) for b in per_module] + [("backward", b) for b in reversed(per_module)]
        _check_bandwidths(records)


def test_the_session_says_deepspeed_timed_at_torch_distributed(zero2, tmp_path):
    logs, streams = zero2
    for records in streams.values():
        (start,) = [r for r in records if r["type"] == "session_start"]
        assert start["strategy"] == "deepspeed" and start["strategy_facts"]["zero_stage"] == 2
        assert start["timing_source"] == "torch_distributed" and start["timing_note"] is None
    doc = json.loads(analyze_logs(str(logs), "--json", cwd=tmp_path).stdout)
    (session,) = doc["sessions"]
    assert session["strategy"] == "deepspeed" and session["timing_source"] == "torch_distributed"


def test_the_slow_data_rank_is_the_straggler_with_cause_data(zero2, tmp_path):
    logs, _ = zero2
    assert_slow_data_rank_1(logs, tmp_path, SLOW_MS, data_times=False)
