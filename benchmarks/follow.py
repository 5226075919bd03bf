"""CPU cost of ``analyze_logs --follow`` while a run writes, against re-reading the whole files at
every refresh, measured in one run on the same files.

A writer process writes 8 ranks' streams at 20 steps/s each, as the emitter does at ``high``:
per step a ``training_step_complete`` record (with its resource usage) and 4 gradient-sync
records, a ``performance`` record every 10 steps, a ``gpu_snapshot`` every 10 s on rank 0, handed
to the file every 0.5 s (the writer thread's interval). Records are the real ones of
``sample_logs/`` (an H100 QLoRA step, a 2-rank gloo sync) with their step, times and rank set
through the record specs. Meanwhile, three followers read the folder, each refreshing every 1 s:

- ``terminal``: ``analyze_logs LOGDIR --follow`` on a pseudo-terminal (the rich view);
- ``ndjson``: ``analyze_logs LOGDIR --follow --json`` (one JSON snapshot per refresh);
- ``reference``: the same state and snapshot, rebuilt at every refresh from every stream read
  whole by the per-line JSONL reader (what a follower without the incremental tail costs).

Each follower's CPU time (user + system, psutil) is counted from the moment the writer starts to
the moment it stops, and per third of that time: a cost that stays flat as the files grow has
the same share in the last third as in the first. The start-up (imports) is counted apart.
Target: the followers <= 5% of one core.

    python benchmarks/follow.py              # 90 s of writing
    python benchmarks/follow.py --seconds 30
"""

from __future__ import annotations

import argparse
import copy
import os
import pty
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

import orjson
import psutil

os.environ.setdefault("OMP_NUM_THREADS", "1")
REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from logkit.schema.files import SessionFiles  # noqa: E402
from logkit.schema.records import (  # noqa: E402
    COMMON,
    COMMUNICATION,
    GPU_SNAPSHOT,
    PERFORMANCE,
    SESSION_END,
    SESSION_START,
    TRAINING_STEP,
    RecordSpec,
)

RANKS, STEPS_PER_S, FLUSH_S, BUCKETS = 8, 20, 0.5, 4
SID = "training_20260101_000000"
GPU_FIXTURE = REPO / "sample_logs" / "gpu" / "qlora_single_gpu" / "logs"
CPU_FIXTURE = REPO / "sample_logs" / "qlora_tiny_cpu" / "logs"
BIN = Path(sys.executable).parent
TYPE = next(f for f in COMMON if f.name == "type")


# -- the writer ---------------------------------------------------------------------------------
def _first(folder: Path, spec: RecordSpec) -> dict:
    """The first record of ``spec``'s type in the streams under ``folder``."""
    for path in sorted(folder.glob("*/*_rank0.jsonl")):
        for line in path.read_bytes().splitlines():
            record = orjson.loads(line)
            if TYPE.read(record) == spec.type:
                return record
    raise LookupError(f"no {spec.type} record under {folder}")


def put(record: dict, spec: RecordSpec, **values) -> dict:
    """``record`` with each value set at its field's key path (the spec's)."""
    for name, value in values.items():
        path = spec[name].raw
        target = record
        for key in path[:-1]:
            target = target.setdefault(key, {})
        target[path[-1]] = value
    return record


class Writer:
    def __init__(self, folder: Path, seconds: float):
        self.folder, self.seconds = folder, seconds
        self.templates = {spec.type: _first(GPU_FIXTURE, spec) for spec in (SESSION_START, TRAINING_STEP,
                                                                             PERFORMANCE, GPU_SNAPSHOT)}
        self.templates[COMMUNICATION.type] = _first(CPU_FIXTURE, COMMUNICATION)
        self.t0 = time.monotonic()
        self.wall0 = datetime.now(timezone.utc)
        self.files = [open(folder / SessionFiles(SID).rank_jsonl(r), "ab") for r in range(RANKS)]  # noqa: SIM115

    def record(self, spec: RecordSpec, rank: int, step: int | None, **values) -> bytes:
        elapsed = time.monotonic() - self.t0
        template = self.templates.get(spec.type) or put({}, spec, type=spec.type, level="INFO", message=spec.type)
        out = put(copy.deepcopy(template), spec, session_id=SID, rank=rank, world_size=RANKS,
                  time_s=round(elapsed, 6),
                  timestamp=(self.wall0 + timedelta(seconds=elapsed)).isoformat(timespec="microseconds"), **values)
        if step is not None:
            put(out, spec, step=step)
        return orjson.dumps(out) + b"\n"

    def steps(self, rank: int, first: int, last: int, max_steps: int) -> bytes:
        out = []
        for step in range(first, last + 1):
            t = 1.0 / STEPS_PER_S * (1.3 if rank == 5 else 1.0)
            out.append(self.record(TRAINING_STEP, rank, step, max_steps=max_steps, step_time_s=t, data_time_s=0.002,
                                   loss=2.0 / (1 + step / 100), samples_per_s=16 / t))
            out += [self.record(COMMUNICATION, rank, step, bucket=b, duration_ms=1.5) for b in range(BUCKETS)]
            if step % 10 == 0:
                out.append(self.record(PERFORMANCE, rank, step, window_steps=10, avg_step_time_s=t))
        return b"".join(out)

    def run(self) -> None:
        per_flush = int(STEPS_PER_S * FLUSH_S)
        max_steps = int(self.seconds / FLUSH_S) * per_flush
        for r, fh in enumerate(self.files):
            fh.write(self.record(SESSION_START, r, None, max_steps=max_steps))
            fh.flush()
        step, next_gpu = 0, 10.0
        for k in range(1, int(self.seconds / FLUSH_S) + 1):
            time.sleep(max(0.0, self.t0 + k * FLUSH_S - time.monotonic()))
            for r, fh in enumerate(self.files):
                data = self.steps(r, step + 1, step + per_flush, max_steps)
                if r == 0 and time.monotonic() - self.t0 >= next_gpu:
                    data += self.record(GPU_SNAPSHOT, 0, step + per_flush)
                fh.write(data)
                fh.flush()
            next_gpu += 10.0 if time.monotonic() - self.t0 >= next_gpu else 0.0
            step += per_flush
        for r, fh in enumerate(self.files):
            fh.write(self.record(SESSION_END, r, None, status="completed", total_steps=step))
            fh.close()


# -- the reference follower: the whole files at every refresh ----------------------------------------
def reference(root: Path, refresh_s: float = 1.0) -> None:
    from logkit.ingest.jsonl_lines import read_jsonl
    from logkit.ingest.tail import Chunk, FolderTail
    from logkit.run.live_state import LiveState

    tail = FolderTail(root)
    streams = []
    out = open(os.devnull, "wb")  # noqa: SIM115
    while True:
        started = time.monotonic()
        streams += tail.discover()
        state = LiveState(started)
        for stream in streams:
            read = read_jsonl(stream.path)
            state.feed(Chunk(stream, read.records, nbytes=stream.path.stat().st_size), started)
        snap = state.snapshot(time.monotonic())
        out.write(orjson.dumps(snap.to_dict()) + b"\n")
        print("refreshed", flush=True)
        if snap.all_ended:
            return
        time.sleep(max(0.0, refresh_s - (time.monotonic() - started)))


# -- measuring ----------------------------------------------------------------------------------------
def cpu_s(proc: psutil.Process) -> float:
    t = proc.cpu_times()
    return t.user + t.system + t.children_user + t.children_system


class Follower:
    """A follower process, its output drained (a pseudo-terminal for the terminal view)."""

    def __init__(self, name: str, cmd: list[str], terminal: bool = False):
        self.name = name
        self.started = threading.Event()
        if terminal:
            master, slave = pty.openpty()
            os.set_blocking(master, True)
            env = {**os.environ, "COLUMNS": "200", "LINES": "50", "TERM": "xterm-256color"}
            self.popen = subprocess.Popen(cmd, stdin=slave, stdout=slave, stderr=slave, env=env, close_fds=True)
            os.close(slave)
            reader = lambda: os.read(master, 65536)  # noqa: E731
        else:
            self.popen = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
            reader = lambda: self.popen.stdout.read1(65536)  # noqa: E731
        self.proc = psutil.Process(self.popen.pid)
        threading.Thread(target=self._drain, args=(reader,), daemon=True).start()

    def _drain(self, read) -> None:
        while True:
            try:
                data = read()
            except OSError:
                return
            if not data:
                return
            self.started.set()


def measure(seconds: float) -> dict:
    with tempfile.TemporaryDirectory(prefix="logkit-follow-") as tmp:
        root = Path(tmp) / "logs"
        (root / SID).mkdir(parents=True)
        t_launch = time.monotonic()
        followers = [
            Follower("terminal", [str(BIN / "analyze_logs"), str(root), "--follow"], terminal=True),
            Follower("ndjson", [str(BIN / "analyze_logs"), str(root), "--follow", "--json"]),
            Follower("reference", [sys.executable, __file__, "--reference", str(root)]),
        ]
        for f in followers:
            if not f.started.wait(60):
                raise RuntimeError(f"{f.name} follower did not start")
        startup = {f.name: cpu_s(f.proc) for f in followers}
        ready_s = time.monotonic() - t_launch
        writer = subprocess.Popen([sys.executable, __file__, "--write", str(root / SID), "--seconds", str(seconds)])
        rss = {f.name: [f.proc.memory_info().rss] for f in followers}
        marks = [(time.monotonic(), {f.name: cpu_s(f.proc) for f in followers})]
        for k in (1, 2):
            time.sleep(max(0.0, marks[0][0] + k * seconds / 3 - time.monotonic()))
            marks.append((time.monotonic(), {f.name: cpu_s(f.proc) for f in followers}))
        writer.wait(timeout=seconds + 60)
        marks.append((time.monotonic(), {f.name: cpu_s(f.proc) for f in followers}))
        for f in followers:
            rss[f.name].append(f.proc.memory_info().rss)
        size = sum(p.stat().st_size for p in (root / SID).glob("*.jsonl"))
        try:
            codes = {f.name: f.popen.wait(timeout=60) for f in followers}
        finally:
            for f in followers:
                if f.popen.poll() is None:
                    f.popen.kill()
    out = {"seconds": marks[-1][0] - marks[0][0], "bytes_written": size, "ready_s": ready_s, "exit": codes,
           "startup_cpu_s": startup, "rss": rss}
    for f in followers:
        spans = [(b[1][f.name] - a[1][f.name]) / (b[0] - a[0]) for a, b in zip(marks, marks[1:], strict=False)]
        out[f.name] = {"share": (marks[-1][1][f.name] - marks[0][1][f.name]) / (marks[-1][0] - marks[0][0]),
                       "thirds": spans}
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seconds", type=float, default=90.0, help="how long the writer writes")
    p.add_argument("--write", type=Path, help=argparse.SUPPRESS)
    p.add_argument("--reference", type=Path, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.write:
        Writer(args.write, args.seconds).run()
        return
    if args.reference:
        reference(args.reference)
        return
    r = measure(args.seconds)
    mb = r["bytes_written"] / 1e6
    print(f"writer: {RANKS} ranks x {STEPS_PER_S} steps/s ({BUCKETS} sync records a step) for {r['seconds']:.0f} s: "
          f"{mb:.1f} MB of JSONL ({mb / r['seconds']:.2f} MB/s)")
    print("followers' start-up CPU (imports, first look): "
          + ", ".join(f"{k} {v:.2f} s" for k, v in r["startup_cpu_s"].items()) + f"; ready after {r['ready_s']:.1f} s")
    print(f"{'follower':<10} {'CPU, share of one core':>24} {'1st third':>10} {'2nd third':>10} {'3rd third':>10}"
          f" {'3rd / 1st':>10}")
    for name in ("terminal", "ndjson", "reference"):
        f = r[name]
        a, b, c = f["thirds"]
        print(f"{name:<10} {f['share']:>23.2%} {a:>10.2%} {b:>10.2%} {c:>10.2%} {c / a if a else float('nan'):>9.2f}x")
    ref = r["reference"]
    for name in ("terminal", "ndjson"):
        print(f"{name} / reference: {r[name]['share'] / ref['share']:.3f} over the run, "
              f"{r[name]['thirds'][2] / ref['thirds'][2]:.3f} in the last third")
    print("resident memory, writer start -> end: " + ", ".join(
        f"{k} {a / 1e6:.0f} -> {b / 1e6:.0f} MB" for k, (a, b) in r["rss"].items()))
    ok = all(r[name]["share"] <= 0.05 for name in ("terminal", "ndjson"))
    print(f"target: followers <= 5% of one core: {'met' if ok else 'NOT met'}; exit statuses {r['exit']}")


if __name__ == "__main__":
    main()
