"""Fleet scale: the engine's map over ranks and its central merge, against the number of ranks.

A synthetic fleet (``write_fleet``) is one session of N ranks of our JSONL, made from the records of
a real 2-rank run (``sample_logs/why_slow``, rank 0) as templates: per step a training_step_complete,
one communication record per gradient bucket and a step_phases record, a performance record every
10 steps, the run's header and end records; each rank's step and sync times jittered, the last rank
10% slower. For 64, 256 and 1024 ranks (by default), a fresh process reads the fleet through the
engine (``logkit.analysis.engine``) on a local pool of worker processes and analyses it, and reports:

- time of the map and merge (``build_sessions``) and of ``analyze``;
- peak memory per worker (the largest ``ru_maxrss`` any rank's task saw in its worker process);
- peak memory of the central process, and the size of the merged frames;

then prints each against 64 ranks as ratios beside the ranks ratio (time should follow the ranks,
worker memory stay flat), and a run with 4x the buckets per step (4x the comm records, the same
ranks and steps) to show the central merge's memory follows the ranks, not the records.

    python benchmarks/fleet.py                       # 64, 256, 1024 ranks x 20 steps, 2 buckets
    python benchmarks/fleet.py --ranks 64 256 --steps 100 --workers 4
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta
from pathlib import Path

import orjson

ROOT = Path(__file__).resolve().parent.parent
TEMPLATE = ROOT / "sample_logs/why_slow/logs/training_20261123_074813/training_20261123_074813_rank0.jsonl"
SESSION_ID = "training_20270101_000000"
STEP_S, SYNC_MS, DATA_S = 0.055, 4.0, 0.003


def _templates() -> dict:
    records = [orjson.loads(line) for line in TEMPLATE.read_bytes().splitlines() if line.strip()]
    first = {}
    for r in records:
        first.setdefault(r["type"], r)
    header = []
    for r in records:
        if r["type"] == "training_step_complete":
            break
        header.append(r)
    return {"header": header, **first}


def _stamp(r: dict, t0: datetime, elapsed: float, rank: int, world: int, sid: str, keep_world: bool) -> dict:
    r["timestamp"] = (t0 + timedelta(seconds=elapsed)).isoformat()
    r["elapsed_s"] = round(elapsed, 6)
    r["session_id"], r["rank"] = sid, rank
    if keep_world:
        r["world_size"] = world
    else:
        r.pop("world_size", None)
    if "local_rank" in r:
        r["local_rank"] = rank % 8
    return r


def _comm(t: dict, step: int, bucket: int, world: int, rng: random.Random, keep_world: bool) -> dict:
    r = copy.deepcopy(t)
    size = int(t["size_bytes"]) * (bucket + 1)
    dur = SYNC_MS * (bucket + 1) * (1 + 0.2 * rng.random())
    alg = size / 1e6 / (dur / 1000.0)
    r.update(step=step, bucket=bucket, size_bytes=size, duration_ms=round(dur, 6), algbw_mb_s=round(alg, 4),
             message=f"gradient_sync bucket {bucket}: {size} bytes in {dur:.3f} ms")
    if keep_world:
        r.update(busbw_mb_s=round(alg * 2 * (world - 1) / world, 4), group_size=world)
    else:  # the reader derives busbw from algbw and the session's world size
        for k in ("busbw_mb_s", "group_size"):
            r.pop(k, None)
    return r


def _rank_lines(tpl: dict, rank: int, world: int, steps: int, buckets: int, sid: str, keep_world: bool,
                with_steps: bool) -> list[bytes]:
    rng = random.Random(rank * 7919 + world)
    t0 = datetime.fromisoformat("2027-01-01T00:00:00+00:00")
    slow = 1.1 if rank == world - 1 and world > 1 else 1.0
    out, elapsed = [], 0.05
    for h in tpl["header"]:
        out.append(_stamp(copy.deepcopy(h), t0, elapsed, rank, world, sid, keep_world))
    for step in range(1, steps + 1):
        dt = STEP_S * slow * (1 + 0.1 * rng.random())
        elapsed += dt
        if with_steps:
            r = copy.deepcopy(tpl["training_step_complete"])
            r.update(step=step, max_steps=steps, message=f"Step {step} completed")
            r["timing"].update(step_time_seconds=round(dt, 6), data_time_seconds=round(DATA_S * (1 + rng.random()), 6))
            r["metrics"].update(loss=1.0 / (1 + 0.05 * step) + 0.01 * rng.random())
            out.append(_stamp(r, t0, elapsed, rank, world, sid, keep_world))
        for b in range(buckets):
            out.append(_stamp(_comm(tpl["communication"], step, b, world, rng, keep_world), t0, elapsed, rank, world,
                              sid, keep_world))
        ph = copy.deepcopy(tpl["step_phases"])
        ph.update(step=step, buckets=buckets, begin_clock_s=round(1000.0 + elapsed - dt, 6),
                  sync_s=round(SYNC_MS * buckets / 1000.0, 6))
        out.append(_stamp(ph, t0, elapsed, rank, world, sid, keep_world))
        if step % 10 == 0:
            perf = copy.deepcopy(tpl["performance"])
            perf.update(step=step, avg_step_time_s=round(STEP_S * slow, 6))
            out.append(_stamp(perf, t0, elapsed, rank, world, sid, keep_world))
    end = copy.deepcopy(tpl["session_end"])
    end.update(total_steps=steps, steps_logged=steps, duration_s=round(elapsed, 6))
    out.append(_stamp(end, t0, elapsed, rank, world, sid, keep_world))
    return [orjson.dumps(r) for r in out]


def write_fleet(folder: str | Path, ranks: int, steps: int = 20, buckets: int = 2, *, sid: str = SESSION_ID,
                keep_world_size: bool = True, stepless_ranks: tuple = ()) -> Path:
    """One session of ``ranks`` JSONL streams under ``folder/sid``; its folder. ``keep_world_size``:
    False drops world_size, group_size and busbw from every record (the analysis then derives them);
    ``stepless_ranks``: ranks that log no step records (their sync share uses the lowest rank's steps)."""
    tpl = _templates()
    session = Path(folder) / sid
    session.mkdir(parents=True, exist_ok=True)
    for rank in range(ranks):
        lines = _rank_lines(tpl, rank, ranks, steps, buckets, sid, keep_world_size, rank not in stepless_ranks)
        (session / f"{sid}_rank{rank}.jsonl").write_bytes(b"\n".join(lines) + b"\n")
    return session


# --- the measurement (one fleet size per fresh process) ----------------------------------------------

def _peak_kb() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _measured_partial(*args):
    """The map, with the worker process's peak memory (KB) when it ended."""
    from logkit.analysis.engine import rank_partial

    part = rank_partial(*args)
    return part, _peak_kb()


class _MeasuredPool:
    """A local pool whose tasks report their worker's peak memory."""

    def __init__(self, workers: int) -> None:
        from logkit.analysis.engine import LocalPool

        self.pool, self.worker_peak_kb = LocalPool(workers), 0
        self.name = self.pool.name

    def submit(self, fn, *args):
        fut = self.pool.submit(_measured_partial, *args)
        outer = self

        class _F:
            def result(self):
                part, kb = fut.result()
                outer.worker_peak_kb = max(outer.worker_peak_kb, kb)
                return part

        return _F()

    def close(self) -> None:
        self.pool.close()


def _one(folder: Path, workers: int) -> dict:
    from logkit.analysis import analyze
    from logkit.analysis.engine import build_sessions
    from logkit.ingest.discover import discover

    base = _peak_kb()
    runner = _MeasuredPool(workers)
    try:
        t = time.perf_counter()
        sessions = build_sessions(discover(folder), runner=runner)
        t_map = time.perf_counter() - t
    finally:
        runner.close()
    t = time.perf_counter()
    analysis = analyze(sessions)
    t_analyze = time.perf_counter() - t
    s = sessions[0]
    frames = sum(int(getattr(s, n).memory_usage(deep=True).sum())
                 for n in ("steps", "comm", "perf", "phases", "gpu", "evals", "events", "diagnostics"))
    records = sum(1 for p in folder.rglob("*.jsonl") for _ in open(p, "rb"))
    return {"ranks": len(s.meta.get("ranks_found") or []), "records": records, "map_merge_s": t_map,
            "analyze_s": t_analyze, "worker_peak_mb": runner.worker_peak_kb / 1024,
            "central_peak_mb": _peak_kb() / 1024, "central_start_mb": base / 1024,
            "merged_frames_mb": frames / 1e6, "comm_rows": int(analysis.communication["count"].sum())}


def _run_one(ranks: int, steps: int, buckets: int, workers: int, tmp: Path) -> dict:
    folder = tmp / f"fleet_{ranks}_{steps}_{buckets}"
    if not folder.exists():
        write_fleet(folder, ranks, steps, buckets)
    out = subprocess.run([sys.executable, __file__, "--one", str(folder), "--workers", str(workers)],
                         capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(label: str, r: dict, base: dict) -> str:
    return (f"{label:>22} {r['ranks']:>6} {r['records']:>9} {r['map_merge_s']:>8.2f}s {r['analyze_s']:>7.2f}s "
            f"{r['worker_peak_mb']:>9.0f} {r['central_peak_mb']:>9.0f} {r['merged_frames_mb']:>8.1f}   "
            f"ranks x{r['ranks'] / base['ranks']:.1f} records x{r['records'] / base['records']:.1f} "
            f"time x{r['map_merge_s'] / base['map_merge_s']:.2f} worker mem x{r['worker_peak_mb'] / base['worker_peak_mb']:.2f} "
            f"central mem x{r['central_peak_mb'] / base['central_peak_mb']:.2f} "
            f"frames x{r['merged_frames_mb'] / base['merged_frames_mb']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args()
    sys.path.insert(0, str(ROOT))
    if args.one is not None:
        print(json.dumps(_one(args.one, args.workers)))
        return
    with tempfile.TemporaryDirectory(prefix="logkit-fleet-") as tmp:
        tmp = Path(tmp)
        rows = [(f"{n} ranks", _run_one(n, args.steps, args.buckets, args.workers, tmp)) for n in args.ranks]
        mid = args.ranks[len(args.ranks) // 2]
        rows.append((f"{mid} ranks, 4x buckets", _run_one(mid, args.steps, 4 * args.buckets, args.workers, tmp)))
    print(f"{args.steps} steps, {args.buckets} buckets per step, {args.workers} worker processes, {os.cpu_count()} cores")
    print(f"{'':>22} {'ranks':>6} {'records':>9} {'map+merge':>9} {'analyze':>8} {'worker MB':>9} "
          f"{'central MB':>9} {'frames MB':>8}   against the first row")
    base = rows[0][1]
    for label, r in rows:
        print(_row(label, r, base))
    same = next(r for label, r in rows if label == f"{mid} ranks")
    four = rows[-1][1]
    print(f"4x buckets at {mid} ranks: records x{four['records'] / same['records']:.2f}, central peak "
          f"x{four['central_peak_mb'] / same['central_peak_mb']:.2f}, merged frames "
          f"x{four['merged_frames_mb'] / same['merged_frames_mb']:.2f}, worker peak "
          f"x{four['worker_peak_mb'] / same['worker_peak_mb']:.2f}")


if __name__ == "__main__":
    main()
