"""A process outside a process group is rank 0 of a world of 1, whatever its launcher says; what the
launcher said is kept. The environments are those real launches gave their second process (read off
``accelerate launch --use_fsdp --num_processes 2`` and ``torchrun --nproc_per_node 2`` on this kind of
machine: RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR/PORT, TORCHELASTIC_RUN_ID, ACCELERATE_*)."""

from __future__ import annotations

from unittest import mock

from trainer_hooks.distributed import launcher_facts, rank_info

ACCELERATE = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "127.0.0.1",
              "MASTER_PORT": "29612", "ACCELERATE_USE_FSDP": "true", "TORCHELASTIC_RUN_ID": "none",
              "GROUP_RANK": "0", "ROLE_RANK": "1", "ACCELERATE_DYNAMO_BACKEND": "NO"}
TORCHRUN = {k: v for k, v in ACCELERATE.items() if not k.startswith("ACCELERATE_")}


def test_the_launcher_is_named_from_its_environment():
    assert launcher_facts(ACCELERATE) == {"name": "accelerate launch", "world_size": 2, "rank": 1, "local_rank": 1,
                                          "master": "127.0.0.1:29612"}
    assert launcher_facts(TORCHRUN)["name"] == "torchrun"
    assert launcher_facts({"WORLD_SIZE": "1", "RANK": "0"}) is None  # one process: nothing to say
    assert launcher_facts({}) is None
    assert launcher_facts({"WORLD_SIZE": "two"}) is None  # not a count


def test_without_a_group_the_process_is_rank_0_of_1():
    with mock.patch.dict("os.environ", TORCHRUN):
        info = rank_info()
    assert (info.rank, info.world_size, info.local_rank, info.process_group) == (0, 1, 0, "none")
    assert info.launcher == {"name": "torchrun", "world_size": 2, "rank": 1, "local_rank": 1,
                             "master": "127.0.0.1:29612"}
