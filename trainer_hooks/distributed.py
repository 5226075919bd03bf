"""Who this process is in the job, and the one session id every rank agrees on.

torch is imported only when it is already loaded (a training process always has it);
outside a process group the launcher's environment variables answer.
"""

from __future__ import annotations

import os
import re
import socket
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from logkit.schema.files import SessionFiles


@dataclass(frozen=True)
class RankInfo:
    rank: int
    world_size: int
    local_rank: int
    backend: str | None
    device: str
    hostname: str

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _dist():
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist

        return dist if dist.is_available() and dist.is_initialized() else None
    except Exception:
        return None


def rank_info() -> RankInfo:
    """Rank, world size, local rank, backend and device of this process."""
    env = os.environ
    dist = _dist()
    if dist is not None:
        rank, world, backend = dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
    else:
        rank, world, backend = int(env.get("RANK", 0)), int(env.get("WORLD_SIZE", 1)), None
    local_rank = int(env.get("LOCAL_RANK", 0))
    device = "cpu"
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            device = f"cuda:{torch.cuda.current_device()}"
    except Exception:
        pass
    return RankInfo(rank, world, local_rank, backend, device, socket.gethostname())


def create_session_dir(log_dir: Path, now: float | None = None, prefix: str = "training") -> tuple[str, Path]:
    """Create ``log_dir/<prefix>_YYYYmmdd_HHMMSS`` (suffix _2, _3 ... if taken); return (id, path)."""
    base = f"{prefix}_{datetime.fromtimestamp(now or time.time()).strftime('%Y%m%d_%H%M%S')}"
    log_dir.mkdir(parents=True, exist_ok=True)
    for n in range(1, 10_000):
        sid = base if n == 1 else f"{base}_{n}"
        path = log_dir / sid
        try:
            path.mkdir()
            return sid, path
        except FileExistsError:
            continue
    raise FileExistsError(f"no free session folder name under {log_dir} for {base}")


_UNSAFE = re.compile(r"[^A-Za-z0-9._-]")


def safe_session_id(sid: str) -> str:
    """``sid`` as a folder name that stays inside the log folder and that a reader lists: characters
    other than letters, digits, ``.``, ``_`` and ``-`` become ``_`` (so no ``/`` nor ``..`` path),
    leading dots too (a hidden folder is skipped by whoever lists the folder), and a name of dots
    only becomes ``training``; at most 200 characters (its files' names stay under 255 bytes).

    >>> safe_session_id("../../etc"), safe_session_id("run 7/a"), safe_session_id(".."), safe_session_id(".x")
    ('___.._etc', 'run_7_a', 'training', '_x')
    """
    out = _UNSAFE.sub("_", str(sid))[:200]
    if not out.strip("."):
        return "training"
    dots = len(out) - len(out.lstrip("."))
    return "_" * dots + out[dots:]


def _unclaimed(log_dir: Path, sid: str, rank: int) -> str:
    """``sid``, or ``sid_2``, ``sid_3`` ...: the first whose folder has no stream of this rank yet, so
    that a second run given the same id never appends to the first run's streams. Every rank
    applies the same rule, so ranks that cannot talk to each other still pick the same folder."""
    for n in range(1, 10_000):
        candidate = sid if n == 1 else f"{sid}_{n}"
        if not (log_dir / candidate / SessionFiles(candidate).rank_jsonl(rank)).exists():
            return candidate
    raise FileExistsError(f"no free session folder name under {log_dir} for {sid}")


def agree_session_id(log_dir: Path, info: RankInfo, session_id: str | None = None) -> str:
    """Rank 0 picks the id (and creates the folder), then broadcasts it to every rank.

    A collective: every rank must call it at the same point, so rank 0 reaches the
    broadcast even when it cannot create the folder (the caller then finds the folder
    unwritable and degrades). Without a process group the id comes from
    ``LOGKIT_SESSION_ID`` when set, else each process picks its own. An id asked for is made a
    safe folder name and, when another run already wrote under it, gets a suffix
    (``safe_session_id``, ``_unclaimed``).
    """
    sid = session_id or os.environ.get("LOGKIT_SESSION_ID")
    if sid is not None:
        sid = _unclaimed(log_dir, safe_session_id(sid), info.rank)
    if info.rank == 0 and sid is None:
        try:
            sid, _ = create_session_dir(log_dir)
            claim_stream(log_dir / sid, sid, info.rank)  # before the broadcast, which may never return
        except OSError:
            sid = f"training_{datetime.now().strftime('%Y%m%d_%H%M%S')}"
    dist = _dist()
    if dist is not None and info.world_size > 1:
        box = [sid]
        dist.broadcast_object_list(box, src=0)
        sid = box[0]
    if sid is None:
        sid, _ = create_session_dir(log_dir)
    (log_dir / sid).mkdir(parents=True, exist_ok=True)
    claim_stream(log_dir / sid, sid, info.rank)
    return sid


def claim_stream(folder: Path, sid: str, rank: int) -> None:
    """This rank's stream, created empty as soon as its session folder exists: a run killed before
    the writer's first flush (or hung in its start) still leaves a session that its file names
    identify (its id, its ranks), and another run given the same id takes another folder."""
    try:
        (folder / SessionFiles(sid).rank_jsonl(rank)).touch(exist_ok=True)
    except OSError:
        pass  # an unwritable folder: the writer says so when it first writes


def measure_clock_offset(info: RankInfo, rounds: int = 5) -> tuple[float, float]:
    """(this host's monotonic clock minus rank 0's host's, the uncertainty), in seconds.

    A collective (every rank calls it, right after ``agree_session_id``): ``rounds`` times, a
    barrier, then every rank reads its clock and the readings are exchanged. The ranks leave a
    barrier within its release latency of each other, so each round's difference to rank 0
    is the offset give or take that latency; the median is kept, half the spread over the
    rounds is the uncertainty. Ranks on rank 0's host share its clock (CLOCK_MONOTONIC is
    one clock for every process of a host): (0, 0), as without a process group.
    """
    dist = _dist()
    if dist is None or info.world_size <= 1:
        return 0.0, 0.0
    diffs, host0 = [], None
    for _ in range(rounds):
        dist.barrier()
        now = time.perf_counter()
        gathered: list = [None] * info.world_size
        dist.all_gather_object(gathered, (info.hostname, now))
        host0, t0 = gathered[0]
        diffs.append(now - t0)
    if host0 == info.hostname:
        return 0.0, 0.0
    diffs.sort()
    return diffs[len(diffs) // 2], (diffs[-1] - diffs[0]) / 2
