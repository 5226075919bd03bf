"""Where a 2-rank DDP run's CPU goes per step, thread by thread, with the loop helper (``TrainingLogger``)
at a verbosity against no logging at all: the method that would see an extra 3 ms per step.

Each run: ``torchrun --nproc_per_node 2`` of this file in worker mode (gloo, CPU), an MLP whose step
takes about ``--step-ms``, DDP; after ``--warmup`` steps every rank reads the CPU time of each of its
threads (``/proc/self/task/<tid>/schedstat``; named by ``threading`` where Python made the thread, by the
kernel's ``comm`` otherwise: gloo's and torch's own threads) and its process' ``getrusage``, then again
after ``--steps`` steps. Runs alternate off / on (``--pairs`` pairs, the order swapped each pair); per
thread group the CPU per step, median over runs and ranks, on minus off. ``--profile`` also runs
cProfile over the training thread of rank 0 in one logged run and prints where its own time goes.

    python benchmarks/ddp_thread_cpu.py                  # 3 pairs at high, ~2 minutes
    python benchmarks/ddp_thread_cpu.py --verbosity low --pairs 2
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from benchmarks.trainer_overhead import thread_cpu_s

ROOT = Path(__file__).resolve().parent.parent


def _threads() -> dict[int, str]:
    """Native id -> name: Python's thread names, the kernel's for the others (digits folded: gloo's
    pool threads are one group)."""
    named = {t.native_id: t.name for t in threading.enumerate() if t.native_id}
    out = {}
    for task in Path("/proc/self/task").iterdir():
        tid = int(task.name)
        if tid in named:
            out[tid] = re.sub(r"\d+", "N", named[tid]) if named[tid] != "MainThread" else "MainThread (training)"
        else:
            try:
                out[tid] = "native:" + re.sub(r"\d+", "N", (task / "comm").read_text().strip())
            except OSError:
                continue
    return out


def _snapshot() -> tuple[dict, float]:
    names = _threads()
    by_tid = {tid: (name, thread_cpu_s(tid)) for tid, name in names.items()}
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return by_tid, ru.ru_utime + ru.ru_stime


def worker(args) -> None:
    """One rank of the DDP run (see module doc); writes its figures to ``args.out``."""
    import torch
    import torch.distributed as dist
    from torch import nn
    from torch.nn.parallel import DistributedDataParallel as DDP

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    width = args.width
    model = DDP(nn.Sequential(nn.Linear(width, width), nn.ReLU(), nn.Linear(width, width), nn.ReLU(),
                              nn.Linear(width, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    x, y = torch.randn(args.batch, width), torch.randn(args.batch, 1)
    total = args.warmup + args.steps

    def step(tlog=None):
        if tlog is None:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            float(loss.detach())
            return
        with tlog.step() as s:
            loss = nn.functional.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            s.log(loss=float(loss.detach()), learning_rate=1e-3)

    prof = None
    if args.verbosity == "off":
        for _ in range(args.warmup):
            step()
        dist.barrier()
        snap0, t0 = _snapshot(), time.perf_counter()
        for _ in range(args.steps):
            step()
        snap1, wall = _snapshot(), time.perf_counter() - t0
    else:
        from trainer_hooks import TrainingLogger

        with TrainingLogger(args.log_dir, args.verbosity, model=model, per_device_batch_size=args.batch,
                            max_steps=total, end_verdict=False) as tlog:
            for _ in range(args.warmup):
                step(tlog)
            dist.barrier()
            if args.profile and rank == 0:
                import cProfile

                prof = cProfile.Profile()
                prof.enable()
            snap0, t0 = _snapshot(), time.perf_counter()
            for _ in range(args.steps):
                step(tlog)
            snap1, wall = _snapshot(), time.perf_counter() - t0
            if prof is not None:
                prof.disable()
    groups: dict[str, float] = {}
    for tid, (name, c1) in snap1[0].items():
        c0 = snap0[0].get(tid, (name, 0.0))[1] if tid in snap0[0] else 0.0  # a thread born inside: all of it
        if c1 is not None and c0 is not None:
            groups[name] = groups.get(name, 0.0) + (c1 - c0) / args.steps
    doc = {"rank": rank, "verbosity": args.verbosity, "threads_s": groups,
           "process_s": (snap1[1] - snap0[1]) / args.steps, "wall_s": wall / args.steps}
    Path(f"{args.out}.rank{rank}.json").write_text(json.dumps(doc))
    if prof is not None:
        import io
        import pstats

        s = io.StringIO()
        pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(18)
        Path(f"{args.out}.profile.txt").write_text(s.getvalue())
    dist.destroy_process_group()


def run(verbosity: str, args, tmp: Path, i: int, profile: bool = False) -> list[dict]:
    out = tmp / f"run{i}"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "", "PYTHONPATH": str(ROOT)}
    cmd = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_port", str(29600 + i),
           __file__, "--worker", "--verbosity", verbosity, "--out", str(out), "--log-dir", str(tmp / f"logs{i}"),
           "--steps", str(args.steps), "--warmup", str(args.warmup), "--width", str(args.width),
           "--batch", str(args.batch)] + (["--profile"] if profile else [])
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(proc.stderr[-3000:])
    docs = [json.loads(Path(f"{out}.rank{r}.json").read_text()) for r in range(2)]
    if profile:
        docs[0]["profile"] = Path(f"{out}.profile.txt").read_text()
    return docs


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--out", help=argparse.SUPPRESS)
    p.add_argument("--log-dir", default="logs", help=argparse.SUPPRESS)
    p.add_argument("--verbosity", default="high")
    p.add_argument("--pairs", type=int, default=3)
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=10)
    p.add_argument("--width", type=int, default=768, help="the MLP's width (768 x batch 256: ~50 ms a step here)")
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--profile", action="store_true")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.worker:
        worker(args)
        return 0
    runs: dict[str, list[dict]] = {"off": [], args.verbosity: []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(args.pairs):
            order = ("off", args.verbosity) if i % 2 == 0 else (args.verbosity, "off")
            for j, v in enumerate(order):
                runs[v] += run(v, args, Path(tmp), 2 * i + j)
        profile = run(args.verbosity, args, Path(tmp), 99, profile=True)[0]["profile"] if args.profile else None
    names = sorted({n for docs in runs.values() for d in docs for n in d["threads_s"]})
    table = {}
    for n in names:
        off = statistics.median(d["threads_s"].get(n, 0.0) for d in runs["off"])
        on = statistics.median(d["threads_s"].get(n, 0.0) for d in runs[args.verbosity])
        table[n] = {"off_us": off * 1e6, "on_us": on * 1e6, "diff_us": (on - off) * 1e6}
    proc_off = [d["process_s"] for d in runs["off"]]
    proc_on = [d["process_s"] for d in runs[args.verbosity]]
    wall_off = statistics.median(d["wall_s"] for d in runs["off"])
    result = {"verbosity": args.verbosity, "pairs": args.pairs, "steps": args.steps, "threads": table,
              "process_off_us": [v * 1e6 for v in proc_off], "process_on_us": [v * 1e6 for v in proc_on],
              "step_off_ms": wall_off * 1e3}
    print(f"2 ranks, DDP on gloo, {args.steps} steps a run after {args.warmup}, {args.pairs} pairs off/"
          f"{args.verbosity} alternated; step {wall_off * 1e3:.1f} ms without logging (median)")
    print(f"{'thread group':<34}{'off us/step':>12}{'on us/step':>12}{'on - off':>10}")
    for n, r in sorted(table.items(), key=lambda kv: -abs(kv[1]["diff_us"])):
        print(f"{n:<34}{r['off_us']:>12.0f}{r['on_us']:>12.0f}{r['diff_us']:>+10.0f}")
    print(f"process CPU per step (getrusage), each rank of each run: off "
          f"{', '.join(f'{v * 1e3:.2f}' for v in proc_off)} ms; {args.verbosity} "
          f"{', '.join(f'{v * 1e3:.2f}' for v in proc_on)} ms; medians {statistics.median(proc_off) * 1e3:.2f} / "
          f"{statistics.median(proc_on) * 1e3:.2f} ms")
    if profile:
        print("cProfile of rank 0's training thread, logged run (tottime order):")
        print("\n".join(ln for ln in profile.splitlines()[:40] if ln.strip()))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    sys.exit(main())
