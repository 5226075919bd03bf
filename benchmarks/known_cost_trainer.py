"""A trainer whose every cost is known: what the forecast is validated against.

    accelerate launch --num_processes 3 --multi_gpu benchmarks/known_cost_trainer.py \
        --regime strong --grad-mb 16 --log-dir logs

Each step of each rank: a data wait of ``--data-per-sample`` s per sample of its batch (a sleep before
the step, as a DataLoader that keeps the loop waiting), forward and backward of ``--compute-per-sample``
s per sample (sleeps inside an autograd function: the time a GPU would compute, so ranks need no cores),
and DDP's real all-reduce (gloo) of one parameter of ``--grad-mb`` MB, timed by logkit's comm hook.
Strong regime: a global batch of ``--global-batch`` split over the ranks (per-rank compute and data
shrink as 1/n); weak: ``--per-rank-batch`` on every rank (they stay). Logged with ``TrainingLogger``.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

from benchmarks.scaling_regime import add_regime_args, rank_batch


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--log-dir", default="logs")
    add_regime_args(p, global_batch=12, per_rank_batch=4)
    p.add_argument("--compute-per-sample", type=float, default=0.02, help="seconds of forward+backward per sample")
    p.add_argument("--data-per-sample", type=float, default=0.004, help="seconds of data loading per sample")
    p.add_argument("--grad-mb", type=float, default=1.0, help="gradient size in MB (10^6 bytes, float32)")
    p.add_argument("--steps", type=int, default=30)
    args = p.parse_args(argv)

    import torch
    from accelerate import Accelerator

    from trainer_hooks import TrainingLogger

    torch.set_num_threads(1)
    accelerator = Accelerator(cpu=True)
    n = accelerator.num_processes
    batch = rank_batch(args, n)
    compute = args.compute_per_sample * batch
    model = _Known(int(args.grad_mb * 1e6 / 4), _sleepy(forward_s=compute / 3, backward_s=2 * compute / 3))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    model, optimizer = accelerator.prepare(model, optimizer)
    with TrainingLogger(args.log_dir, accelerator=accelerator, model=model, per_device_batch_size=batch,
                        max_steps=args.steps, model_name=f"known-cost-{args.regime}-{args.grad_mb:g}mb") as tlog:
        for _ in range(args.steps):
            time.sleep(args.data_per_sample * batch)  # the batch is read before the step starts
            with tlog.step() as step:
                loss = model()  # through DDP's forward: its reducer syncs the gradient in backward
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad(set_to_none=False)
                step.log(loss=float(loss))
    if accelerator.is_main_process:
        print(f"logkit session: {tlog.session_dir}")
    accelerator.free_memory()
    accelerator.end_training()
    return 0


def _known_module():
    import torch

    class Known(torch.nn.Module):
        """One parameter (the gradient DDP all-reduces) and a forward/backward of known sleeps."""

        def __init__(self, numel: int, sleepy) -> None:
            super().__init__()
            self.weights = torch.nn.Parameter(torch.zeros(numel))
            self.sleepy = sleepy

        def forward(self):
            return self.sleepy.apply(self.weights)

    return Known


def _Known(numel: int, sleepy):  # noqa: N802 (a class made where torch is imported)
    return _known_module()(numel, sleepy)


def _sleepy(forward_s: float, backward_s: float):
    """An autograd function that sleeps ``forward_s`` in forward and ``backward_s`` in backward, and gives
    its parameter a gradient of zeros (one buffer, reused: no per-step allocation to add noise)."""
    import torch

    class Sleepy(torch.autograd.Function):
        zeros = None

        @staticmethod
        def forward(ctx, w):
            time.sleep(forward_s)
            if Sleepy.zeros is None or Sleepy.zeros.shape != w.shape:
                Sleepy.zeros = torch.zeros_like(w)
            return w[:1].sum() * 0.0

        @staticmethod
        def backward(ctx, grad):
            time.sleep(backward_s)
            return Sleepy.zeros

    return Sleepy


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
