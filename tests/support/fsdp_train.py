"""A small MLP trained by ranks that shard it (FSDP2 ``fully_shard``) or that never form a group, logged
with ``TrainingLogger``: what the sharded-run and lone-process tests launch (torchrun, or accelerate).

    torchrun --nproc_per_node 2 tests/support/fsdp_train.py --log-dir logs --mode fsdp2 --steps 30
    --mode fsdp2     init_process_group("gloo"), each Linear and the whole model fully_shard-ed
    --mode fsdp1     init_process_group("gloo"), each Linear and the whole model wrapped in
                     FullyShardedDataParallel (--use-orig-params: its use_orig_params)
    --mode alone     no init_process_group: each process trains alone
    --mode accelerate  an Accelerator made from the launcher's settings (accelerate launch --use_fsdp)
--slow-rank R --slow-ms M: rank R (the launcher's RANK) sleeps M ms in its data loading every step
(--slow-backward-ms M: in the backward of its last Linear);
--hang-at N: at step N rank R stops in its forward, before its first collective (--pg-timeout S: the
others' collectives then time out after S s; --stall-min-s: the logger's stall watch);
--nan-shard-rank R: at step 1 a NaN in rank R's shard of the first Linear's weight gradient;
--sleep S: every rank sleeps S s after its optimizer step (a busy 2-core host then varies the steps
by a few ms, not tens).
"""

from __future__ import annotations

import argparse
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch import nn

from trainer_hooks import TrainingLogger

# the MLP's layer widths: the tests compute their byte oracles from the same numbers
WIDTHS = (37, 129, 65, 3)


def make_model(widths=WIDTHS) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths[:-1], widths[1:], strict=True)):
        layers.append(nn.Linear(a, b))
        if i < len(widths) - 2:
            layers.append(nn.ReLU())
    return nn.Sequential(*layers)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--log-dir", required=True)
    p.add_argument("--mode", choices=("fsdp2", "fsdp1", "alone", "accelerate"), default="fsdp2")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--slow-backward-ms", type=float, default=0.0, help="rank --slow-rank's backward is slower")
    p.add_argument("--hang-at", type=int, default=None,
                   help="at this step --slow-rank stops in its forward, before its first all-gather")
    p.add_argument("--pg-timeout", type=float, default=None, help="process-group timeout, seconds")
    p.add_argument("--stall-min-s", type=float, default=None, help="the logger's stall watch (stall_min_s)")
    p.add_argument("--use-orig-params", action="store_true", help="fsdp1: use_orig_params=True")
    p.add_argument("--sleep", type=float, default=0.0, help="seconds every rank sleeps after its optimizer step")
    p.add_argument("--verbosity", default="high")
    p.add_argument("--check-gradients", action="store_true", help="tlog.check_gradients(loss) before each step")
    p.add_argument("--nan-shard-rank", type=int, default=-1,
                   help="fsdp2: at step 1 this rank's shard of the first Linear's weight gradient gets a NaN")
    args = p.parse_args()
    torch.manual_seed(0)
    model, accelerator = make_model(), None
    timeout = {"timeout": timedelta(seconds=args.pg_timeout)} if args.pg_timeout else {}
    settings = {"stall_min_s": args.stall_min_s} if args.stall_min_s is not None else {}
    if args.mode == "fsdp2":
        from torch.distributed.fsdp import fully_shard

        dist.init_process_group("gloo", **timeout)
        for layer in model:
            if isinstance(layer, nn.Linear):
                fully_shard(layer)
        fully_shard(model)
    elif args.mode == "fsdp1":
        from torch.distributed.fsdp import FullyShardedDataParallel

        dist.init_process_group("gloo", **timeout)
        # device_id=None fails here ("FSDP needs a non-CPU accelerator device"): the CPU is named.
        # each Linear a unit of its own, then the root (which holds no parameter of its own), as fsdp2 does
        for i, layer in enumerate(model):
            if isinstance(layer, nn.Linear):
                model[i] = FullyShardedDataParallel(layer, device_id=torch.device("cpu"), use_orig_params=args.use_orig_params)
        model = FullyShardedDataParallel(model, device_id=torch.device("cpu"), use_orig_params=args.use_orig_params)
    elif args.mode == "accelerate":
        from accelerate import Accelerator

        accelerator = Accelerator()
    if args.slow_backward_ms and int(os.environ.get("RANK", 0)) == args.slow_rank:
        last = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
        last.register_full_backward_hook(lambda *_: time.sleep(args.slow_backward_ms / 1000))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    if accelerator is not None:
        model, optimizer = accelerator.prepare(model, optimizer)
    launcher_rank = int(os.environ.get("RANK", 0))
    with TrainingLogger(args.log_dir, args.verbosity, model=model, accelerator=accelerator, per_device_batch_size=args.batch,
                        max_steps=args.steps, end_verdict=False, gpu_snapshot_interval=0, **settings) as tlog:
        for n in range(1, args.steps + 1):
            if launcher_rank == args.slow_rank:
                time.sleep(args.slow_ms / 1000)  # this rank's data loading is slower
            x = torch.randn(args.batch, WIDTHS[0])
            with tlog.step() as step:
                if launcher_rank == args.slow_rank and n == args.hang_at:
                    time.sleep(3600)  # this rank stops in its forward: the others wait in their first all-gather
                loss = model(x).pow(2).mean()
                loss.backward()
                if n == 1 and launcher_rank == args.nan_shard_rank:  # in this rank's shard only
                    with torch.no_grad():
                        model[0].weight.grad.to_local().view(-1)[0] = float("nan")
                if args.check_gradients:
                    tlog.check_gradients(loss)
                optimizer.step()
                optimizer.zero_grad()
                time.sleep(args.sleep)  # host work of a fixed length: steps of a known floor
                step.log(loss=loss.item(), learning_rate=0.01)
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
