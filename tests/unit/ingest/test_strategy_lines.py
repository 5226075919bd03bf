"""How a foreign log says the model was sharded: accelerate's printed FSDP plugin and a traceback's frames in
FSDP1's, FSDP2's or DeepSpeed ZeRO-3's code, on real excerpts (tests/data/sharded_strategy/README.md) and
variations of them (a launcher's rank prefix, a Windows path); and the words the reports take from it.
Expected values are read off the excerpts by eye."""

from __future__ import annotations

import pytest

from logkit.analysis.kernels.strategy import op_role, strategy_words
from tests.support.excerpts import load, reader

text = reader("sharded_strategy")


def test_accelerates_printed_fsdp_plugin_states_fsdp_with_its_facts(tmp_path):
    s = load(tmp_path, text("accelerate_fsdp_plugin_1794.log"))
    m = s.meta
    assert m.strategy == "fsdp" and m.strategy_from.startswith("stated: FullyShardedDataParallelPlugin")
    # ShardingStrategy.FULL_SHARD, offload_params=True, param_dtype / reduce_dtype torch.bfloat16 on line 1
    assert m.strategy_facts == {"sharding_strategy": "FULL_SHARD", "reshard_after_forward": True, "offload": "cpu",
                                "param_dtype": "bfloat16", "reduce_dtype": "bfloat16"}
    assert m.facts_source["strategy"].endswith(":1") and m.framework == "accelerate"
    words = strategy_words(m.strategy, m.strategy_facts)
    assert words.startswith("FSDP: FULL_SHARD") and "offloaded to cpu" in words and "parameters in bfloat16" in words


def test_accelerate_envs_fsdp_config_by_number_and_version(tmp_path):
    """accelerate numbers the sharding strategies from 1 (2: SHARD_GRAD_OP); fsdp_version 2 says FSDP2."""
    # the real `accelerate env` of tests/data/frameworks/accelerate_env_1473.txt, its config turned to FSDP
    env = reader("frameworks")("accelerate_env_1473.txt").replace(
        "- distributed_type: MULTI_GPU", "- distributed_type: FSDP\n        - fsdp_config: {'fsdp_offload_params': "
                                          "False, 'fsdp_sharding_strategy': 2, 'fsdp_version': 2}")
    m = load(tmp_path, env).meta
    # distributed_type FSDP is stated first (the strategy, its line); the config's version refines the words
    assert m.strategy == "fsdp" and m.strategy_from.startswith("stated: distributed_type: FSDP")
    assert m.strategy_facts == {"sharding_strategy": "SHARD_GRAD_OP", "reshard_after_forward": False, "offload": "none",
                                "fsdp_version": 2}
    assert strategy_words(m.strategy, m.strategy_facts).startswith("FSDP2 (fully_shard): SHARD_GRAD_OP")


@pytest.mark.parametrize("name, strategy, stage, line", [
    ("fsdp1_frames_litgpt_640.log", "fsdp1", None, 1),  # fully_sharded_data_parallel.py, the first frame
    ("fsdp2_traceback_rl2_7.log", "fsdp2", None, 12),  # fsdp/_fully_shard/_fully_shard.py on line 12
    ("zero3_frames_deepspeed_1858.log", "deepspeed", 3, 1),  # deepspeed/runtime/zero/stage3.py
])
def test_a_frame_in_a_wrappers_code_says_the_strategy(tmp_path, name, strategy, stage, line):
    m = load(tmp_path, text(name)).meta
    assert (m.strategy, m.zero_stage) == (strategy, stage)
    assert m.strategy_from.startswith("derived: a traceback frame in") and m.facts_source["strategy"].endswith(f":{line}")


def test_frames_behind_a_rank_prefix_and_windows_paths(tmp_path):
    body = "".join(f"[rank1]: {ln}\n" for ln in text("fsdp2_traceback_rl2_7.log").splitlines())
    assert load(tmp_path, body, "ranked.log").meta.strategy == "fsdp2"
    win = text("fsdp1_frames_litgpt_640.log").replace("/", "\\")
    assert load(tmp_path, win, "win.log").meta.strategy == "fsdp1"


def test_a_stated_strategy_beats_a_frame(tmp_path):
    """accelerate's plugin line states fsdp; a later FSDP1 frame only derives it: the statement stays."""
    body = text("accelerate_fsdp_plugin_1794.log") + text("fsdp1_frames_litgpt_640.log")
    m = load(tmp_path, body).meta
    assert m.strategy == "fsdp" and m.strategy_from.startswith("stated:")


def test_each_op_has_its_role_in_its_strategy():
    assert "parameter shards" in op_role("fsdp2", "all_gather")
    assert "shard of them" in op_role("fsdp1", "reduce_scatter")
    assert "gradient bucket" in op_role("ddp", "gradient_sync") and "gradient bucket" in op_role("ddp", "allreduce")
    assert "ZeRO-3" in op_role("deepspeed", "_ALLGATHER_BASE", 3)
    assert op_role("ddp", "reduce_scatter") is None and op_role(None, "all_gather") is None
