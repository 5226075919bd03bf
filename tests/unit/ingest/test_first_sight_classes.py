"""Shapes of logs that were read when given by name but not found in a folder, or read short: transformers'
``***** train metrics *****`` block alone and its explicit log format with a two-word time stamp; a warning
FSDP's own code prints. Real excerpts (tests/data/first_sight_classes/README.md, and
tests/data/sharded_strategy/ for the FSDP warning) and variations said to be made here; expected values read
off the lines by eye."""

from __future__ import annotations

import logkit
from tests.support.excerpts import reader

text = reader("first_sight_classes")
strategy_text = reader("sharded_strategy")


def _folder(tmp_path, body: str, name: str = "train.log"):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / name).write_text(body, encoding="utf-8")
    return logkit.load_sessions(folder)


def test_a_train_metrics_block_alone_in_a_folder_is_a_run(tmp_path):
    found = _folder(tmp_path, text("train_metrics_block_llamafactory_10488.log"))
    assert len(found) == 1
    meta = found[0].meta
    # lines 3-4: train_loss 0.7228, train_runtime 0:36:58.55 = 36 * 60 + 58.55 s
    assert meta.train_loss == 0.7228 and meta.duration_s == 36 * 60 + 58.55
    assert meta.samples_per_second == 1.474  # line 5


def test_transformers_explicit_format_with_a_date_and_a_time_in_a_folder(tmp_path):
    # variation: one line in transformers' explicit format ([LEVEL|file:line] date time >> message, as
    # LLaMA-Factory switches it on) before nothing else of a run
    body = "[INFO|trainer.py:2519] 2025-11-26 12:43:54,296 >> Saving model checkpoint to saves/checkpoint-80\n"
    assert len(_folder(tmp_path, body)) == 1


def test_a_warning_from_fsdps_code_alone_in_a_folder_is_a_run(tmp_path):
    # the real Ray/verl excerpt: line 4 is a FutureWarning printed by torch/distributed/fsdp/fully_sharded_data_parallel.py
    found = _folder(tmp_path, strategy_text("fsdp1_warning_ray_pytorch_149196.log"))
    assert len(found) == 1 and found[0].meta.strategy == "fsdp1"


def test_fsdps_no_shard_warning_alone_in_a_folder_states_the_world_size(tmp_path):
    # variation: FSDP1's clamp warning (torch/distributed/fsdp/_init_utils.py) without Ray's prefix
    body = ("/opt/conda/lib/python3.11/site-packages/torch/distributed/fsdp/_init_utils.py:440: UserWarning: FSDP is"
            " switching to use `NO_SHARD` instead of ShardingStrategy.SHARD_GRAD_OP since the world size is 1.\n"
            "  warnings.warn(\n")
    found = _folder(tmp_path, body)
    assert len(found) == 1 and found[0].meta.world_size == 1 and found[0].meta.strategy == "fsdp1"


def test_a_warning_from_other_torch_distributed_code_is_no_run(tmp_path):
    # the real line of pytorch#95623: a deprecation warning of torch/distributed/_shard/, printed on import; it says
    # nothing of a run, so a folder of it alone holds no session
    assert _folder(tmp_path, text("torch_distributed_warning_pytorch_95623.log")) == []
