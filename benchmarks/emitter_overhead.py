"""Overhead of the emitter on training, measured against the same training without it.

Part 1 (end to end): one process trains an MLP whose optimizer step takes about 50 ms on
one CPU thread; blocks of steps alternate between no logging and ``TrainingLogger`` at
``high`` (every step recorded, gradient check, resource sampling, trends), and the median
block times are compared. Target: at most 0.5% extra.

Part 2 (per record): the training-thread cost of the logger's calls, per record they
produce, with the writer thread doing its work concurrently. Target: at most 20 us.

    python benchmarks/emitter_overhead.py            # ~2 minutes
    python benchmarks/emitter_overhead.py --quick    # ~30 s, noisier
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("OMP_NUM_THREADS", "1")


def _model_for(step_ms: float):
    """An MLP and batch sized so that forward+backward+AdamW takes about ``step_ms``."""
    import torch

    torch.set_num_threads(1)
    torch.manual_seed(0)
    width = 256
    while True:
        model = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, width),
                                    torch.nn.ReLU(), torch.nn.Linear(width, 1))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        x, y = torch.randn(512, width), torch.randn(512, 1)
        t = _time_steps(model, opt, x, y, 5)
        if t >= step_ms / 1000 or width >= 4096:
            return model, opt, x, y
        width = int(width * 1.25)


def _train_step(model, opt, x, y):
    import torch

    loss = torch.nn.functional.mse_loss(model(x), y)
    loss.backward()
    return loss


def _time_steps(model, opt, x, y, n):
    t0 = time.perf_counter()
    for _ in range(n):
        _train_step(model, opt, x, y)
        opt.step()
        opt.zero_grad()
    return (time.perf_counter() - t0) / n


def end_to_end(step_ms: float, blocks: int, steps_per_block: int, verbosity: str, check_grads: bool) -> dict:
    from trainer_hooks import TrainingLogger

    model, opt, x, y = _model_for(step_ms)
    base_times, logged_times = [], []
    with tempfile.TemporaryDirectory() as tmp, \
            TrainingLogger(tmp, verbosity, model=model, per_device_batch_size=512,
                           max_steps=blocks * steps_per_block) as tlog:
        _time_steps(model, opt, x, y, 3)  # warm-up
        for _ in range(blocks):
            t0 = time.perf_counter()
            for _ in range(steps_per_block):
                loss = _train_step(model, opt, x, y)
                opt.step()
                opt.zero_grad()
                float(loss.detach())  # the same host read both variants do
            base_times.append((time.perf_counter() - t0) / steps_per_block)
            t0 = time.perf_counter()
            for _ in range(steps_per_block):
                with tlog.step() as step:
                    loss = _train_step(model, opt, x, y)
                    if check_grads:
                        tlog.check_gradients()
                    opt.step()
                    opt.zero_grad()
                    step.log(loss=float(loss.detach()), learning_rate=1e-3)
            logged_times.append((time.perf_counter() - t0) / steps_per_block)
        records = tlog.logger._steps_done
    base, logged = statistics.median(base_times), statistics.median(logged_times)
    return {"step_ms": base * 1e3, "logged_step_ms": logged * 1e3, "ratio": logged / base,
            "overhead_pct": (logged / base - 1) * 100, "steps_logged": records}


def per_record(n_steps: int, buckets: int) -> dict:
    """Training-thread time of step_begin + step_end with ``buckets`` comm records per step."""
    from trainer_hooks.emitter import SessionLogger

    with tempfile.TemporaryDirectory() as tmp:
        log = SessionLogger(tmp, "high", gpu_snapshot_interval=0)
        log.start(per_device_batch_size=8, max_steps=n_steps)
        log.comm.group_size = 2
        t_total = 0.0
        for step in range(1, n_steps + 1):
            now = time.perf_counter()
            log.comm.pending.extend((b, 25_000_000, now - 0.01, now) for b in range(buckets))
            t0 = time.perf_counter()
            log.step_begin()
            log.step_end(step, loss=1.0 / step, learning_rate=1e-4, grad_norm=0.5)
            t_total += time.perf_counter() - t0
        records = log._writer.records_written if log._writer else None
        log.end()
    per_step_records = 1 + buckets + 1 / log.settings.performance_log_steps
    return {"us_per_step_call": t_total / n_steps * 1e6,
            "us_per_record": t_total / n_steps / per_step_records * 1e6, "records_per_step": per_step_records,
            "written_before_end": records}


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--step-ms", type=float, default=50.0)
    p.add_argument("--verbosity", default="high")
    p.add_argument("--grad-check", action="store_true", help="also measure check_gradients() every step")
    args = p.parse_args(argv)
    blocks, per_block, n_records = (6, 10, 2000) if args.quick else (20, 10, 20000)

    rec = per_record(n_records, buckets=4)
    print(f"per record   : {rec['us_per_record']:.2f} us of training-thread time per record "
          f"({rec['us_per_step_call']:.1f} us per step for {rec['records_per_step']:.1f} records)  "
          f"target <= 20 us  -> {'OK' if rec['us_per_record'] <= 20 else 'ABOVE TARGET'}")
    e2e = end_to_end(args.step_ms, blocks, per_block, args.verbosity, check_grads=False)
    print(f"end to end   : step {e2e['step_ms']:.2f} ms without logging, {e2e['logged_step_ms']:.2f} ms with "
          f"TrainingLogger({args.verbosity!r}); ratio {e2e['ratio']:.4f} ({e2e['overhead_pct']:+.2f}%)  "
          f"target <= +0.5%  -> {'OK' if e2e['overhead_pct'] <= 0.5 else 'ABOVE TARGET'}")
    if args.grad_check:
        g = end_to_end(args.step_ms, blocks, per_block, args.verbosity, check_grads=True)
        print(f"grad check   : {g['logged_step_ms']:.2f} ms vs {g['step_ms']:.2f} ms with check_gradients() every step "
              f"({g['overhead_pct']:+.2f}%; opt-in, on at 'ultra')")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    sys.exit(main())
