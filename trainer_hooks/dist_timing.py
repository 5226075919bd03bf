"""The ``torch_distributed`` timing source: every collective any wrapper issues through torch.distributed's
Python functions (FSDP1, DeepSpeed ZeRO, a hand-written loop), timed at the call, for the logger's lifetime.

FSDP1 calls ``dist.all_gather_single`` / ``dist.all_gather`` (CPU) and ``dist.reduce_scatter_single`` by
module attribute at call time (torch ``distributed/fsdp/_flat_param.py``, ``_runtime_utils.py``); DeepSpeed's
``deepspeed.comm`` calls ``torch.distributed.<op>`` and ``torch.distributed.distributed_c10d.<op>`` the same
way, except the all-gather and reduce-scatter functions its ``TorchBackend`` binds once at init
(``cdb.all_gather_function`` / ``cdb.reduce_scatter_function``, ``deepspeed/comm/torch.py``). ``install``
replaces each collective of ``FUNCTIONS`` in both namespaces (and those two bound references where
deepspeed is loaded: it is never imported here) by a timing wrapper; ``uninstall`` puts the originals
back wherever the wrapper is still in place.

A wrapper calls the original with the same arguments and returns what it returns. It times only the
outermost collective of a thread (``all_gather_into_tensor`` calls ``all_gather_single``; a DDP comm hook or
an FSDP2 comm object, timed already, calls ``all_reduce`` / ``all_gather_into_tensor`` inside
``commhook.outer_call``), and nothing outside a step (the logger's own start-up collectives are over
before it installs; evaluation and checkpoints between steps are not a step's work).

Per call: the op, the bytes nccl-tests counts (an all-gather's whole output, a reduce-scatter's whole
input, an all-reduce's or broadcast's buffer), the group's size, and the phase: ``backward`` while
autograd runs a graph task; else as the hooks say: ``forward`` from the model's forward pre-hook (and at
the step's start), ``backward`` from its forward hook on (so the gradient reduction DeepSpeed runs after
autograd, in ``engine.backward``, is backward), ``optimizer`` from torch's global optimizer-step pre-hook
on (ZeRO's all-gather of the updated partitions). Its time from launch to completion: wall time on CPU
(a blocking call: around it; an ``async_op`` call: to its future's completion); on CUDA a pair of events
on the stream the collective is launched from (``FsdpCommTimer.start``; the end after a blocking call, or
in the future's callback, whose stream is synchronised with the kernel), read later with ``query()``:
the training stream never waits. A collective issued inside torch's coalescing manager returns no Work
to time: it is not counted.
"""

from __future__ import annotations

import inspect
import sys

from trainer_hooks.commhook import _local, _seconds
from trainer_hooks.fsdp_comm import ALL_GATHER, REDUCE_SCATTER, FsdpCommTimer

ALL_REDUCE, BROADCAST, REDUCE, ALL_TO_ALL = "all_reduce", "broadcast", "reduce", "all_to_all"

# torch.distributed function -> (the op it is, the parameter whose tensor(s) nccl-tests counts)
FUNCTIONS = {
    "all_reduce": (ALL_REDUCE, "tensor"),
    "all_reduce_coalesced": (ALL_REDUCE, "tensors"),
    "broadcast": (BROADCAST, "tensor"),
    "reduce": (REDUCE, "tensor"),
    "all_gather": (ALL_GATHER, "tensor_list"),
    "all_gather_single": (ALL_GATHER, "output_tensor"),
    "all_gather_into_tensor": (ALL_GATHER, "output_tensor"),
    "_all_gather_base": (ALL_GATHER, "output_tensor"),
    "all_gather_coalesced": (ALL_GATHER, "output_tensor_lists"),
    "reduce_scatter": (REDUCE_SCATTER, "input_list"),
    "reduce_scatter_single": (REDUCE_SCATTER, "input"),
    "reduce_scatter_tensor": (REDUCE_SCATTER, "input"),
    "_reduce_scatter_base": (REDUCE_SCATTER, "input"),
    "all_to_all_single": (ALL_TO_ALL, "input"),
}
# deepspeed's TorchBackend attributes bound to a torch function at its init
_BOUND = ("all_gather_function", "reduce_scatter_function")
GRADIENT_OPS = (REDUCE_SCATTER, ALL_REDUCE)

def _nbytes(value) -> int:
    """Bytes of a tensor, or of the tensors of a (nested) list."""
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return value.numel() * value.element_size()


def _first_tensor(value):
    while isinstance(value, (list, tuple)):
        value = value[0]
    return value


class DistTimer(FsdpCommTimer):
    """The timings of the collectives torch.distributed's wrapped functions issue. ``pending`` items:
    (index, bytes, start, end, seq, op, phase, group_size); ``collect`` gives ``(step, index, op, phase, bytes,
    seconds, group_size)`` per collective (``index``: its launch order in the step). A step's gradient
    collectives (a reduce-scatter or an all-reduce in backward) give its phases as FSDP2's reduce-scatters
    do."""

    one_pass = False  # its items carry their group size: read one by one (FsdpCommTimer.absorb)

    def __init__(self) -> None:
        super().__init__()
        self.in_step = False
        self.phase = "forward"  # set by the model's forward hooks and torch's optimizer-step hook (install)

    def step_begin(self) -> None:
        super().step_begin()
        self.in_step, self.phase = True, "forward"

    def take(self, step: int) -> tuple:
        self.in_step = False  # until the next step begins (evaluation, checkpoints: not a step's work)
        return super().take(step)

    # the phase hooks (install): a forward starts, a forward ended (its backward and the gradient reduction
    # that follows it, DeepSpeed's in engine.backward, come next), an optimizer step starts
    def forward_begins(self, *_):
        self.phase = "forward"

    def forward_ended(self, *_):
        self.phase = "backward"

    def optimizer_begins(self, *_):
        self.phase = "optimizer"

    def call(self, fn, op: str, name: str, pos: int, group_pos: int, async_pos: int, args, kwargs):
        """One wrapped call (training thread): the original's result, timed where it can be."""
        try:
            counted = args[pos] if len(args) > pos else kwargs[name]
            size = _nbytes(counted)
            tensor = _first_tensor(counted)
            group = args[group_pos] if len(args) > group_pos else kwargs.get("group")
            async_op = args[async_pos] if len(args) > async_pos else kwargs.get("async_op", False)
            start = self.start(tensor)
        except Exception:  # an argument this code does not know: the call goes on untimed
            return fn(*args, **kwargs)
        _local.depth, self.calling = 1, (op, None)  # where() sees a blocking call's wait, and an error's call
        try:
            work = fn(*args, **kwargs)
        finally:
            _local.depth = 0
        self.calling = None
        self.issued_op(op, size, _group_size(group), start, work if async_op else None)
        return work

    def issued_op(self, op: str, size: int, n: int | None, start, work) -> None:
        phase = "backward" if _graph_task_id() != -1 else self.phase  # autograd's graph task: -1 outside backward
        seq = self.launched
        self.launched, self.last_bucket, self.last_op, self.last_phase = seq + 1, seq, op, phase
        pending = self.pending
        cuda = start.__class__ is not float
        if work is None:
            pending.append((seq, size, start, _end_mark(cuda), seq, op, phase, n))
            self.done += 1
            return
        try:
            future = work.get_future()
        except Exception:  # no future (a Work of the coalescing manager): not timed
            return

        def done(fut):
            try:
                fut.wait()
            except Exception:
                return  # the collective failed: it is not done (the training thread sees the error)
            pending.append((seq, size, start, _end_mark(cuda), seq, op, phase, n))
            self.done += 1

        future.add_done_callback(done)

    def _is_gradient(self, op: str, phase: str) -> bool:
        return op in GRADIENT_OPS and phase == "backward"

    def _read(self, item: tuple, ready: list, phases: list) -> None:
        step, index, size, start, end, seq, op, phase, n = item
        ready.append((step, index, op, phase, size, _seconds(start, end), n))
        sync = self._steps.get(step)
        if sync is not None and sync.add_op(seq, start, end, self._is_gradient(op, phase)):
            del self._steps[step]
            if sync.first is not None:  # a step without gradient collectives has no phases
                phases.append((step, sync.begin, *sync.figures(), sync.reduce_scatters, sync.in_flight()))

    def where(self) -> tuple[str | None, str | None]:
        if self.calling is not None:
            phase = "backward" if _graph_task_id() != -1 else self.phase
            return "collective", f"{self.calling[0]} ({phase}) in flight: {self.launched} collectives of the step before it"
        if not self.launched:
            return None, None
        counts = f"{self.launched} of {self.expected or '?'} collectives launched, {self.done} done"
        if self.done < self.launched:  # waiting in it (see FsdpCommTimer.where)
            return "collective", f"{self.last_op} ({self.last_phase}) in flight: {counts}"
        detail = f"{self.last_op} ({self.last_phase}) launched last: {counts}"
        if self.last_phase == "backward" and self.last_op in GRADIENT_OPS:
            return "gradient_sync", detail
        return ("optimizer" if self.last_phase == "optimizer" else "forward_backward"), detail


_graph_task_id = None  # torch._C._current_graph_task_id, bound at install


def _end_mark(cuda: bool):
    if not cuda:
        return _clock()
    import torch

    mark = torch.cuda.Event(enable_timing=True)
    mark.record()  # after a blocking call the current stream waits for the kernel; in a future's callback,
    return mark  # the callback's stream is synchronised with the collective


def _clock() -> float:
    import time

    return time.perf_counter()


def _group_size(group) -> int | None:
    try:
        if group is None:
            import torch.distributed as dist

            return dist.get_world_size()
        return int(group.size())
    except Exception:
        return None


class Installed:
    """The wrappers in place: (holder, attribute, original, wrapper) each, for ``uninstall``."""

    def __init__(self, timer: DistTimer) -> None:
        self.timer = timer
        self.replaced: list[tuple] = []
        self.handles: list = []  # the phase hooks' handles


def _wrap(fn, timer: DistTimer, op: str, name: str):
    params = list(inspect.signature(fn).parameters)
    pos = params.index(name)
    group_pos = params.index("group") if "group" in params else 99
    async_pos = params.index("async_op") if "async_op" in params else 99

    def timed(*args, **kwargs):
        if getattr(_local, "depth", 0) or not timer.in_step:
            return fn(*args, **kwargs)
        return timer.call(fn, op, name, pos, group_pos, async_pos, args, kwargs)

    timed.__wrapped__ = fn
    timed.__name__ = getattr(fn, "__name__", name)
    timed.__doc__ = getattr(fn, "__doc__", None)
    timed._logkit_timed = True
    return timed


def install(timer: DistTimer, model=None) -> tuple[Installed | None, str | None]:
    """Wrap torch.distributed's collectives (and deepspeed's bound ones where deepspeed is loaded) for
    ``timer``, and put its phase hooks on ``model`` (forward begins and ends) and on every torch optimizer's
    step: (what to uninstall, None) or (None, why not)."""
    try:
        import torch.distributed as dist
        from torch.distributed import distributed_c10d as c10d
    except Exception as exc:
        return None, f"torch.distributed is not importable: {exc}"
    global _graph_task_id
    import torch

    _graph_task_id = torch._C._current_graph_task_id
    done = Installed(timer)
    wrappers: dict[int, object] = {}  # id(original) -> its wrapper: one per function, set in every namespace
    for fname, (op, counted) in FUNCTIONS.items():
        for holder in (dist, c10d):
            original = getattr(holder, fname, None)
            if original is None or getattr(original, "_logkit_timed", False):
                continue
            wrapper = wrappers.get(id(original))
            if wrapper is None:
                try:
                    wrapper = wrappers[id(original)] = _wrap(original, timer, op, counted)
                except (ValueError, TypeError):  # a signature without the counted parameter: left alone
                    continue
            setattr(holder, fname, wrapper)
            done.replaced.append((holder, fname, original, wrapper))
    if not done.replaced:
        return None, "no torch.distributed collective could be wrapped in this torch"
    ds_comm = sys.modules.get("deepspeed.comm.comm")
    cdb = getattr(ds_comm, "cdb", None) if ds_comm is not None else None
    for attr in _BOUND if cdb is not None else ():
        original = getattr(cdb, attr, None)
        wrapper = wrappers.get(id(original))
        if wrapper is not None:
            setattr(cdb, attr, wrapper)
            done.replaced.append((cdb, attr, original, wrapper))
    _phase_hooks(done, model)
    return done, None


def _phase_hooks(done: Installed, model) -> None:
    """The hooks that tell the timer its phase; a model without hooks leaves it to autograd's graph task."""
    timer = done.timer
    try:
        from torch.optim.optimizer import register_optimizer_step_pre_hook

        done.handles.append(register_optimizer_step_pre_hook(timer.optimizer_begins))
    except Exception:
        pass
    for name, fn in (("register_forward_pre_hook", timer.forward_begins), ("register_forward_hook", timer.forward_ended)):
        register = getattr(model, name, None)
        if register is not None:
            try:
                done.handles.append(register(fn))
            except Exception:
                pass


def uninstall(done: Installed | None) -> None:
    """Put back every original still covered by our wrapper (one another tool set over it is left)."""
    if done is None:
        return
    done.timer.in_step = False
    for holder, attr, original, wrapper in reversed(done.replaced):
        if getattr(holder, attr, None) is wrapper:
            setattr(holder, attr, original)
    done.replaced.clear()
    for handle in done.handles:
        handle.remove()
    done.handles.clear()
