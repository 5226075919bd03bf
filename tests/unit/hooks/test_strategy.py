"""How the model is wrapped, as ``session_start`` says it: each real wrapper of torch on a 1-rank gloo
group (in a process of its own: the group must not outlive the test), seen from the wrapper and from the
module it wraps (what the Trainer hands a callback); the facts are those the test wrapped it with."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

from tests.support.launch import REPO, free_port

SCRIPT = textwrap.dedent("""
    import json, os, sys
    sys.path.insert(0, {repo!r})
    import torch, torch.distributed as dist
    from torch import nn
    from trainer_hooks.strategy import describe

    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT={port!r}, RANK="0", WORLD_SIZE="1")
    dist.init_process_group("gloo")
    out = {{"plain": describe(nn.Linear(4, 4))}}
    inner = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    ddp = nn.parallel.DistributedDataParallel(inner, bucket_cap_mb=7)
    out["ddp"], out["ddp_inner"] = describe(ddp), describe(inner)
    from torch.distributed.fsdp import FullyShardedDataParallel, ShardingStrategy
    inner1 = nn.Sequential(nn.Linear(4, 8))
    fsdp1 = FullyShardedDataParallel(inner1, sharding_strategy=ShardingStrategy.SHARD_GRAD_OP,
                                     device_id=torch.device("cpu"))
    out["fsdp1"], out["fsdp1_inner"] = describe(fsdp1), describe(inner1)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    model2 = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2))
    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
    fully_shard(model2[0], reshard_after_forward=False, mp_policy=mp)
    fully_shard(model2, mp_policy=mp)
    out["fsdp2"] = describe(model2)
    print(json.dumps(out))
    dist.destroy_process_group()
""")


def test_each_wrapper_is_named_with_its_facts():
    proc = subprocess.run([sys.executable, "-c", SCRIPT.format(repo=str(REPO), port=str(free_port()))],
                          capture_output=True, text=True, timeout=120, env={"OMP_NUM_THREADS": "1", "PATH": ""})
    assert proc.returncode == 0, proc.stderr[-3000:]
    got = json.loads(proc.stdout.strip().splitlines()[-1])
    assert got["plain"] == ["none", None]
    for key in ("ddp", "ddp_inner"):  # the wrapper, and the module it wraps found through the wrapper
        name, facts = got[key]
        assert name == "ddp" and facts["group_size"] == 1 and facts["bucket_cap_mb"] == 7.0
    for key in ("fsdp1", "fsdp1_inner"):
        name, facts = got[key]
        # asked SHARD_GRAD_OP; torch runs a 1-rank group as NO_SHARD (fsdp/_init_utils.py: world_size == 1),
        # and the facts are what it runs
        assert name == "fsdp1" and facts["sharding_strategy"] == "NO_SHARD" and facts["shard_group_size"] == 1
        assert facts["reshard_after_forward"] is False
    name, facts = got["fsdp2"]
    assert name == "fsdp2"
    # two units: the first Linear (not resharded after forward) and the root holding the second Linear
    assert (facts["units"], facts["resharded_units"], facts["shard_group_size"]) == (2, 1, 1)
    assert (facts["param_dtype"], facts["reduce_dtype"], facts["offload"]) == ("bfloat16", "float32", "none")
