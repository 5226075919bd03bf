"""NaN/Inf: the gradient check before the optimizer step, and the report of a step's
non-finite tensors (the loss first, then gradients, then parameters) with a safetensors dump.

torch is imported only where training has it. The per-step check costs one device sync: the
norms of all gradients are computed with one ``torch._foreach_norm`` and read back together. A
sharded model's gradients (FSDP2: DTensors, a shard per rank) are checked on the shard each rank
holds; their whole norms are combined across the shard group by an all-reduce the training thread
issues without waiting for it, read on the writer thread (``ShardNorms``).
The detailed report (which tensors, how many NaN/Inf values) runs only when that check or the
logged loss says something is wrong, and only for the first ``MAX_NAN_REPORTS`` steps, so a
diverged run does not fill the disk.
"""

from __future__ import annotations

import functools
import math
import time
from pathlib import Path

from logkit.schema.findings import FindingKind
from logkit.schema.records import ANOMALY, NAN_DETECTED
from trainer_hooks.commhook import outer_call
from trainer_hooks.findings import GradNormWatch
from trainer_hooks.guard import guarded
from trainer_hooks.timed_phases import within_steps

# NaN/Inf reports with tensor dumps: the first few only.
MAX_NAN_REPORTS = 3


class NonFiniteChecks:
    """The NaN/Inf methods of ``SessionLogger`` (mixed into it: the session's records, writer
    and settings are its own)."""

    def _init_nonfinite(self) -> None:
        self.stop_requested = False  # set on NaN/Inf when settings.stop_on_nan
        self._grad_watch = GradNormWatch()
        self._layer_norms: tuple[int, dict] | None = None  # (step, norms) from check_gradients
        self._nan_steps: set[int] = set()
        self._step_losses: list = []  # this step's loss tensors (note_loss), for a NaN/Inf report
        self._model = None  # for the NaN/Inf report when the loss or grad norm says so
        self._trainable: tuple | None = None  # (model, its trainable (name, parameter) pairs)

    def note_loss(self, loss) -> None:
        """The loss tensor of a micro-batch of the current step (kept by reference, detached:
        no device sync), for the NaN/Inf report. The callback feeds it from a forward hook.
        (Guarded inline: called every micro-batch.)"""
        try:
            losses = self._step_losses
            if len(losses) < 64 and not self._ended:
                losses.append(loss.detach())
        except Exception as exc:
            self._fault("SessionLogger.note_loss failed", exc)

    @guarded
    @within_steps
    def check_gradients(self, model, step: int | None = None, losses: list | None = None) -> bool:
        """Before ``optimizer.step()``: NaN/Inf in any gradient (one device sync), and the
        per-layer norms at ``ultra``. Returns False when a gradient is not finite.
        ``losses``: this step's loss tensors (else those given to ``note_loss``), reported
        with the gradients when they are not finite."""
        step = self._last_step + 1 if step is None else step
        grads = self._grads_of(model)
        # a sharded model's whole norms come from an all-reduce in flight (ShardNorms); waited for here
        # only where a NaN must stop every rank at the same step (stop_on_nan), else on the writer thread
        local, shards = shard_norms(grads, wait=self.settings.stop_on_nan)
        if shards is None:
            norms = grad_norms(grads) if local is None else local
            finite = _finite(norms)
        else:  # this rank's shards (a NaN in another rank's is reported when the writer reads the whole norms)
            norms = shards
            finite = _finite(local) if shards.values is None else _finite(shards.values)
        if (self.settings.layer_grad_norms or shards is not None) and self._writer is not None:
            # the per-layer dict and the explode/vanish watch are built on the writer thread
            names = tuple(name for name, _ in grads)
            if self.settings.layer_grad_norms:
                self._layer_norms = (step, (names, norms))
            self._writer.put_call(self._grad_findings, step, names, norms, time.perf_counter(), finite)
        if not finite:
            self.report_nonfinite(step, FindingKind.NAN_GRAD, model=model, grads=grads,
                                  losses=self._step_losses if losses is None else losses)
        return finite

    def _grads_of(self, model) -> list[tuple[str, object]]:
        """``named_grads(model)`` through the trainable parameters listed once per model (walking the
        modules every step is the same walk every step; each step's ``.grad`` is read anew)."""
        cached = self._trainable
        if cached is None or cached[0] is not model:
            cached = self._trainable = (model, [(n, p) for n, p in model.named_parameters() if p.requires_grad])
        return [(n, g) for n, p in cached[1] if (g := p.grad) is not None]

    def _grad_findings(self, step: int, names: tuple, norms, at: float, finite: bool = True) -> list[dict]:
        """Writer thread: the explode/vanish findings of one step's per-layer norms (``GradNormWatch``),
        timed at their check (``at``). ``norms``: a list, or ``ShardNorms`` read here; where those whole
        norms are not finite and this rank's shards were (``finite``), the ``nan_grad`` anomaly every rank
        writes (the tensors are reported by the rank holding them)."""
        out = []
        if isinstance(norms, ShardNorms):
            norms = norms.result()
            if norms is None:  # not combined in time (a rank stopped): no norms to watch this step
                return out
            if finite and not _finite(norms):
                out.append(self._record(ANOMALY, f"{FindingKind.NAN_GRAD} at step {step} (in another rank's "
                                        "gradient shard)", "ERROR", step, at=at, subkind=FindingKind.NAN_GRAD,
                                        value=None, loss=None))
            if not self.settings.layer_grad_norms:
                return out
        for finding in self._grad_watch.check(dict(zip(names, norms, strict=True))):
            record = self._record(ANOMALY, f"{ANOMALY['subkind'].get(finding)}: {ANOMALY['value'].get(finding)}",
                                  "WARNING", step, at=at)
            record.update(finding)
            out.append(record)
        return out

    @guarded
    def report_nonfinite(self, step: int, kind: str, model=None, grads=None, loss=None, losses=None) -> None:
        """An ``anomaly`` and a ``nan_detected`` record: the non-finite tensors (the loss first,
        then gradients, then parameters) with shape and NaN/Inf counts, and a safetensors dump.

        The loss is the step's loss tensors (``losses``, one per micro-batch) where they hold
        NaN/Inf, else the logged value ``loss`` when it is not finite (a scalar tensor). Any
        non-finite loss makes the kind ``nan_loss``: it is where the NaN came from.
        """
        if step in self._nan_steps:
            return
        self._nan_steps.add(step)
        named_losses = loss_tensors(losses or [], loss)
        tensors = nonfinite_report(named_losses, "loss")
        if tensors:
            kind = FindingKind.NAN_LOSS
        loss_text = None if loss is None else str(loss)
        # value: JSON numbers only (NaN is not one); the logged loss goes as text
        self._emit(self._record(ANOMALY, f"{kind} at step {step}", "ERROR", step, subkind=kind, value=None,
                                loss=loss_text))
        if len(self._nan_steps) > MAX_NAN_REPORTS:
            return
        if grads is None and model is not None:
            grads = named_grads(model)
        tensors += nonfinite_report(grads or [], "gradient")
        params = [(n, p) for n, p in model.named_parameters() if p.requires_grad] if model is not None else []
        tensors += nonfinite_report(params, "parameter")
        fields = dict(subkind=kind, loss=loss_text, tensors=tensors, affected=[t["name"] for t in tensors],
                      dump_path=None)
        if tensors and self.folder is not None:
            wanted = {(t["kind"], t["name"]) for t in tensors}
            to_dump = {n: t for n, t in named_losses if ("loss", n) in wanted}
            to_dump.update({f"{n}.grad": g for n, g in (grads or []) if ("gradient", n) in wanted})
            to_dump.update({n: p for n, p in params if ("parameter", n) in wanted})
            path = self.folder / "nan_dumps" / f"rank{self.info.rank if self.info else 0}_step{step}.safetensors"
            truncated, size = dump_tensors(path, to_dump, self.settings.nan_dump_max_bytes)
            fields.update(dump_path=str(path.relative_to(self.folder)), dump_truncated=truncated, dump_bytes=size)
        self._emit(self._record(NAN_DETECTED, f"NaN/Inf detected at step {step} in {len(tensors)} tensors",
                                "ERROR", step, **fields))
        if self.settings.stop_on_nan:
            self.stop_requested = True


# -- tensors (torch imported here only) --------------------------------------------------------
def named_grads(model) -> list[tuple[str, object]]:
    """(name, grad) of the trainable parameters that have a gradient now."""
    return [(n, p.grad) for n, p in model.named_parameters() if p.requires_grad and p.grad is not None]


def grad_norms(grads: list[tuple[str, object]]) -> list[float]:
    """The L2 norm of every gradient, read back in one transfer."""
    import torch

    if not grads:
        return []
    tensors = [g.detach() for _, g in grads]
    try:
        norms = torch._foreach_norm(tensors)
    except Exception:  # mixed devices or dtypes the fused kernel does not take
        norms = [t.float().norm() for t in tensors]
    try:  # one stack of the norms as they are (one device, one dtype: the usual case), one transfer
        stacked = torch.stack(norms)
    except Exception:
        norms = [_whole(n) for n in norms]
        stacked = torch.stack([n.float().to(norms[0].device) for n in norms])
    return _whole(stacked).float().cpu().tolist()


def _finite(norms: list[float]) -> bool:
    total = sum(norms)
    return total - total == 0.0 or all(math.isfinite(n) for n in norms)  # (a sum may overflow)


class ShardNorms:
    """The whole norms of a sharded model's gradients while their all-reduce is in flight: the squares of
    this rank's shards' norms summed across the shard group (the norm of the whole gradient is the root
    of that sum, as torch's ``clip_grad_norm_`` combines them). Read by ``result`` on the writer thread,
    once: it waits at most ``timeout`` seconds for the collective (every rank issued it at the same point
    of its step; it is not done only where a rank stopped before it), None after that, and from then on."""

    __slots__ = ("work", "squares", "values")

    def __init__(self, work, squares) -> None:
        self.work, self.squares, self.values = work, squares, None

    def result(self, timeout: float = 5.0) -> list[float] | None:
        if self.values is None and self.work is not None:
            deadline = time.monotonic() + timeout
            while not self.work.is_completed():
                if time.monotonic() > deadline:  # given up for good: a later read does not wait again
                    self.work = self.squares = None
                    return None
                time.sleep(0.0005)
            work, self.work = self.work, None
            work.wait()  # done: returns at once (raises where the collective failed)
            self.values = self.squares.sqrt().cpu().tolist()
            self.squares = None
        return self.values


@functools.cache  # imported at the first call, once (the check runs every step)
def _dtensor_types() -> tuple:
    """torch's DTensor and its Replicate / Shard placements."""
    from torch.distributed.tensor import DTensor, Replicate, Shard

    return DTensor, Replicate, Shard


# id(a DTensor's spec) -> (that spec, its layout): FSDP2 gives a parameter's gradient the parameter's own spec
# object every step, so each is checked once (a DTensor's placements and mesh cost 1 us each to read, a
# mesh's group 13 us in a step's cold caches); the spec is kept, so an id is never another object's
_LAYOUTS: dict[int, tuple] = {}


def _layout(grad) -> tuple | None:
    """(placements, the shard group: None where no mesh dimension shards it) of a DTensor gradient whose
    placements are Shard/Replicate on at most one sharded dimension; None for any other tensor."""
    spec = getattr(grad, "_spec", None)
    if spec is not None:
        known = _LAYOUTS.get(id(spec))
        if known is not None and known[0] is spec:
            return known[1]
    DTensor, Replicate, Shard = _dtensor_types()
    if not isinstance(grad, DTensor):
        return None
    placements = grad.placements
    sharded = [i for i, p in enumerate(placements) if isinstance(p, Shard)]
    if len(sharded) > 1 or any(not isinstance(p, (Shard, Replicate)) for p in placements):
        layout = None  # several shard dimensions, or partial values: DTensor's own reduction (grad_norms)
    else:
        layout = (placements, grad.device_mesh.get_group(sharded[0]) if sharded else None)
    if spec is not None:
        if len(_LAYOUTS) > 4096:  # (models come and go in one process: tests, sweeps)
            _LAYOUTS.clear()
        _LAYOUTS[id(spec)] = (spec, layout)
    return layout


def shard_norms(grads: list[tuple[str, object]], wait: bool = False) -> tuple[list[float] | None, ShardNorms | None]:
    """The norms of gradients that are shards on one device mesh (FSDP2's DTensors, each sharded along one
    mesh dimension): (this rank's shards' norms, ``ShardNorms`` with the all-reduce of their squares
    issued, waited for when ``wait``). (the norms, None) where the gradients are replicated on the mesh;
    (None, None) where they are not DTensors of one such layout (``grad_norms`` reads them)."""
    if not grads or getattr(grads[0][1], "device_mesh", None) is None:
        return None, None
    first = _layout(grads[0][1])
    if first is None:
        return None, None
    for _, g in grads:  # one layout: the same placements, sharded over the same group
        layout = _layout(g)
        if layout is not first and (layout is None or layout[0] != first[0] or layout[1] is not first[1]):
            return None, None
    import torch
    import torch.distributed as dist

    with torch.no_grad():  # to_local without autograd is the local tensor itself, which torch keeps as
        # ``_local_tensor`` (read directly: ``to_local`` costs 3 us a gradient, 70 us a step of 21)
        tensors = [_local_part(g) for _, g in grads]
        try:
            norms = torch.stack(torch._foreach_norm(tensors)).float()
        except Exception:  # mixed devices or dtypes the fused kernel does not take
            norms = torch.stack([t.float().norm().to(tensors[0].device) for t in tensors])
        local = norms.cpu().tolist()  # this rank's shards (one transfer): its finite check
        group = first[1]
        if group is None:
            return local, None
        squares = norms.pow(2)  # (a tensor of its own: the all-reduce writes into it)
        with outer_call():  # the logger's own collective, not one of training's (dist_timing)
            work = dist.all_reduce(squares, group=group, async_op=True)
    shards = ShardNorms(work, squares)
    if wait:
        shards.result(timeout=float("inf"))
    return local, shards


def _local_part(tensor):
    """A DTensor's local tensor, as ``to_local()`` gives it under no_grad."""
    local = getattr(tensor, "_local_tensor", None)
    return local if local is not None else tensor.to_local()


def _whole(norm):
    """A norm as a plain tensor. A sharded model's gradients (FSDP2: DTensors) give partial norms, one
    part per shard: ``full_tensor`` combines them across the shard group in one collective, as torch's
    ``clip_grad_norm_`` does at the same point of every rank's step (a DTensor has no ``tolist``)."""
    full = getattr(norm, "full_tensor", None)
    return full() if full is not None else norm


def loss_tensors(losses: list, logged=None) -> list[tuple[str, object]]:
    """Named loss tensors for a report: the step's micro-batch losses that hold NaN/Inf
    (``loss``, or ``loss.micro_batch<i>`` when there are several), else the logged value when
    it is not finite (as a scalar tensor: what the trainer logged)."""
    import torch

    named = [("loss" if len(losses) == 1 else f"loss.micro_batch{i}", t) for i, t in enumerate(losses, start=1)]
    bad = [(n, t) for n, t in named if t.is_floating_point() and not bool(torch.isfinite(t).all())]
    if bad:
        return bad
    if logged is not None and not math.isfinite(float(logged)):
        return [("loss", torch.tensor(float(logged)))]
    return []


def _local(tensor):
    """A DTensor's part on this rank (a sharded model's gradient or parameter: its shape is the shard's),
    read without a collective: a NaN report runs on the ranks that found a NaN in their own shards, and a
    collective only they entered would hang them and the others."""
    to_local = getattr(tensor, "to_local", None)
    return to_local() if to_local is not None else tensor


def nonfinite_report(named_tensors: list[tuple[str, object]], kind: str, limit: int = 50) -> list[dict]:
    """Tensors holding NaN or Inf: name, shape, counts and the first values (the NaN/Inf report)."""
    import torch

    out = []
    for name, t in named_tensors:
        t = _local(t.detach())
        if not t.is_floating_point():
            continue
        nan = int(torch.isnan(t).sum())
        inf = int(torch.isinf(t).sum())
        if nan or inf:
            head = t.flatten()[:5].float().cpu().tolist()
            out.append({"name": name, "kind": kind, "shape": list(t.shape), "numel": t.numel(),
                        "nan_count": nan, "inf_count": inf,
                        "values_head": ["NaN" if math.isnan(v) else ("Inf" if math.isinf(v) else v) for v in head]})
            if len(out) >= limit:
                break
    return out


def dump_tensors(path: Path, tensors: dict[str, object], max_bytes: int) -> tuple[bool, int]:
    """Save tensors with safetensors (no pickle: safe to open from anyone's log folder);
    returns (truncated, the file's size in bytes).

    Tensors are written whole while the total stays under ``max_bytes``; past that, each is
    cut to its first elements and the result says so.
    """
    import torch
    from safetensors.torch import save_file

    tensors = {name: _local(t.detach()) for name, t in tensors.items()}
    total = sum(t.numel() * t.element_size() for t in tensors.values())
    truncated = total > max_bytes
    out = {}
    for name, t in tensors.items():
        t = t.detach().cpu().contiguous()
        if truncated:
            keep = max(1, max_bytes // max(1, len(tensors)) // t.element_size())
            t = t.flatten()[:keep].clone()
        if t.dtype in (torch.float8_e4m3fn, torch.float8_e5m2) if hasattr(torch, "float8_e4m3fn") else False:
            t = t.float()
        out[name] = t
    path.parent.mkdir(parents=True, exist_ok=True)
    save_file(out, str(path), metadata={"truncated": str(truncated), "format": "logkit-nan-dump-v1"})
    return truncated, path.stat().st_size
