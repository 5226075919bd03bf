"""Processes that a launcher started together but that formed no process group: each trained alone on
all the data, and each is a session of its own (world size 1, ``session_start``'s ``process_group``
``none`` or ``unused``, its ``launcher`` the facts the launcher gave it). One finding per launch: the
sessions of one host whose launcher names the same launcher, world size and rendezvous address, started
within ``SAME_LAUNCH_S`` of each other.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import PurePath

from logkit.analysis.results import Finding
from logkit.schema.findings import FindingKind

SAME_LAUNCH_S = 120.0  # processes of one launch start their sessions within this of each other
# why the process was alone, by session_start's process_group
WHY = {"none": "init_process_group was never called",
       "unused": "a process group was initialised but training did not use it (accelerate's DistributedType.NO: "
                 "on a machine without GPUs its FSDP plugin falls back to one process per launch)"}
ADVICE = {"none": "call torch.distributed.init_process_group (torchrun sets the rendezvous) before wrapping the "
                  "model, or let accelerate / the Trainer do it",
          "unused": "run FSDP where accelerate finds devices, or launch with --multi_gpu (DDP on gloo) on CPUs"}


def _start(meta) -> float | None:
    try:
        return datetime.fromisoformat(str(meta.start_time)).timestamp()
    except (TypeError, ValueError):
        return None


def _launches(sessions) -> list[list]:
    """The lone sessions, grouped by launch (see the module doc), each group in start order."""
    keyed: dict = {}
    for s in sessions:
        m, launcher = s.meta, s.meta.launcher
        if m.process_group not in WHY or not isinstance(launcher, dict) or not (launcher.get("world_size") or 0) > 1:
            continue
        key = (m.hostname, launcher.get("name"), launcher.get("world_size"), launcher.get("master"))
        keyed.setdefault(key, []).append(s)
    out = []
    for members in keyed.values():
        members.sort(key=lambda s: _start(s.meta) or 0.0)
        group, last = [], None
        for s in members:
            t = _start(s.meta)
            if group and t is not None and last is not None and t - last > SAME_LAUNCH_S:
                out.append(group)
                group = []
            group.append(s)
            last = t if t is not None else last
        out.append(group)
    return out


def lone_process_findings(sessions) -> list[Finding]:
    """One finding per launch whose processes formed no process group."""
    kind = FindingKind.NO_PROCESS_GROUP
    out = []
    for group in _launches(sessions):
        first = group[0].meta
        launcher = first.launcher
        world, name, master = launcher.get("world_size"), launcher.get("name"), launcher.get("master")
        why = sorted({s.meta.process_group for s in group})
        ids = [str(s.meta.session_id) for s in group]
        ranks = [s.meta.launcher.get("rank") for s in group]
        logged = "it logged" if len(group) == 1 else "they logged"
        detail = (f"{name} started {world} processes (WORLD_SIZE={world}"
                  + (f", rendezvous {master}" if master else "") + f", host {first.hostname}); "
                  + f"{len(group)} of them ({', '.join(f'RANK={r}' for r in ranks)}) {logged} here as sessions of "
                  + f"their own, each rank 0 of a world of 1: {', '.join(ids)}. Why: "
                  + "; ".join(WHY[w] for w in why) + ". Their losses are separate runs on the same data, not one "
                  + "run's ranks. To train together: " + "; ".join(ADVICE[w] for w in why) + ".")
        evidence = [PurePath(p).name for s in group for p in (s.meta.files or []) if str(p).endswith(".jsonl")]
        out.append(Finding.make(kind.severity, kind, first.session_id,
                                f"{world} processes were launched but formed no process group: each trained alone "
                                "on all the data", detail, evidence or ids, ranks, sessions=ids, launcher=name,
                                launcher_world_size=world))
    return out
