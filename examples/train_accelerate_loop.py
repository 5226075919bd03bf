"""A hand-written accelerate training loop logged with ``TrainingLogger``.

    accelerate launch --num_processes 2 --multi_gpu examples/train_accelerate_loop.py --steps 40

A small regression MLP on synthetic data, so it runs anywhere; the logging lines are the
ones to copy into your own loop. ``--losses-out FILE`` writes each rank's losses (used by
the tests to check the logs against what the loop saw).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--log-dir", default="logs")
    p.add_argument("--steps", type=int, default=40)
    p.add_argument("--batch-size", type=int, default=16, help="per device")
    p.add_argument("--grad-accum", type=int, default=1)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--lr", type=float, default=1e-2)
    p.add_argument("--losses-out", default=None)
    p.add_argument("--verbosity", default="high", choices=["low", "medium", "high", "ultra"])
    p.add_argument("--log-setting", action="append", default=[], metavar="NAME=VALUE",
                   help="a LogSettings field, e.g. comm_log_interval=5 (repeatable)")
    p.add_argument("--bucket-cap-mb", type=float, default=None, help="DDP gradient bucket size (more buckets)")
    # fault injection, to see what logkit reports when a run goes wrong
    p.add_argument("--inject-nan-at", type=int, default=None, help="make the loss NaN at this step")
    p.add_argument("--fail-at", type=int, default=None, help="raise an exception at this step")
    p.add_argument("--sleep", type=float, default=0.0, help="extra seconds per step (a slower run)")
    p.add_argument("--slow-rank", type=int, default=None, help="the rank the injections below apply to")
    p.add_argument("--slow-data", type=float, default=0.0, help="extra seconds of data loading per step on --slow-rank")
    p.add_argument("--slow-compute", type=float, default=0.0,
                   help="extra seconds of real compute (matrix products) in each forward on --slow-rank")
    p.add_argument("--slow-backward", type=float, default=0.0,
                   help="extra seconds of real compute (matrix products) in each backward on --slow-rank")
    p.add_argument("--hang-at", type=int, default=None,
                   help="at this step --slow-rank stops before its gradient sync (the others wait in it)")
    p.add_argument("--pg-timeout", type=float, default=None, help="process-group timeout, seconds")
    args = p.parse_args(argv)

    import torch
    from accelerate import Accelerator
    from torch.utils.data import DataLoader, TensorDataset

    from trainer_hooks import TrainingLogger

    torch.set_num_threads(1)
    torch.manual_seed(0)
    handlers = []
    if args.pg_timeout is not None:
        from datetime import timedelta

        from accelerate.utils import InitProcessGroupKwargs

        handlers.append(InitProcessGroupKwargs(timeout=timedelta(seconds=args.pg_timeout)))
    if args.bucket_cap_mb is not None:
        from accelerate.utils import DistributedDataParallelKwargs

        handlers.append(DistributedDataParallelKwargs(bucket_cap_mb=args.bucket_cap_mb))
    accelerator = Accelerator(gradient_accumulation_steps=args.grad_accum, cpu=not torch.cuda.is_available(),
                              kwargs_handlers=handlers)
    n = args.steps * args.batch_size * args.grad_accum * accelerator.num_processes
    x = torch.randn(n, 32)
    y = (x @ torch.randn(32, 1)).tanh() + 0.05 * torch.randn(n, 1)
    loader = DataLoader(TensorDataset(x, y), batch_size=args.batch_size, shuffle=False)
    model = torch.nn.Sequential(torch.nn.Linear(32, args.hidden), torch.nn.ReLU(), torch.nn.Linear(args.hidden, 1))
    optimizer = torch.optim.AdamW(model.parameters(), lr=args.lr)
    model, optimizer, loader = accelerator.prepare(model, optimizer, loader)

    slow = accelerator.process_index == args.slow_rank
    losses = []
    with TrainingLogger(args.log_dir, args.verbosity, accelerator=accelerator, model=model,
                        per_device_batch_size=args.batch_size, max_steps=args.steps,
                        model_name="mlp-regression", **parse_settings(args.log_setting)) as tlog:
        batches = iter(loader)
        for n in range(1, args.steps + 1):
            if n == args.fail_at:
                raise RuntimeError(f"injected failure at step {n}")
            # the step's first batch is read before the step starts (the time between two steps is its
            # data time); with accumulation the others are read inside it, as a loop over the loader does
            first = load(batches, args.slow_data if slow else 0.0)
            with tlog.step() as step:  # one optimizer step (all its accumulation micro-batches)
                for k in range(args.grad_accum):
                    xb, yb = first if k == 0 else load(batches, args.slow_data if slow else 0.0)
                    with accelerator.accumulate(model):
                        out = model(xb)
                        if slow and args.slow_compute:
                            out = out + busy(args.slow_compute)
                        if slow and args.slow_backward:
                            out = slow_backward(out, args.slow_backward)
                        loss = torch.nn.functional.mse_loss(out, yb)
                        if slow and n == args.hang_at:
                            time.sleep(3600)  # never reaches backward: the others wait in the gradient sync
                        if n == args.inject_nan_at:
                            loss = loss * float("nan")
                        accelerator.backward(loss)
                        tlog.micro_batch_end()  # a batch_complete record at ultra
                        if accelerator.sync_gradients:
                            tlog.check_gradients(loss)  # NaN/Inf report before the optimizer uses them
                        grad_norm = accelerator.clip_grad_norm_(model.parameters(), 1.0)
                        optimizer.step()
                        optimizer.zero_grad()
                if args.sleep:
                    time.sleep(args.sleep)
                value = loss.item()
                losses.append(value)
                step.log(loss=value, learning_rate=optimizer.param_groups[0]["lr"], grad_norm=float(grad_norm))

    if args.losses_out:
        path = f"{args.losses_out}.rank{accelerator.process_index}.json"
        with open(path, "w") as f:
            json.dump({"losses": losses, "session_dir": str(tlog.session_dir),
                       "param_bytes": sum(p.numel() * p.element_size() for p in model.parameters())}, f)
    if accelerator.is_main_process:
        print(f"logkit session: {tlog.session_dir}")
    # Release the prepared model (its DDP reducer holds gloo work) and tear the process group down
    # while the interpreter is whole: left to interpreter exit, gloo aborts in ~1 run of 5 on CPU.
    accelerator.free_memory()
    accelerator.end_training()
    return 0


def load(batches, delay: float):
    """The next batch; ``delay`` seconds of (injected) slow data loading first."""
    if delay:
        time.sleep(delay)
    return next(batches)


def busy(seconds: float):
    """``seconds`` of real compute (products of 256 x 256 matrices), as a zero to add to the output."""
    import torch

    a = torch.randn(256, 256)
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        a = torch.tanh(a @ a)
    return a.sum() * 0.0


def slow_backward(out, seconds: float):
    """``out`` unchanged, through an autograd function whose backward first spends ``seconds`` in
    real compute (``busy``): a rank whose backward pass is slower, before any gradient is ready."""
    import torch

    class SpinInBackward(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x.view_as(x)

        @staticmethod
        def backward(ctx, grad):
            return grad + busy(seconds)

    return SpinInBackward.apply(out)


def parse_settings(items: list[str]) -> dict:
    """``NAME=VALUE`` pairs into LogSettings keyword arguments (ints, floats, true/false, text)."""
    out = {}
    for item in items:
        name, _, text = item.partition("=")
        value: object = text
        if text.lower() in ("true", "false"):
            value = text.lower() == "true"
        else:
            for kind in (int, float):
                try:
                    value = kind(text)
                    break
                except ValueError:
                    pass
        out[name.strip()] = value
    return out


if __name__ == "__main__":
    os.environ.setdefault("OMP_NUM_THREADS", "1")
    sys.exit(main())
