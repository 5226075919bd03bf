"""What timing a collective costs on the calling thread, per call: torch.distributed's own call (bare), with
PyTorch's Flight Recorder on (``TORCH_FR_BUFFER_SIZE``), and with logkit's ``torch_distributed`` source
(``trainer_hooks.dist_timing``) wrapping it. A gloo process group of one on CPU (the same calls a sharded
run makes; a group of one keeps the peer's timing out of the figure), N blocking all-reduces of a small and
of a large tensor. The figure is the process's CPU time per call, the least over 20 rounds (the host may be
shared: the least is the round least disturbed); bare and wrapped rounds alternate in one process, the
Flight Recorder runs in a process of its own (torch reads it from the environment at init).

    python benchmarks/collective_timing_cost.py [--calls 20000]

Prints one line per mode and size: mean microseconds per call, and the extra over bare. Also says whether
this torch's Flight Recorder records gloo collectives and whether its entries carry a duration.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = r"""
import datetime, sys, time, torch, torch.distributed as dist
mode, calls, store = sys.argv[1], int(sys.argv[2]), sys.argv[3]
dist.init_process_group("gloo", init_method="file://" + store, rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
from trainer_hooks import dist_timing
timer = dist_timing.DistTimer()
out = []
for numel in (1, 1 << 20):
    t = torch.ones(numel)
    for _ in range(200):
        dist.all_reduce(t)
    best = {}
    for r in range(40):  # bare and wrapped rounds interleaved; the least CPU time of each (the host is shared)
        wrapped = mode == "torch_distributed" and r % 2 == 1
        if wrapped:
            done, why = dist_timing.install(timer)
            timer.step_begin()
        t0 = time.process_time()
        for _ in range(calls // 20):
            dist.all_reduce(t)
        spent = (time.process_time() - t0) / (calls // 20) * 1e6
        if wrapped:
            timer.pending.clear()  # what step_end's collect does, outside the timed loop
            dist_timing.uninstall(done)
        key = "torch_distributed" if wrapped else ("flight_recorder" if mode == "flight_recorder" else "bare")
        best[key] = min(best.get(key, spent), spent)
    out.extend(f"{key} {numel * 4} {us:.3f}" for key, us in best.items())
if mode == "flight_recorder":
    import pickle
    from torch._C import _distributed_c10d as c
    t0 = time.perf_counter()
    data = c._dump_fr_trace()  # what reading the ring in process costs: the whole ring pickled
    dump_ms = (time.perf_counter() - t0) * 1e3
    entries = pickle.loads(data)["entries"]
    last = entries[-1]
    out.append("fr_entries %d dump_ms=%.1f duration_ms=%r completed_ns=%r" % (len(entries), dump_ms,
               last.get("duration_ms"), last.get("time_discovered_completed_ns")))
print("|".join(out))
dist.destroy_process_group()
"""


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--calls", type=int, default=20000)
    args = p.parse_args()
    results: dict = {}
    for mode in ("torch_distributed", "flight_recorder"):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}
        if mode == "flight_recorder":
            env["TORCH_FR_BUFFER_SIZE"] = "20000"
        with tempfile.TemporaryDirectory() as tmp:
            proc = subprocess.run([sys.executable, "-c", CHILD, mode, str(args.calls), str(Path(tmp) / "store")],
                                  env=env, capture_output=True, text=True, timeout=600)
        if proc.returncode != 0:
            print(f"{mode}: failed: {proc.stderr.strip().splitlines()[-1:]}")
            continue
        for part in proc.stdout.strip().splitlines()[-1].split("|"):
            if part.startswith("fr_"):
                print(f"flight recorder on gloo: {part}")
                continue
            key, size, us = part.split()
            results.setdefault(key, {})[int(size)] = min(float(us), results.get(key, {}).get(int(size), 1e9))
    base = results.get("bare", {})
    for mode, sizes in results.items():
        for size, us in sizes.items():
            extra = f", +{us - base[size]:.2f} us over bare" if mode != "bare" and size in base else ""
            print(f"{mode:18s} all_reduce {size:>8d} B: {us:8.2f} us CPU per call{extra}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
