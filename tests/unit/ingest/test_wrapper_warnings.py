"""What a data-parallel wrapper's own warnings and log records say of the run: a Python warning printed by
FSDP's file (``.../torch/distributed/fsdp/<file>.py:N: <Category>Warning: ...``) and a record of one of
torch's loggers (``[date] torch.distributed.fsdp._debug_utils: [WARNING] ...``, torch 2.1-2.2's header) say
FSDP ran; FSDP1's "switching to NO_SHARD since the world size is N" states the world size (not under
HYBRID_SHARD, whose "world size" is its shard group's). A real excerpt (tests/data/sharded_strategy/README.md)
and variations said to be made here; expected values read off the lines by eye."""

from __future__ import annotations

from tests.support.excerpts import load, reader

text = reader("sharded_strategy")
_FSDP1 = "/usr/local/lib/python3.10/dist-packages/torch/distributed/fsdp"
_CLAMP = "UserWarning: FSDP is switching to use `NO_SHARD` instead of ShardingStrategy.{} since the world size is 1."


def test_a_warning_from_fsdp1s_file_behind_rays_prefix_says_fsdp1(tmp_path):
    s = load(tmp_path, text("fsdp1_warning_ray_pytorch_149196.log"))
    # line 4: .../torch/distributed/fsdp/fully_sharded_data_parallel.py:690: FutureWarning: FSDP.state_dict_type() ...
    assert s.meta.strategy == "fsdp1" and s.meta.strategy_from.startswith("derived: a warning in FSDP1")
    assert s.meta.facts_source["strategy"].endswith(":4")
    assert s.meta.world_size is None  # the warning says nothing of the world size
    assert 4 not in set(s.diagnostics["line"].dropna())  # the warning line is read, not "not understood"


def test_fsdp1s_no_shard_warning_states_a_world_size_of_one(tmp_path):
    # variation: the real line 4 with FSDP1's clamp warning of torch/distributed/fsdp/_init_utils.py:440
    lines = text("fsdp1_warning_ray_pytorch_149196.log").splitlines(keepends=True)
    lines[3] = f"(WorkerDict pid=28537) {_FSDP1}/_init_utils.py:440: {_CLAMP.format('FULL_SHARD')}\n"
    s = load(tmp_path, "".join(lines))
    assert s.meta.world_size == 1 and s.meta.world_size_from.startswith("stated: FSDP: switching to NO_SHARD")
    assert s.meta.strategy == "fsdp1"


def test_hybrid_shards_world_size_is_its_shard_groups_not_the_jobs(tmp_path):
    # HYBRID_SHARD on a mesh whose shard dimension is 1 clamps too, on a job of 2 ranks (torchrun line 1)
    body = ("torchrun --nproc_per_node=2 test_mesh.py\n"
            f"{_FSDP1}/_init_utils.py:444: {_CLAMP.format('HYBRID_SHARD')}\n  warnings.warn(\n")
    s = load(tmp_path, body)
    assert s.meta.strategy == "fsdp1"
    assert s.meta.world_size != 1


def test_a_warning_from_code_that_is_no_wrapper_says_no_strategy(tmp_path):
    body = ("/opt/conda/lib/python3.10/site-packages/transformers/trainer.py:1520: FutureWarning: `evaluation_strategy`"
            " is deprecated\n")
    s = load(tmp_path, body)
    assert s.meta.strategy is None


def test_a_torch_logger_record_names_the_wrapper_that_logged_it(tmp_path):
    # torch 2.1-2.2's header "[date] <logger>: [LEVEL] message", as torch.distributed.run's banner of
    # pytorch/torchtune PR 417 prints it; the record's logger is a wrapper's (variations: FSDP1's, FSDP2's)
    banner = ("[2024-02-27 00:45:23,759] torch.distributed.run: [WARNING] Setting OMP_NUM_THREADS environment variable"
              " for each process to be 1 in default\n")
    fsdp1 = "[rank1]:[2024-02-27 00:46:20,703] torch.distributed.fsdp._debug_utils: [WARNING] FSDP model profiling\n"
    fsdp2 = "[2025-01-07 10:01:02,345] torch.distributed.fsdp.fully_shard: [WARNING] reshard_after_forward ...\n"
    s = load(tmp_path, banner)
    assert s.meta.strategy is None and not len(s.diagnostics)  # the banner is read; it says no strategy
    s = load(tmp_path, banner + fsdp1)
    assert s.meta.strategy == "fsdp1" and s.meta.facts_source["strategy"].endswith(":2")
    s = load(tmp_path, fsdp2)
    assert s.meta.strategy == "fsdp2"
