"""The small MLP of ``fsdp_train`` trained by DeepSpeed ZeRO (stage 1, 2 or 3) on gloo CPU ranks, logged with
``TrainingLogger``: what the DeepSpeed tests launch (deepspeed must be importable; ``DS_ACCELERATOR=cpu``).

    DS_ACCELERATOR=cpu torchrun --nproc_per_node 2 tests/support/deepspeed_train.py --log-dir logs --stage 3
--slow-rank R --slow-ms M: rank R sleeps M ms in its data loading every step; --sleep S: every rank sleeps S s
after its optimizer step; --via accelerate: the engine built by accelerate's DeepSpeed plugin
(``Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=...))``, as ``accelerate launch --use_deepspeed``
sets it up) and logged with ``TrainingLogger(accelerator=...)``, instead of ``deepspeed.initialize``. The client optimizer is torch's AdamW (DeepSpeed's own fused ones need its C++ ops,
which are not built here: ``zero_allow_untested_optimizer``).
"""

from __future__ import annotations

import argparse
import os
import time

import deepspeed
import torch
import torch.distributed as dist

from tests.support.fsdp_train import WIDTHS, make_model
from trainer_hooks import TrainingLogger


def config(stage: int, batch: int) -> dict:
    return {"train_micro_batch_size_per_gpu": batch, "gradient_accumulation_steps": 1, "steps_per_print": 10**6,
            # stage 3: no parameter persists gathered (the default keeps ones under 1e5 elements): every
            # step gathers each module in forward and backward
            "zero_optimization": {"stage": stage, "stage3_param_persistence_threshold": 0},
            "zero_allow_untested_optimizer": True}


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--log-dir", required=True)
    p.add_argument("--stage", type=int, choices=(1, 2, 3), default=3)
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--slow-rank", type=int, default=-1)
    p.add_argument("--slow-ms", type=float, default=0.0)
    p.add_argument("--sleep", type=float, default=0.0)
    p.add_argument("--via", choices=("deepspeed", "accelerate"), default="deepspeed")
    args = p.parse_args()
    deepspeed.init_distributed(dist_backend="gloo")
    torch.manual_seed(0)
    model = make_model()
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.01)
    accelerator = None
    if args.via == "accelerate":
        from accelerate import Accelerator
        from accelerate.utils import DeepSpeedPlugin

        accelerator = Accelerator(deepspeed_plugin=DeepSpeedPlugin(hf_ds_config=config(args.stage, args.batch)))
        engine, optimizer = accelerator.prepare(model, optimizer)
    else:
        engine, _, _, _ = deepspeed.initialize(model=model, optimizer=optimizer, config=config(args.stage, args.batch))
    rank = int(os.environ.get("RANK", 0))
    with TrainingLogger(args.log_dir, "high", model=engine, accelerator=accelerator, per_device_batch_size=args.batch,
                        max_steps=args.steps, end_verdict=False, gpu_snapshot_interval=0) as tlog:
        for _ in range(args.steps):
            if rank == args.slow_rank:
                time.sleep(args.slow_ms / 1000)  # this rank's data loading is slower
            x = torch.randn(args.batch, WIDTHS[0])
            with tlog.step() as step:
                loss = engine(x).pow(2).mean()
                if accelerator is not None:  # accelerate's engine wrapper steps the engine in backward
                    accelerator.backward(loss)
                    optimizer.step()
                    optimizer.zero_grad()
                else:
                    engine.backward(loss)
                    engine.step()
                time.sleep(args.sleep)
                step.log(loss=loss.item(), learning_rate=0.01)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
