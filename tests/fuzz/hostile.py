"""Hostile folders, built at test time (never committed): what people point ``analyze_logs`` at when it
is whatever holds their logs. Each builder lays one out under a folder and says what the answer must
mention (a word of the diagnostic of the file not read), or None where it only has to answer.

``scale``: ``"fast"`` (the fast suite: hundreds of files, bombs of tens of MB with the limits lowered)
or ``"full"`` (``make fuzz``: 20,000 files, 20,000 rank streams, a gzip bomb of 1 GB).
"""

from __future__ import annotations

import gzip
import json
import os
import shutil
import socket
import threading
import zlib
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from logkit.ingest.safe_io import LIMITS
from tests.support.launch import REPO

SAMPLE = REPO / "sample_logs/why_slow/logs/training_20261123_074813"
SID = SAMPLE.name
CONSOLE = REPO / "sample_logs/console/torchrun_nccl_timeout.log"
PIPELINE = REPO / "sample_logs/pipeline_sessions/sessions/v1/multi_gpu"


def _session(folder: Path) -> Path:
    out = folder / SID
    shutil.copytree(SAMPLE, out)
    return out


def _replace(path: Path, make: Callable[[Path], None]) -> None:
    path.unlink(missing_ok=True)
    make(path)


def _fifo(where: str) -> Callable[[Path], str]:
    def build(folder: Path) -> str:
        if where == "log":
            shutil.copy(CONSOLE, folder / "console.log")
            os.mkfifo(folder / "train.log")
            return "FIFO"
        session = _session(folder)
        _replace(session / f"{SID}_{where}", os.mkfifo)
        return "FIFO"
    return build


def _link_to(target: str, where: str, expect: str) -> Callable[[Path], str]:
    def build(folder: Path) -> str:
        if where == "trainer_state.json":
            run = folder / "v1" / "run"
            shutil.copytree(PIPELINE, run)
            _replace(run / where, lambda p: p.symlink_to(target))
        else:
            _replace(_session(folder) / f"{SID}_{where}", lambda p: p.symlink_to(target))
        return expect
    return build


def _socket(folder: Path) -> str:
    shutil.copy(CONSOLE, folder / "console.log")
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.bind(str(folder / "train.log"))
    finally:
        sock.close()
    return "socket"


def _device(folder: Path) -> str:
    root = folder / "inside"
    _session(root)
    (root / SID / "extra_rank3.jsonl").symlink_to("/dev/zero")  # inside the folder read: a link it follows
    os.symlink("/dev/urandom", root / "noise.log")
    return "device"


def _bad_names(folder: Path) -> str | None:
    odd = os.fsdecode(b"run_\xff\xfe")
    shutil.copytree(SAMPLE, folder / odd)
    shutil.copy(CONSOLE, folder / os.fsdecode(b"train\xe9.log"))
    named = folder / "named"
    named.mkdir()
    for path in SAMPLE.iterdir():
        (named / os.fsdecode(path.name.replace(SID, "tr\udcff"))).write_bytes(path.read_bytes())
    return None


def _bomb(size: int, name: str) -> Callable[[Path], str]:
    def build(folder: Path) -> str:
        if name == "rank":
            target = _session(folder) / f"{SID}_rank1.jsonl"
            target.unlink()
            path = target.with_name(target.name + ".gz")
        else:
            path = folder / "train.log.gz"
        block = (b"\n" if name == "rank" else b"a") * (1 << 20)
        comp = zlib.compressobj(9, zlib.DEFLATED, 31)  # a gzip stream
        with open(path, "wb") as fh:
            fh.write(comp.compress(b"" if name == "rank" else b"NCCL INFO Bootstrap : Using eth0\n"))  # a log
            for _ in range(size >> 20):
                fh.write(comp.compress(block))
            fh.write(comp.flush())
        return "inflates past"
    return build


def _truncated_gzip(folder: Path) -> str:
    session = _session(folder)
    stream = session / f"{SID}_rank1.jsonl"
    data = gzip.compress(stream.read_bytes())
    stream.unlink()
    (session / f"{SID}_rank1.jsonl.gz").write_bytes(data[: len(data) // 2])
    return "unreadable"


def _long_line(folder: Path) -> str:
    stream = _session(folder) / f"{SID}_rank1.jsonl"
    with open(stream, "ab") as fh:
        fh.write(b"{" + b" " * (70 << 20))  # no newline for 70 MB
    return ("more than", "torn last line")


def _many_files(n: int) -> Callable[[Path], str | None]:
    def build(folder: Path) -> str | None:
        logs, other = folder / "logs", folder / "other"
        logs.mkdir()
        other.mkdir()
        for i in range(n):
            (logs / f"job_{i}.log").write_bytes(b"NCCL INFO Bootstrap : Using eth0\n")
            (other / f"note_{i}.txt").write_bytes(b"nothing to see\n")
        return "read as one session"
    return build


def _many_ranks(n: int, sessions: int = 50) -> Callable[[Path], None]:
    def build(folder: Path) -> None:
        records = [json.loads(line) for line in (SAMPLE / f"{SID}_rank1.jsonl").read_text().splitlines()]
        first: dict = {}
        for r in records:
            first.setdefault(r["type"], r)
        pick = [records[0]] + [first[t] for t in ("training_step_complete", "communication") if t in first] \
            + [records[-1]]
        per = max(1, n // sessions)
        for s in range(sessions):
            sid = f"training_20270101_{s:06d}"
            (folder / sid).mkdir()
            for rank in range(per):
                lines = [json.dumps({**r, "session_id": sid, "rank": rank, "world_size": per}) for r in pick]
                (folder / sid / f"{sid}_rank{rank}.jsonl").write_text("\n".join(lines) + "\n")
    return build


def _values(folder: Path) -> str:
    """Values that cannot be right, one per file: each a diagnostic, never a crash or a fact."""
    session = _session(folder / "a")
    summary = session / f"{SID}_summary.json"
    doc = json.loads(summary.read_text())
    doc.update(gpus=5, total_batch_size="sixteen", world_size=0, duration_seconds=-3, communication=[1])
    summary.write_text(json.dumps(doc))
    run = folder / "b" / "v1" / "run"
    shutil.copytree(PIPELINE, run)
    results = json.loads((run / "results.json").read_text())
    results["num_gpus"] = 10**30
    (run / "results.json").write_text(json.dumps(results))
    state = json.loads((run / "trainer_state.json").read_text())
    state["total_flos"] = 10**400
    state["log_history"][0]["loss"] = 10**400
    (run / "trainer_state.json").write_text(json.dumps(state))
    console = folder / "c"
    console.mkdir()
    (console / "launch.log").write_text(
        "torchrun --nproc_per_node=0x10 --nnodes=0 train.py\n"
        "[rank12345678901234567890123]: {'loss': 1.0, 'grad_norm': 1.0, 'learning_rate': 1e-4, 'epoch': 0.1}\n"
        "[rank12345678901234567890123]: RuntimeError: NCCL error\n")
    (folder / "d").mkdir()
    (folder / "d" / "deep_summary.json").write_text("[" * 100_000 + "]" * 100_000)
    return "left unknown"


def _hidden_session(folder: Path) -> None:
    """A session folder whose name begins with a dot (an earlier emitter's ``.._.._x``): read."""
    src = SAMPLE
    sid = ".._.._x"
    (folder / sid).mkdir()
    for path in src.iterdir():
        (folder / sid / path.name.replace(SID, sid)).write_bytes(path.read_bytes())


@contextmanager
def limits_for(scale: str):
    """The reading limits a scale's bombs trip: at ``"fast"``, a 32 MB bomb past 1 MB at 10x."""
    if scale != "fast":
        yield
        return
    saved = (LIMITS.inflate_floor, LIMITS.inflate_ratio)
    LIMITS.inflate_floor, LIMITS.inflate_ratio = 1 << 20, 10
    try:
        yield
    finally:
        LIMITS.inflate_floor, LIMITS.inflate_ratio = saved


class Growing:
    """A rank stream another job keeps writing while it is read: started with the read, stopped after."""

    def __init__(self, path: Path) -> None:
        self.path, self.stop, self.thread = path, threading.Event(), None

    def start(self) -> None:
        line = (self.path.read_text().splitlines()[-1] + "\n").encode()

        def write():
            with open(self.path, "ab") as fh:
                while not self.stop.is_set():
                    fh.write(line * 200)
                    fh.flush()
        self.thread = threading.Thread(target=write, daemon=True)
        self.thread.start()

    def end(self) -> None:
        self.stop.set()
        if self.thread is not None:
            self.thread.join()


def _growing(folder: Path) -> Growing:
    return Growing(_session(folder) / f"{SID}_rank1.jsonl")


def corpus(scale: str = "fast") -> dict[str, Callable[[Path], object]]:
    """The hostile folders by name: builder(folder) -> the word the answer must say (or None; a ``Growing``
    for a file written while it is read)."""
    full = scale == "full"
    return {
        "fifo_rank_stream": _fifo("rank1.jsonl"), "fifo_summary": _fifo("summary.json"), "fifo_log": _fifo("log"),
        "socket_log": _socket, "devices_inside": _device,
        "zero_rank_stream": _link_to("/dev/zero", "rank1.jsonl", "device"),
        "zero_summary": _link_to("/dev/zero", "summary.json", "device"),
        "zero_trainer_state": _link_to("/dev/zero", "trainer_state.json", "device"),
        "proc_mem_link": _link_to("/proc/self/mem", "main.log", "link out of the folder"),
        "dangling_link": _link_to("/nonexistent/logkit-fuzz", "rank1.jsonl", "dangling link"),
        "link_out_of_folder": _link_to("/etc/hostname", "main.log", "link out of the folder"),
        "names_not_utf8": _bad_names, "gzip_bomb_stream": _bomb((1 << 30) if full else (32 << 20), "rank"),
        "gzip_bomb_log": _bomb((1 << 30) if full else (32 << 20), "log"), "gzip_truncated": _truncated_gzip,
        "line_without_end": _long_line, "values_out_of_range": _values, "hidden_session_folder": _hidden_session,
        "many_tiny_files": _many_files(20_000 if full else 300),
        "many_rank_streams": _many_ranks(20_000, 50) if full else _many_ranks(140, 2), "growing_stream": _growing,
    }
