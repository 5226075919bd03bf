"""A hand-written accelerate loop (DDP, ``TrainingLogger``) where a rank works alone between two steps:

    accelerate launch --multi_gpu --num_processes 2 tests/support/solo_train.py --log-dir LOGS
        --phase save --after 5 --seconds 1.5 [--on-all] [--unrecorded] [--hold S] [--pg-timeout S --stall-min-s S]

After step ``--after`` rank 0 (every rank with ``--on-all``) sleeps ``--seconds`` inside
``tlog.phase(PHASE)`` (outside any phase with ``--unrecorded``: a gap no record names); the other ranks go
on to the next step and wait for it in the gradient sync. ``--pg-timeout`` with a sleep longer than it:
the others' all-reduce times out (a hang inside the phase). FACTS (``--facts``, per rank) receives the
sleep's own duration as the loop measured it. ``--hold`` S: rank 0 then sleeps S more outside any phase
(late at the next step by S even when every rank does the phase).
"""

from __future__ import annotations

import argparse
import json
import time
from datetime import timedelta


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--log-dir", required=True)
    p.add_argument("--steps", type=int, default=12)
    p.add_argument("--phase", default="save")
    p.add_argument("--after", type=int, default=5)
    p.add_argument("--seconds", type=float, default=1.5)
    p.add_argument("--on-all", action="store_true", help="every rank does the phase, not rank 0 alone")
    p.add_argument("--unrecorded", action="store_true", help="rank 0 sleeps outside any phase")
    p.add_argument("--hold", type=float, default=0.0, help="rank 0 sleeps this much more, outside any phase")
    p.add_argument("--step-sleep", type=float, default=0.03, help="seconds of every step on every rank")
    p.add_argument("--pg-timeout", type=float, default=None)
    p.add_argument("--stall-min-s", type=float, default=None)
    p.add_argument("--facts", default=None)
    args = p.parse_args(argv)

    import torch
    from accelerate import Accelerator
    from accelerate.utils import InitProcessGroupKwargs

    from trainer_hooks import TrainingLogger

    torch.set_num_threads(1)
    torch.manual_seed(0)
    handlers = [InitProcessGroupKwargs(timeout=timedelta(seconds=args.pg_timeout))] if args.pg_timeout else []
    accelerator = Accelerator(cpu=True, kwargs_handlers=handlers)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    model, optimizer = accelerator.prepare(model, optimizer)
    rank = accelerator.process_index
    works = args.on_all or rank == 0
    settings = {"stall_min_s": args.stall_min_s} if args.stall_min_s is not None else {}
    slept = None
    with TrainingLogger(args.log_dir, accelerator=accelerator, model=model, per_device_batch_size=8,
                        max_steps=args.steps, end_verdict=False, gpu_snapshot_interval=0, **settings) as tlog:
        for n in range(1, args.steps + 1):
            x, y = torch.randn(8, 32), torch.randn(8, 1)
            with tlog.step() as step:
                time.sleep(args.step_sleep)
                loss = torch.nn.functional.mse_loss(model(x), y)
                accelerator.backward(loss)
                optimizer.step()
                optimizer.zero_grad()
                step.log(loss=loss.item())
            if n == args.after and works:
                began = time.perf_counter()
                if args.unrecorded:
                    time.sleep(args.seconds)
                else:
                    with tlog.phase(args.phase):
                        time.sleep(args.seconds)
                slept = time.perf_counter() - began
                if rank == 0 and args.hold:
                    time.sleep(args.hold)
    if args.facts:
        with open(f"{args.facts}.rank{rank}.json", "w") as f:
            json.dump({"slept": slept, "session_dir": str(tlog.session_dir)}, f)
    accelerator.free_memory()
    accelerator.end_training()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
