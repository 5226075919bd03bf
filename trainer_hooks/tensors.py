"""Gradient checks and the NaN/Inf report (seed 003), torch only where training has it.

The per-step check costs one device sync: the norms of all gradients are computed with one
``torch._foreach_norm`` and read back together. The detailed report (which tensors, how many
NaN/Inf values) runs only when that check or the loss says something is wrong.
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["named_grads", "grad_norms", "nonfinite_report", "dump_tensors", "loss_tensors"]


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
    return torch.stack([n.float().to(tensors[0].device) for n in norms]).cpu().tolist()


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


def nonfinite_report(named_tensors: list[tuple[str, object]], kind: str, limit: int = 50) -> list[dict]:
    """Tensors holding NaN or Inf: name, shape, counts and the first values (seed 003's report)."""
    import torch

    out = []
    for name, t in named_tensors:
        t = t.detach()
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


def dump_tensors(path: Path, tensors: dict[str, object], max_bytes: int) -> dict:
    """Save tensors with safetensors (no pickle: safe to open from anyone's log folder).

    Tensors are written whole while the total stays under ``max_bytes``; past that, each is
    cut to its first elements and the result says so.
    """
    import torch
    from safetensors.torch import save_file

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
    return {"dump_path": str(path), "dump_truncated": truncated, "dump_bytes": path.stat().st_size}
