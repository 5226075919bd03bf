"""The Trainer callback with FSDP on 2 gloo CPU ranks under torchrun (tests/support/trainer_fsdp_train.py).

transformers' ``fsdp=`` arguments do not shard on CPU ranks: accelerate enables FSDP only for the
MULTI_<accelerator> distributed types, so with ``use_cpu=True`` the run is MULTI_CPU and the Trainer wraps
the model in DDP; the callback records what ran (ddp), not what was asked. A model ``fully_shard``-ed by
hand and passed to the Trainer (marked as owning its placement) trains sharded, and the callback records
FSDP2 with every all-gather and reduce-scatter timed, per step, read back through the CLI."""

from __future__ import annotations

import json

import pytest

from logkit.schema import SessionFiles
from tests.support.launch import analyze_logs, read_jsonl, session_dirs, torchrun
from tests.support.stream_oracles import collectives

pytestmark = pytest.mark.slow

RANKS, STEPS = 2, 4


def _streams(logs):
    (session,) = session_dirs(logs)
    files = SessionFiles(session.name)
    return {r: read_jsonl(session / files.rank_jsonl(r)) for r in range(RANKS)}


def test_fsdp_args_on_cpu_ranks_run_ddp_and_the_callback_says_ddp(tmp_path):
    proc = torchrun("tests/support/trainer_fsdp_train.py", ["--mode", "fsdp_args", "--log-dir", str(tmp_path / "logs"),
                                                           "--steps", str(STEPS)], RANKS, cwd=tmp_path, timeout=300)
    assert "distributed_type=DistributedType.MULTI_CPU wrapped=DistributedDataParallel" in proc.stdout
    for records in _streams(tmp_path / "logs").values():
        (start,) = [r for r in records if r["type"] == "session_start"]
        assert start["strategy"] == "ddp" and start["strategy_facts"]["group_size"] == RANKS


@pytest.fixture(scope="module")
def sharded(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("trainer_fully_shard")
    proc = torchrun("tests/support/trainer_fsdp_train.py", ["--mode", "fully_shard", "--log-dir", str(tmp / "logs"),
                                                           "--steps", str(STEPS)], RANKS, cwd=tmp, timeout=300)
    assert "wrapped=FSDPLlamaForCausalLM" in proc.stdout  # no DDP around the sharded model
    return tmp / "logs"


def test_a_fully_shard_model_through_the_trainer_is_recorded_and_timed(sharded):
    # 2 decoder layers and the root fully_shard-ed: 3 units (tests/support/trainer_fsdp_train.py)
    units = 3
    for rank, records in _streams(sharded).items():
        (start,) = [r for r in records if r["type"] == "session_start"]
        assert start["strategy"] == "fsdp2"
        assert start["strategy_facts"]["units"] == units and start["strategy_facts"]["shard_group_size"] == RANKS
        comm = collectives(records)
        assert {r["step"] for r in comm} == set(range(1, STEPS + 1)), rank
        for step in range(1, STEPS + 1):
            mine = [r for r in comm if r["step"] == step]
            # every unit gathered before its forward and its gradients reduce-scattered in backward
            assert sum(r["op"] == "all_gather" and r["phase"] == "forward" for r in mine) == units
            assert sum(r["op"] == "reduce_scatter" and r["phase"] == "backward" for r in mine) == units
        assert all(r["group_size"] == RANKS and r["timing_source"] == "wall" and r["duration_ms"] >= 0 for r in comm)


def test_the_cli_says_fsdp2_and_has_its_op_rows(sharded, tmp_path):
    out = analyze_logs(str(sharded), "--communication", cwd=tmp_path).stdout
    assert "Strategy: FSDP2 (fully_shard): 3 unit(s) sharded over 2 rank(s)" in out
    doc = json.loads(analyze_logs(str(sharded), "--communication", "--json", cwd=tmp_path).stdout)
    ops = {(r["rank"], r["op"]): r for r in doc["communication"]}
    assert set(ops) == {(r, op) for r in range(RANKS) for op in ("all_gather", "reduce_scatter")}
    assert all(ops[(r, "reduce_scatter")]["count"] == STEPS * 3 and ops[(r, "reduce_scatter")]["phase"] == "backward"
               for r in range(RANKS))
