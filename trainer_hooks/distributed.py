"""Who this process is in the job, and the one session id every rank agrees on.

torch is imported only when it is already loaded (a training process always has it). A process is
rank r of a world of n only in a process group that training uses: ``torch.distributed`` initialised,
and not set aside by accelerate (on a machine without GPUs its FSDP plugin falls back to
``DistributedType.NO``: one process that trains alone, though a group of the launcher's size was
initialised). Any other process is rank 0 of a world of 1, whatever its launcher's ``RANK`` and
``WORLD_SIZE`` say: it trains alone on all the data, and its files must say so (never rank r of n,
which would merge lone processes into one run). What the launcher said is kept (``launcher_facts``).
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
    process_group: str = "none"  # formed, none (never initialised), unused (initialised, training does not use it)
    launcher: dict | None = None  # a launcher's facts where it started several processes (launcher_facts)

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _initialised():
    """``torch.distributed`` where a process group is initialised, else None."""
    if "torch" not in sys.modules:
        return None
    try:
        import torch.distributed as dist

        return dist if dist.is_available() and dist.is_initialized() else None
    except Exception:
        return None


def accelerate_alone() -> bool:
    """accelerate's state says this process trains alone (``DistributedType.NO``, one process), read from
    its shared state where accelerate is loaded and its state made (never imported here)."""
    state = sys.modules.get("accelerate.state")
    shared = getattr(getattr(state, "PartialState", None), "_shared_state", None) if state else None
    if not shared:
        return False
    kind = shared.get("distributed_type")
    return getattr(kind, "value", kind) == "NO" and shared.get("num_processes") == 1


def _dist():
    """``torch.distributed`` where this process is in a process group that training uses, else None."""
    dist = _initialised()
    return None if dist is None or accelerate_alone() else dist


def launcher_facts(env=os.environ) -> dict | None:
    """What the launcher told this process (None where it started one process, or none started it):
    its name, ``WORLD_SIZE``, ``RANK``, ``LOCAL_RANK`` and the rendezvous address."""
    world = _int(env.get("WORLD_SIZE"))
    if world is None or world <= 1:
        return None
    if any(k.startswith("ACCELERATE_") for k in env):
        name = "accelerate launch"
    elif "TORCHELASTIC_RUN_ID" in env:
        name = "torchrun"
    elif "OMPI_COMM_WORLD_SIZE" in env or "PMI_SIZE" in env:
        name = "mpirun"
    elif "SLURM_PROCID" in env:
        name = "srun"
    else:
        name = "environment"
    master = f"{env['MASTER_ADDR']}:{env['MASTER_PORT']}" if env.get("MASTER_ADDR") and env.get("MASTER_PORT") else None
    return {"name": name, "world_size": world, "rank": _int(env.get("RANK")), "local_rank": _int(env.get("LOCAL_RANK")),
            "master": master}


def _int(value) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def rank_info() -> RankInfo:
    """Rank, world size, local rank, backend and device of this process (see the module doc)."""
    env = os.environ
    dist = _dist()
    launcher = launcher_facts(env)
    if dist is not None:
        rank, world, backend = dist.get_rank(), dist.get_world_size(), str(dist.get_backend())
        local_rank, group = int(env.get("LOCAL_RANK", 0)), "formed"
    else:  # alone: the only rank of its own session
        rank, world, backend, local_rank = 0, 1, None, 0
        group = "unused" if _initialised() is not None else "none"
    device = "cpu"
    torch = sys.modules.get("torch")
    try:
        if torch is not None and torch.cuda.is_available():
            device = f"cuda:{torch.cuda.current_device()}"
    except Exception:
        pass
    return RankInfo(rank, world, local_rank, backend, device, socket.gethostname(), group, launcher)


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
    dist = _dist()
    if sid is not None and (dist is None or info.world_size <= 1):
        return _claim_alone(log_dir, safe_session_id(sid), info.rank)
    if sid is not None:
        sid = _unclaimed(log_dir, safe_session_id(sid), info.rank)
    if info.rank == 0 and sid is None:
        try:
            sid, _ = create_session_dir(log_dir)
            claim_stream(log_dir / sid, sid, info.rank)  # before the broadcast, which may never return
        except OSError:
            sid = f"training_{datetime.now().strftime('%Y%m%d_%H%M%S')}"
    if dist is not None and info.world_size > 1:
        box = [sid]
        dist.broadcast_object_list(box, src=0)
        sid = box[0]
    if sid is None:
        sid, _ = create_session_dir(log_dir)
    (log_dir / sid).mkdir(parents=True, exist_ok=True)
    claim_stream(log_dir / sid, sid, info.rank)
    return sid


def _claim_alone(log_dir: Path, sid: str, rank: int) -> str:
    """A process without a group given an id: ``sid`` or the first ``sid_N`` whose stream of ``rank`` it
    creates itself (an exclusive create: processes started together with the same id, none of which
    can ask the others, each get a folder of their own)."""
    for n in range(1, 10_000):
        candidate = sid if n == 1 else f"{sid}_{n}"
        folder = log_dir / candidate
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(folder / SessionFiles(candidate).rank_jsonl(rank), "x"):
                return candidate
        except FileExistsError:
            continue
        except OSError:
            return candidate  # an unwritable folder: the writer says so when it first writes
    raise FileExistsError(f"no free session folder name under {log_dir} for {sid}")


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
