"""The frames of a traceback that say what a sharded step was doing: FSDP1's and FSDP2's hooks and
collectives, DeepSpeed ZeRO's parameter fetch and gradient reduction, checkpoint saving.

``sharded_frame(line)`` reads a traceback's ``File "...", line N, in <function>`` line and returns
``(phase, what)`` when the function is one of ``FRAMES`` in a file of that wrapper (torch's
``distributed/fsdp/`` or ``deepspeed/``), else None. The innermost such frame of a traceback is the
phase its exception was raised in (the console reader keeps the last one seen).
"""

from __future__ import annotations

import re

_LINE = re.compile(r'^\s*File "(?P<path>[^"]+)", line (?P<line>\d+), in (?P<func>[\w<>.]+)')

# (path part, function) -> (phase, what the function does); the path part keeps a user's function of
# the same name out
FRAMES: dict[tuple[str, str], tuple[str, str]] = {
    # FSDP1 (torch distributed/fsdp/_runtime_utils.py, _flat_param.py)
    ("distributed/fsdp/", "_pre_forward"): ("forward", "FSDP1 pre-forward: gathering a unit's parameters"),
    ("distributed/fsdp/", "_pre_forward_unshard"): ("forward", "FSDP1 pre-forward unshard: gathering a unit's parameters"),
    ("distributed/fsdp/", "_pre_backward_hook"): ("backward", "FSDP1 pre-backward: gathering a unit's parameters again"),
    ("distributed/fsdp/", "_post_backward_hook"): ("backward", "FSDP1 post-backward: reducing a unit's gradients"),
    ("distributed/fsdp/", "_reduce_grad"): ("backward", "FSDP1 post-backward: reduce-scattering a unit's gradients"),
    ("distributed/fsdp/", "_post_backward_final_callback"): ("backward", "FSDP1 end of backward"),
    ("distributed/fsdp/", "state_dict"): ("checkpoint", "FSDP state_dict: gathering parameters to save"),
    ("distributed/fsdp/", "_full_post_state_dict_hook"): ("checkpoint", "FSDP full state_dict: gathering parameters to save"),
    # FSDP2 (torch distributed/fsdp/_fully_shard/)
    ("_fully_shard/", "pre_forward"): ("forward", "FSDP2 pre-forward: all-gathering a unit's parameters"),
    ("_fully_shard/", "pre_backward"): ("backward", "FSDP2 pre-backward: all-gathering a unit's parameters again"),
    ("_fully_shard/", "post_backward"): ("backward", "FSDP2 post-backward: reduce-scattering a unit's gradients"),
    ("_fully_shard/", "foreach_all_gather"): ("", "FSDP2 all-gather of a unit's parameters"),
    ("_fully_shard/", "foreach_reduce"): ("backward", "FSDP2 reduce-scatter of a unit's gradients"),
    # DeepSpeed ZeRO (deepspeed/runtime/zero/)
    ("deepspeed/", "fetch_sub_module"): ("", "ZeRO-3 fetch: all-gathering a module's partitioned parameters"),
    ("deepspeed/", "_pre_forward_module_hook"): ("forward", "ZeRO-3 pre-forward: gathering a module's parameters"),
    ("deepspeed/", "_pre_backward_module_hook"): ("backward", "ZeRO-3 pre-backward: gathering a module's parameters"),
    ("deepspeed/", "reduce_partition_and_remove_grads"): ("backward", "ZeRO reduction of gradient partitions"),
    ("deepspeed/", "reduce_independent_p_g_buckets_and_remove_grads"): ("backward", "ZeRO-2 gradient bucket reduction"),
    ("deepspeed/", "reduce_ipg_grads"): ("backward", "ZeRO gradient bucket reduction"),
    ("deepspeed/", "average_tensor"): ("backward", "ZeRO gradient reduction (reduce-scatter / all-reduce)"),
    ("deepspeed/", "allreduce_gradients"): ("backward", "ZeRO gradient all-reduce after backward"),
    ("deepspeed/", "all_gather_dp_groups"): ("optimizer", "ZeRO-1/2 all-gather of the updated partitions"),
    ("deepspeed/", "save_checkpoint"): ("checkpoint", "DeepSpeed checkpoint save"),
}


def sharded_frame(line: str) -> tuple[str, str, str] | None:
    """(phase, what, 'function (file:line)') of a traceback frame line in a sharded wrapper's code, else None.
    ``phase`` is "" where the function runs in forward and backward alike (the outer frames decide)."""
    if "File \"" not in line or (m := _LINE.match(line)) is None:
        return None
    path, func = m["path"].replace("\\", "/"), m["func"].rsplit(".", 1)[-1]
    for (part, name), (phase, what) in FRAMES.items():
        if func == name and part in path:
            return phase, what, f"{func} ({path.rsplit('/', 1)[-1]}:{m['line']})"
    return None


class ShardedFrames:
    """The sharded frames of the traceback being read (the console reader's): ``see`` each traceback line
    (a ``Traceback`` line starts afresh), ``fields`` for the event its exception line makes, ``take`` to
    give them and start afresh."""

    def __init__(self) -> None:
        self.frames: list[tuple[str, str, str]] = []

    def see(self, line: str) -> None:
        if line.lstrip().startswith("Traceback"):
            self.frames = []
        elif (found := sharded_frame(line)) is not None:
            self.frames.append(found)

    def fields(self) -> dict:
        """``phase``: the innermost frame's that names one; ``phase_detail``: what the innermost one was
        doing, where. None without a sharded frame."""
        frames = self.frames
        if not frames:
            return {}
        phase = next((f[0] for f in reversed(frames) if f[0]), None)
        return {"phase": phase, "phase_detail": f"{frames[-1][1]}, in {frames[-1][2]}"}

    def take(self) -> dict:
        out, self.frames = self.fields(), []
        return out
