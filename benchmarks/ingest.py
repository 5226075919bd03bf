"""Ingest speed and memory, against the reference readers in the same run.

Generates a realistic session (8 ranks of JSONL streams, plus rank 0's text logs) in a temp
folder, then times, on the same files:

- the first read of our JSONL, logkit's fast engine (``jsonl_arrow.read_streams``: the session's streams
  parsed into their frame tables, as one flow) against ``pyarrow.json.read_json`` parsing the same files
  into tables,
  rounds alternated: ratio = pyarrow's time / ours, wall and CPU (target >= 1.2);
- our JSONL ingest (``build_session``) against ``pyarrow.json.read_json``,
  ``polars.read_ndjson`` and ``pandas.read_json(lines=True)``: ratio = our throughput / the
  fastest reader's (target >= 0.8);
- our text-log readers (main, multigpu, performance logs) in MB/s against the fastest JSON
  reader's MB/s (target >= 0.5), on the session's text logs (~5 MB at 100 MB of JSONL) and on text logs
  of ``--text-mb`` MB (default 50) written apart;
- peak memory of our ingest (a fresh process) against the memory of the frames it built
  (target <= 1.5x);
- a second analysis through the Parquet cache against parsing, in alternated rounds (target >= 10x);
- optionally (``--big-gb``) a big folder through the engine (``logkit.run.engine``: ranks mapped
  on a local pool of 2 processes, merged and analysed centrally), with its peak memory per worker and
  central, which follow one rank's stream and the ranks, not the folder's size.

    python benchmarks/ingest.py                 # ~100 MB session (default)
    python benchmarks/ingest.py --size 1000     # ~1 GB session
    python benchmarks/ingest.py --big-gb 3      # also: a 3 GB folder through the engine
    python benchmarks/ingest.py --first-read-only --repeat 7   # only the first read against pyarrow.json

``benchmarks/cli.py`` times whole ``analyze_logs`` processes (cold, from the cache) against a process that
only parses the same JSONL.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson

RANKS = 8
BIG_RANK_MB = 128  # the big folder's streams: ranks enough that each is about this size


def _rec(world, t0, elapsed, sid, rank, type_, message, **fields):
    r = {"timestamp": (t0 + timedelta(seconds=elapsed)).isoformat(timespec="microseconds"),
         "elapsed_s": round(elapsed, 6), "type": type_, "level": "INFO", "message": message,
         "session_id": sid, "rank": rank, "world_size": world}
    r.update(fields)
    return orjson.dumps(r) + b"\n"


def generate(folder: Path, mb_total: float, sid: str = "training_20251122_100000", copies: bool = False,
             ranks: int = RANKS) -> Path:
    """One session of ``ranks`` streams, about ``mb_total`` MB of JSONL, as the emitter writes it
    at verbosity "high": per step a step record with resource usage, 4 gradient buckets; a GPU
    snapshot and a performance record every 10 steps; an evaluation every 200. ``copies``: ranks
    1.. are rank 0's stream with their own rank in each record, and no text logs are written (the
    big folder, written fast)."""
    session = folder / sid
    session.mkdir(parents=True, exist_ok=True)
    t0 = datetime(2025, 11, 22, 10, 0, tzinfo=timezone.utc)
    per_rank = mb_total * 1e6 / ranks
    first = session / f"{sid}_rank0.jsonl"
    for rank in range(ranks):
        if copies and rank:
            (session / f"{sid}_rank{rank}.jsonl").write_bytes(first.read_bytes().replace(b'"rank":0,', b'"rank":%d,' % rank))
            continue
        out = []
        size = 0
        el = 0.5
        out.append(_rec(ranks, t0, el, sid, rank, "session_start", f"Session {sid} started on rank {rank}/{ranks}",
                        mode="MULTI-GPU", local_rank=rank, hostname="node1", backend="nccl", mixed_precision="bf16",
                        model_name="meta-llama/Llama-3.1-8B", gpu_count=ranks, total_batch_size=64, max_steps=10**6,
                        config={"learning_rate": 2e-4, "lora_r": 16, "seq_len": 2048},
                        versions={"python": "3.11.7", "torch": "2.5.1", "nccl": "2.21.5"},
                        gpus=[{"index": i, "name": "NVIDIA H100 80GB HBM3", "uuid": f"GPU-{i}",
                               "memory_total_mb": 85520.0} for i in range(ranks)]))
        step = 0
        counted = 0  # records already in ``size``
        while size < per_rank:
            step += 1
            st = 0.41 + 0.01 * ((step * 7 + rank) % 13)
            el += st
            for b in range(4):
                dur = 3.1 + 0.1 * b
                out.append(_rec(ranks, t0, el - 0.05, sid, rank, "communication", f"gradient_sync bucket {b}", step=step,
                                op="gradient_sync", size_bytes=26_214_400, duration_ms=dur,
                                algbw_mb_s=round(26.2144 / dur * 1000, 3), busbw_mb_s=round(26.2144 / dur * 1750, 3),
                                group_size=ranks, bucket=b, timing_source="cuda_event"))
            out.append(_rec(ranks, t0, el, sid, rank, "training_step_complete", f"Step {step} completed", step=step,
                            max_steps=10**6, epoch=round(step / 5000, 6),
                            timing={"step_time_seconds": st, "avg_step_time_seconds": 0.47,
                                    "data_time_seconds": 0.012, "eta_minutes": 812.4,
                                    "estimated_completion": "2025-11-23T01:00:00+00:00"},
                            metrics={"loss": round(2.5 / (1 + step / 3000), 6), "learning_rate": 2e-4,
                                     "grad_norm": 0.81, "samples_per_second": round(64 / st, 3),
                                     "tokens_per_second": round(64 * 2048 / st, 1), "total_batch_size": 64},
                            resource_usage={"cpu": {"usage_percent": 31.5},
                                            "memory": {"usage_percent": 41.2, "used_gb": 211.3}}))
            if step % 10 == 0:
                out.append(_rec(ranks, t0, el, sid, rank, "gpu_snapshot", "GPU snapshot", hostname="node1", devices=[
                    {"index": rank, "utilization_percent": 97.0, "memory_used_mb": 71234.0,
                     "memory_total_mb": 85520.0, "memory_usage_percent": 83.3, "temperature_c": 66.0,
                     "power_w": 612.4, "sm_clock_mhz": 1980.0}]))
                out.append(_rec(ranks, t0, el, sid, rank, "performance", "Performance over 10 steps", step=step,
                                window_steps=10, avg_step_time_s=0.47, throughput_samples_s=136.2,
                                total_batch_size=64))
            if step % 200 == 0:
                out.append(_rec(ranks, t0, el, sid, rank, "evaluation", f"Evaluation at step {step}", step=step,
                                metrics={"eval_loss": 1.9, "eval_perplexity": 6.69}))
            if step % 50 == 0:
                size += sum(map(len, out[counted:]))
                counted = len(out)
        out.append(_rec(ranks, t0, el + 1, sid, rank, "session_end", "Session completed", status="completed",
                        duration_s=el + 1, total_steps=step, final_loss=1.0))
        (session / f"{sid}_rank{rank}.jsonl").write_bytes(b"".join(out))
        if rank == 0 and not copies:
            _text_logs(session, sid, step)
    return session


def _text_logs(session: Path, sid: str, steps: int) -> None:
    from logkit.schema import COMMUNICATION, METRICS_LINE, MULTIGPU_STEP, PERFORMANCE, PROCESS_LINE, STEP_LINE

    main, multi, perf = [], [], []
    for s in range(1, steps + 1):
        main.append(STEP_LINE.format(step=s, max_steps=steps, percent=100 * s / steps, loss=2.5 / (1 + s / 3000),
                                     learning_rate=2e-4, steps_per_second=2.1, eta_minutes=12.0))
        main.append(METRICS_LINE.format(step_duration=0.47, samples_per_second=136.2))
        stamp = f"2025-11-22 10:{(s // 60) % 60:02d}:{s % 60:02d}"
        for _ in range(4):
            multi.append(PROCESS_LINE.format(datetime=stamp, level="INFO", process="MainProcess",
                                             message=COMMUNICATION.format(op="gradient_sync", rank=0, size_mb=26.21,
                                                                          duration_ms=3.1, bandwidth_mb_s=8456.1)))
        multi.append(PROCESS_LINE.format(datetime=stamp, level="INFO", process="MainProcess",
                                         message=MULTIGPU_STEP.format(step=s, processes=RANKS, local_rank=0,
                                                                      process_index=0)))
        if s % 10 == 0:
            perf.append(PROCESS_LINE.format(datetime=stamp, level="INFO", process="MainProcess",
                                            message=PERFORMANCE.format(step=s, avg_step_time_s=0.47,
                                                                       throughput_samples_s=136.2,
                                                                       total_batch_size=64)))
    for name, lines in (("main", main), ("multigpu", multi), ("performance", perf)):
        (session / f"{sid}_{name}.log").write_text("\n".join(lines) + "\n", encoding="utf-8")


def _steps(session: Path) -> int:
    """The steps of a session's main.log (one step line and one metrics line each)."""
    (main,) = session.glob("*_main.log")
    return main.read_bytes().count(b"\n") // 2


def _timed(fn, repeat: int = 1) -> float:
    """Median wall time of ``repeat`` runs (the machine may be shared: medians, not best-of)."""
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def _references(files: list[Path], skip_pandas: bool) -> dict[str, float | str]:
    import pyarrow.json as pj

    out: dict[str, float | str] = {}
    out["pyarrow.json"] = _timed(lambda: [pj.read_json(f) for f in files])
    try:
        import polars as pl

        try:
            out["polars.read_ndjson"] = _timed(lambda: [pl.read_ndjson(f) for f in files])
        except Exception:  # noqa: BLE001 - polars infers from the first 100 rows; retry with all
            out["polars.read_ndjson"] = _timed(lambda: [pl.read_ndjson(f, infer_schema_length=None) for f in files])
    except ImportError:
        out["polars.read_ndjson"] = "not installed"
    if not skip_pandas:
        import pandas as pd

        out["pandas.read_json(lines=True)"] = _timed(lambda: [pd.read_json(f, lines=True) for f in files])
    return out


def _alternated(fns, repeat: int) -> list[list[float]]:
    """``repeat`` rounds of each of ``fns`` in turn (the machine's speed drifts: a ratio is taken within
    a round): per round, [wall, CPU] seconds of each, one after the other."""
    rounds = []
    for _ in range(repeat):
        times = []
        for fn in fns:
            wall, cpu = time.perf_counter(), time.process_time()
            fn()
            times += [time.perf_counter() - wall, time.process_time() - cpu]
        rounds.append(times)
    return rounds


def _load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def _first_read(files: list[Path], repeat: int) -> None:
    """logkit's fast engine against pyarrow.json.read_json on the same files, in alternated rounds."""
    import pyarrow.json as pj

    from logkit.ingest.jsonl_arrow import read_streams
    from logkit.ingest.load import RankRead

    def ours():
        for f, stream in zip(files, read_streams([(f, rank, RankRead(rank)) for rank, f in enumerate(files)]), strict=True):
            if stream is None:
                raise SystemExit(f"{f}: the fast engine refused it")

    def theirs():
        for f in files:
            pj.read_json(f)

    ours(), theirs()  # warm
    rounds = _alternated((ours, theirs), repeat)
    mb = sum(f.stat().st_size for f in files) / 1e6
    med = [statistics.median(r[i] for r in rounds) for i in range(4)]
    wall_ratio = statistics.median(r[2] / r[0] for r in rounds)
    cpu_ratio = statistics.median(r[3] / r[1] for r in rounds)
    print(f"\nFirst read of the JSONL ({mb:.0f} MB, {len(files)} streams), median of {repeat} alternated rounds:")
    # cores busy: CPU time / wall time (2.0 on 2 cores is every core busy all the time)
    print(f"  logkit jsonl_arrow.read_streams {med[0]:6.2f} s wall ({mb / med[0]:6.1f} MB/s)  {med[1]:6.2f} s CPU"
          f"  cores busy {med[1] / med[0]:.2f}")
    print(f"  pyarrow.json.read_json          {med[2]:6.2f} s wall ({mb / med[2]:6.1f} MB/s)  {med[3]:6.2f} s CPU"
          f"  cores busy {med[3] / med[2]:.2f}")
    print(f"  ratio pyarrow time / logkit time: wall {wall_ratio:.2f}x, CPU {cpu_ratio:.2f}x  (target >= 1.2)"
          f"  ({_load()})")


_CHILD = r"""
import sys, time, os
sys.path.insert(0, os.getcwd())
import pandas, pyarrow, pyarrow.json, orjson, logkit.ingest.load as L
from logkit.ingest.discover import sources_in_folder
from pathlib import Path
def status(key):
    with open("/proc/self/status") as fh:
        return next(int(line.split()[1]) * 1024 for line in fh if line.startswith(key + ":"))
base = status("VmRSS")
what = sys.argv[1]
t = time.perf_counter()
if what == "ingest":
    (src,) = sources_in_folder(Path(sys.argv[2]))
    s = L.build_session(src)
    frames = sum(int(getattr(s, n).memory_usage(deep=True).sum()) for n in ("steps", "comm", "perf", "gpu", "evals", "events", "diagnostics"))
else:  # the engine on a local pool of 2 processes; "frames": the largest worker's peak RSS
    from benchmarks.fleet import _MeasuredPool
    from logkit.analysis import analyze
    from logkit.run.engine import build_sessions
    from logkit.ingest.discover import discover
    runner = _MeasuredPool(2)
    try:
        loaded = build_sessions(discover(Path(sys.argv[2])), runner=runner)
    finally:
        runner.close()
    analyze(loaded.sessions, comm_parts=loaded.comm_parts)
    frames = runner.worker_peak_kb * 1024
el = time.perf_counter() - t
print(base, status("VmHWM"), frames, el)
"""


def _child(what: str, path: Path) -> tuple[int, int, int, float]:
    """(RSS after imports, peak RSS, bytes of the frames built, seconds) of a fresh process.

    The peak is the kernel's high-water mark of the process's own memory (VmHWM): ``ru_maxrss``
    would not do, as Linux carries the parent's peak over into a child across fork and exec
    (the benchmark's own process holds a GB by then)."""
    out = subprocess.run([sys.executable, "-c", _CHILD, what, str(path)], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parent.parent)
    base, peak, frames, el = out.stdout.split()
    return int(base), int(peak), int(frames), float(el)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=float, default=100.0, help="MB of JSONL in the session (default 100)")
    ap.add_argument("--big-gb", type=float, default=0.0, help="GB of JSONL for the engine's big-folder run (0: skip)")
    ap.add_argument("--skip-pandas", action="store_true", help="leave pandas.read_json out (slow on large sizes)")
    ap.add_argument("--repeat", type=int, default=2, help="timing repeats (medians)")
    ap.add_argument("--first-read-only", action="store_true", help="only the first read against pyarrow.json")
    ap.add_argument("--text-mb", type=float, default=50.0, help="MB of text logs read apart (0: skip; default 50)")
    args = ap.parse_args()

    from logkit.ingest.discover import sources_in_folder
    from logkit.ingest.load import build_session
    from logkit.ingest.readers.logkit_text import read_logkit_text
    from logkit.run.load import load_sessions

    tmp = Path(tempfile.mkdtemp(prefix="logkit-bench-"))
    try:
        t = time.perf_counter()
        session = generate(tmp / "logs", args.size)
        files = sorted(session.glob("*_rank*.jsonl"))
        texts = sorted(session.glob("*.log"))
        jsonl_bytes = sum(f.stat().st_size for f in files)
        text_bytes = sum(f.stat().st_size for f in texts)
        print(f"generated {jsonl_bytes / 1e6:.0f} MB JSONL in {len(files)} streams + {text_bytes / 1e6:.0f} MB text logs"
              f" in {time.perf_counter() - t:.1f} s  (python {sys.version.split()[0]}, {os.cpu_count()} CPUs)")
        _first_read(files, max(3, args.repeat))
        if args.first_read_only:
            return

        (src,) = sources_in_folder(session)
        build_session(src)  # warm: first-call set-up of pyarrow and pandas is not what we measure
        # Rounds of ours and the references, one after the other: each round's ratio compares
        # runs seconds apart (the machine may be shared); medians over the rounds.
        rounds = []
        for r in range(args.repeat):
            ours_r = _timed(lambda: build_session(src))
            refs_r = _references(files, args.skip_pandas or r > 0)
            rounds.append((ours_r, refs_r))
        ours = statistics.median(o for o, _ in rounds)
        names = [k for k, v in rounds[0][1].items() if isinstance(v, float)]
        refs = {k: statistics.median(r[k] for _, r in rounds if k in r) for k in names}
        refs.update({k: v for k, v in rounds[0][1].items() if not isinstance(v, float)})
        timed = {k: v for k, v in refs.items() if isinstance(v, float)}
        fastest = min(timed, key=timed.get)
        ratio = statistics.median(min(v for v in r.values() if isinstance(v, float)) / o for o, r in rounds)
        mb = jsonl_bytes / 1e6
        print(f"\nJSONL ({mb:.0f} MB), median of {args.repeat} rounds:")
        print(f"  logkit build_session        {ours:7.2f} s  {mb / ours:8.1f} MB/s")
        for k, v in refs.items():
            print(f"  {k:<28}" + (f"{v:7.2f} s  {mb / v:8.1f} MB/s" if isinstance(v, float) else f" {v}"))
        print(f"  ratio logkit / fastest reference (median over rounds; fastest overall {fastest}): {ratio:.2f}x"
              f"  (target >= 0.8)")

        text_sets = [texts]
        if args.text_mb > 0:
            steps = round(args.text_mb / (text_bytes / 1e6) * _steps(session))
            big_text = tmp / "text" / "training_20251122_110000"
            big_text.mkdir(parents=True)
            _text_logs(big_text, big_text.name, steps)
            text_sets.append(sorted(big_text.glob("*.log")))
        print()
        for found in text_sets:
            size = sum(f.stat().st_size for f in found)
            for f in found:
                read_logkit_text(f)  # warm
            text_time = _timed(lambda: [read_logkit_text(f) for f in found], max(3, args.repeat))  # noqa: B023
            text_mb_s = size / 1e6 / text_time
            print(f"Text logs ({size / 1e6:.0f} MB): {text_time:.2f} s, {text_mb_s:.1f} MB/s;"
                  f" ratio to {fastest}'s {mb / timed[fastest]:.1f} MB/s: {text_mb_s / (mb / timed[fastest]):.2f}x"
                  f"  (target >= 0.5)")

        mems = [_child("ingest", session) for _ in range(3)]
        ratios = sorted((peak - base) / frames for base, peak, frames, _ in mems)
        base, peak, frames, el = sorted(mems, key=lambda m: (m[1] - m[0]) / m[2])[1]
        print(f"\nMemory (fresh process, median of 3): peak RSS above start {(peak - base) / 1e6:.0f} MB, frames built"
              f" {frames / 1e6:.0f} MB: {(peak - base) / frames:.2f}x (runs: "
              + ", ".join(f"{r:.2f}" for r in ratios) + ")  (target <= 1.5)")

        os.environ["LOGKIT_CACHE_DIR"] = str(tmp / "cache")
        first = _timed(lambda: load_sessions(tmp / "logs", cache=True))
        rounds = _alternated((lambda: load_sessions(tmp / "logs", cache=True), lambda: load_sessions(tmp / "logs")),
                             max(7, args.repeat))
        second, parse = (statistics.median(r[i] for r in rounds) for i in (0, 2))
        ratio = statistics.median(r[2] / r[0] for r in rounds)
        print(f"\nCache: first analysis {first:.2f} s (parse + write), second {second:.3f} s; parsing alone"
              f" {parse:.2f} s (medians over {len(rounds)} alternated rounds): {ratio:.1f}x faster than parsing"
              " (the median of the rounds' ratios)  (target >= 10)")

        if args.big_gb > 0:
            shutil.rmtree(tmp / "logs")
            big = tmp / "big"
            t = time.perf_counter()
            ranks = max(RANKS, round(args.big_gb * 1000 / BIG_RANK_MB))
            generate(big, args.big_gb * 1000, copies=True, ranks=ranks)
            size = sum(f.stat().st_size for f in big.rglob("*.jsonl"))
            print(f"\nBig folder through the engine: generated {size / 1e9:.2f} GB in {ranks} streams"
                  f" in {time.perf_counter() - t:.0f} s")
            base, peak, worker, el = _child("engine", big)
            print(f"  map + merge + analyze on a pool of 2: {el:.1f} s ({size / 1e6 / el:.0f} MB/s); peak RSS per worker"
                  f" {worker / 1e6:.0f} MB ({worker / (size / ranks):.1f}x one stream), central {peak / 1e6:.0f} MB"
                  f" ({(peak - base) / 1e6:.0f} MB above start): {peak / size:.2f}x of the folder")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
