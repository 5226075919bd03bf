"""Which timing source times a session's collectives, installed: the DDP comm hook for DDP, FSDP2's comm
objects for ``fully_shard``, torch.distributed's wrapped collectives (``dist_timing``) for FSDP1, DeepSpeed
and any other wrapper; ``session_start`` states its name (``timing_source``) or why none (``timing_note``).
"""

from __future__ import annotations

from trainer_hooks import dist_timing
from trainer_hooks.commhook import CommTimer, find_ddp, install_comm_hook
from trainer_hooks.fsdp_comm import FsdpCommTimer
from trainer_hooks.fsdp_comm import install as install_fsdp

# how each strategy's collectives are timed (the others: torch_distributed)
TIMING_SOURCE = {"ddp": "ddp_comm_hook", "fsdp2": "fsdp2_comm"}


def has_collectives(info) -> bool:
    """Whether the rank's training makes collectives to time: several ranks, or a process group of one that
    training uses (a wrapper on one GPU still issues its collectives: what a one-GPU check of the timing runs)."""
    return info.world_size > 1 or info.process_group == "formed"


def install_timing(strategy: str, model, ddp_timer: CommTimer):
    """Install the timing source of ``strategy`` for ``model``: (timer, dist_timing's installed wrappers or
    None, source name, None), or (None, None, "none", why). ``ddp_timer``: the DDP hook's timer."""
    if strategy == "fsdp2":
        timer = FsdpCommTimer()
        why = install_fsdp(model, timer)
        installed = None
    elif strategy == "ddp" or (strategy == "none" and find_ddp(model) is not None):
        strategy, timer, installed = "ddp", ddp_timer, None
        why = install_comm_hook(find_ddp(model), timer)
    else:  # fsdp1, deepspeed, a wrapper not known or none: whatever reaches torch.distributed
        timer = dist_timing.DistTimer()
        installed, why = dist_timing.install(timer, model)
    if why is not None:
        return None, None, "none", why
    return timer, installed, TIMING_SOURCE.get(strategy, "torch_distributed"), None
