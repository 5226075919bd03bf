"""Fleet scale: the engine's map over ranks and its central merge, against the number of ranks.

A synthetic fleet (``write_fleet``) is one session of N ranks of our JSONL, made from the records of
a real 2-rank run (``sample_logs/why_slow``, rank 0) as templates: per step a training_step_complete,
one communication record per gradient bucket and a step_phases record, a performance record every
10 steps, the run's header and end records; each rank's step and sync times jittered, the last rank
10% slower. For 64, 256 and 1024 ranks (by default), a fresh process reads the fleet through the
engine (``logkit.run.engine``) on a local pool of worker processes and analyses it, and reports:

- time of the map and merge (``build_sessions``) and of ``analyze``;
- peak memory per worker (the largest ``ru_maxrss`` any rank's task saw in its worker process);
- peak memory of the central process, and the size of the merged frames;

then prints each against 64 ranks as ratios beside the ranks ratio (time should follow the ranks,
worker memory stay flat), a run with 4x the buckets per step (4x the comm records, the same ranks
and steps: the central merge's memory follows the ranks, not the records) and a run with 4x the
steps (the central merge holds ranks x steps: its step, phase and performance rows).

``--big-stream`` measures instead a worker against the size of one rank's stream: 2 ranks with
``--big-buckets`` buckets per step and 4x that (4x the comm records, the same steps), each read
by the engine's chunked map and, as a reference in the same run, by the whole-read map it replaced
(the rank's stream read whole into its frames, then its comm frame reduced).

    python benchmarks/fleet.py                       # 64, 256, 1024 ranks x 20 steps, 2 buckets
    python benchmarks/fleet.py --ranks 64 256 --steps 100 --workers 4
    python benchmarks/fleet.py --big-stream          # 2 ranks x 100 steps x 250 / 1000 buckets
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
    """This process's peak RSS in KB: VmHWM (``ru_maxrss`` would carry over the peak of the process that
    started it, the one that wrote the fleet), else ru_maxrss."""
    try:
        with open("/proc/self/status") as fh:
            return next(int(line.split()[1]) for line in fh if line.startswith("VmHWM:"))
    except (OSError, StopIteration):
        import resource

        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _measured_partial(*args):
    """The map, with the worker process's peak memory (KB) when it ended."""
    from logkit.run.engine import rank_partial

    part = rank_partial(*args)
    return part, _peak_kb()


def _whole_map(path: str, rank: int, world_size=None, cache: bool = False):
    """The map the chunked one replaced, as a reference: the rank's stream read whole into its frame
    tables, its comm frame built and reduced in one piece (``comm_reduce.CommReducer.add_frame``); then the
    engine's map, so that the merge gets what it expects (the peak is the whole read's)."""
    from logkit.analysis.kernels.comm_reduce import CommReducer
    from logkit.ingest.assemble import frame_of
    from logkit.ingest.load import read_ranks
    from logkit.run.engine import rank_partial

    (read,) = read_ranks([(path, rank)])
    comm = frame_of("comm", [t for name, t in read.tables if name == "comm"], extra_columns=True)
    steps = frame_of("steps", [t for name, t in read.tables if name == "steps"], extra_columns=True)
    reducer = CommReducer()
    reducer.add_frame(comm)
    reducer.result(steps, world_size)
    del read, comm, steps
    return rank_partial(path, rank, world_size, cache)


def _measured_whole(*args):
    part = _whole_map(*args)
    return part, _peak_kb()


class _MeasuredPool:
    """A local pool whose tasks report their worker's peak memory."""

    def __init__(self, workers: int, whole_map: bool = False) -> None:
        from logkit.run.engine import LocalPool

        self.pool, self.worker_peak_kb = LocalPool(workers), 0
        self.name = self.pool.name
        self.task = _measured_whole if whole_map else _measured_partial

    def submit(self, fn, *args):
        fut = self.pool.submit(self.task, *args)
        outer = self

        class _F:
            def result(self):
                part, kb = fut.result()
                outer.worker_peak_kb = max(outer.worker_peak_kb, kb)
                return part

        return _F()

    def map_ranks(self, streams, cache):
        from logkit.run.engine import per_rank

        return per_rank(self, streams, cache)  # a task per rank, each measured

    def close(self) -> None:
        self.pool.close()


def _one(folder: Path, workers: int, whole_map: bool = False) -> dict:
    from logkit.analysis import analyze
    from logkit.ingest.discover import discover
    from logkit.run.engine import build_sessions

    base = _peak_kb()
    runner = _MeasuredPool(workers, whole_map)
    try:
        t = time.perf_counter()
        loaded = build_sessions(discover(folder), runner=runner)
        sessions = loaded.sessions
        t_map = time.perf_counter() - t
    finally:
        runner.close()
    t = time.perf_counter()
    analysis = analyze(sessions, comm_parts=loaded.comm_parts)
    t_analyze = time.perf_counter() - t
    s = sessions[0]
    frames = sum(int(getattr(s, n).memory_usage(deep=True).sum())
                 for n in ("steps", "comm", "perf", "phases", "gpu", "evals", "events", "diagnostics"))
    records = sum(1 for p in folder.rglob("*.jsonl") for _ in open(p, "rb"))
    stream_mb = max(p.stat().st_size for p in folder.rglob("*.jsonl")) / 1e6
    return {"ranks": len(s.meta.get("ranks_found") or []), "records": records, "stream_mb": stream_mb,
            "steps": int(s.steps["step"].max()), "map_merge_s": t_map,
            "analyze_s": t_analyze, "worker_peak_mb": runner.worker_peak_kb / 1024,
            "central_peak_mb": _peak_kb() / 1024, "central_start_mb": base / 1024,
            "merged_frames_mb": frames / 1e6, "comm_rows": int(analysis.communication["count"].sum())}


def _run_one(ranks: int, steps: int, buckets: int, workers: int, tmp: Path, whole_map: bool = False) -> dict:
    folder = tmp / f"fleet_{ranks}_{steps}_{buckets}"
    if not folder.exists():
        write_fleet(folder, ranks, steps, buckets)
    out = subprocess.run([sys.executable, __file__, "--one", str(folder), "--workers", str(workers),
                          *(["--whole-map"] if whole_map else [])], capture_output=True, text=True, cwd=ROOT)
    if out.returncode:
        raise SystemExit(out.stderr)
    return json.loads(out.stdout.strip().splitlines()[-1])


def _row(label: str, r: dict, base: dict) -> str:
    return (f"{label:>22} {r['ranks']:>6} {r['steps']:>5} {r['records']:>9} {r['map_merge_s']:>8.2f}s {r['analyze_s']:>7.2f}s "
            f"{r['worker_peak_mb']:>9.0f} {r['central_peak_mb']:>9.0f} {r['merged_frames_mb']:>8.1f}   "
            f"ranks x{r['ranks'] / base['ranks']:.1f} steps x{r['steps'] / base['steps']:.1f} "
            f"records x{r['records'] / base['records']:.1f} "
            f"time x{r['map_merge_s'] / base['map_merge_s']:.2f} worker mem x{r['worker_peak_mb'] / base['worker_peak_mb']:.2f} "
            f"central mem x{r['central_peak_mb'] / base['central_peak_mb']:.2f} "
            f"frames x{r['merged_frames_mb'] / base['merged_frames_mb']:.2f}")


def _big_stream(args) -> None:
    """A worker against one rank's stream size: the chunked map and the whole-read map it replaced."""
    with tempfile.TemporaryDirectory(prefix="logkit-fleet-") as tmp:
        rows = [(f"{b} buckets, {name}", _run_one(2, args.steps, b, args.workers, Path(tmp), whole))
                for b in (args.big_buckets, 4 * args.big_buckets) for name, whole in (("chunked", False),
                                                                                      ("whole", True))]
    print(f"2 ranks x {args.steps} steps, {args.workers} worker processes, {os.cpu_count()} cores")
    print(f"{'':>24} {'stream MB':>9} {'records':>9} {'map+merge':>9} {'worker MB':>9} {'central MB':>10}")
    for label, r in rows:
        print(f"{label:>24} {r['stream_mb']:>9.1f} {r['records']:>9} {r['map_merge_s']:>8.2f}s "
              f"{r['worker_peak_mb']:>9.0f} {r['central_peak_mb']:>10.0f}")
    for name in ("chunked", "whole"):
        a, b = (r for label, r in rows if label.endswith(name))
        print(f"{name}: 4x the comm records (stream x{b['stream_mb'] / a['stream_mb']:.2f}): worker peak "
              f"+{b['worker_peak_mb'] - a['worker_peak_mb']:.0f} MB (x{b['worker_peak_mb'] / a['worker_peak_mb']:.2f}), "
              f"central x{b['central_peak_mb'] / a['central_peak_mb']:.2f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, nargs="+", default=[64, 256, 1024])
    ap.add_argument("--steps", type=int, default=None, help="default: 20 (100 with --big-stream)")
    ap.add_argument("--buckets", type=int, default=2)
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--big-stream", action="store_true", help="a worker against one rank's stream size")
    ap.add_argument("--big-buckets", type=int, default=250)
    ap.add_argument("--one", type=Path, help=argparse.SUPPRESS)
    ap.add_argument("--whole-map", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    args.steps = args.steps or (100 if args.big_stream else 20)
    sys.path.insert(0, str(ROOT))
    if args.one is not None:
        print(json.dumps(_one(args.one, args.workers, args.whole_map)))
        return
    if args.big_stream:
        _big_stream(args)
        return
    with tempfile.TemporaryDirectory(prefix="logkit-fleet-") as tmp:
        tmp = Path(tmp)
        rows = [(f"{n} ranks", _run_one(n, args.steps, args.buckets, args.workers, tmp)) for n in args.ranks]
        mid = args.ranks[len(args.ranks) // 2]
        rows.append((f"{mid} ranks, 4x buckets", _run_one(mid, args.steps, 4 * args.buckets, args.workers, tmp)))
        rows.append((f"{mid} ranks, 4x steps", _run_one(mid, 4 * args.steps, args.buckets, args.workers, tmp)))
    print(f"{args.steps} steps, {args.buckets} buckets per step, {args.workers} worker processes, {os.cpu_count()} cores")
    print(f"{'':>22} {'ranks':>6} {'steps':>5} {'records':>9} {'map+merge':>9} {'analyze':>8} {'worker MB':>9} "
          f"{'central MB':>9} {'frames MB':>8}   against the first row")
    base = rows[0][1]
    for label, r in rows:
        print(_row(label, r, base))
    same = next(r for label, r in rows if label == f"{mid} ranks")
    for label, r in rows[-2:]:
        print(f"{label}: records x{r['records'] / same['records']:.2f}, central peak "
              f"x{r['central_peak_mb'] / same['central_peak_mb']:.2f} (+{r['central_peak_mb'] - same['central_peak_mb']:.0f} MB), "
              f"merged frames x{r['merged_frames_mb'] / same['merged_frames_mb']:.2f}, worker peak "
              f"x{r['worker_peak_mb'] / same['worker_peak_mb']:.2f}")


if __name__ == "__main__":
    main()
