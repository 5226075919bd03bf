"""How the model is wrapped for data parallelism, and the facts of that wrapping, for ``session_start``.

``describe(model)`` returns ``(strategy, facts)``: ``strategy`` one of ``STRATEGIES`` and ``facts`` a
small JSON-able dict (``None`` for ``none``). The wrapper is recognised by its class, never by an
import that could fail or load a library the run does not use:

- ``fsdp2``: ``torch.distributed.fsdp.fully_shard`` turns the module's class into a subclass of
  ``FSDPModule`` (the module itself: the Trainer's unwrapped model is it too);
- ``fsdp1``: a ``FullyShardedDataParallel`` wrapper; ``ddp``: a ``DistributedDataParallel`` wrapper;
- ``deepspeed``: a ``DeepSpeedEngine`` (by class name in the MRO, deepspeed is not imported).

A wrapper that holds the model (FSDP1, DDP, DeepSpeed) is found from the model the Trainer hands a
callback through the garbage collector's referrers (``find_wrapper``, one scan of the heap per level
for the three kinds together), as the DDP comm hook does; only where a process group is initialised
(every one of them needs one), so a single-process run pays no scan.
"""

from __future__ import annotations

import gc
import sys

STRATEGIES = ("ddp", "fsdp1", "fsdp2", "deepspeed", "none")


def _mro_names(obj) -> set[str]:
    return {c.__name__ for c in type(obj).__mro__}


def _is_fsdp2(obj) -> bool:
    return "FSDPModule" in _mro_names(obj) and hasattr(obj, "_get_fsdp_state")


def _is_fsdp1(obj) -> bool:
    return "FullyShardedDataParallel" in _mro_names(obj)


def _is_ddp(obj) -> bool:
    return "DistributedDataParallel" in _mro_names(obj)


def _is_deepspeed(obj) -> bool:
    return "DeepSpeedEngine" in _mro_names(obj)


_WRAPPERS = (("deepspeed", _is_deepspeed), ("fsdp1", _is_fsdp1), ("ddp", _is_ddp))


def find_wrapper(model, accepts) -> object | None:
    """The object ``accepts`` says is a wrapper and that holds ``model`` as its ``module``, or None.
    ``model <- wrapper._modules <- (the wrapper's __dict__ where Python materialises it) <- wrapper``."""
    if accepts(model):
        return model
    frontier = [model]
    for _ in range(3):
        dicts = []
        for holder in gc.get_referrers(*frontier):  # one scan of the heap per level
            if not isinstance(holder, dict) and accepts(holder) and getattr(holder, "module", None) is model:
                return holder
            if isinstance(holder, dict) and holder is not frontier:
                dicts.append(holder)
        frontier = dicts
    return None


def fsdp2_modules(model) -> list:
    """The ``fully_shard`` modules of ``model`` (itself and its submodules), in module order."""
    modules = getattr(model, "modules", None)
    if modules is None:
        return []
    return [m for m in modules() if _is_fsdp2(m)]


def describe(model) -> tuple[str, dict | None]:
    """(strategy, facts) of ``model`` (the wrapper, or the model the Trainer hands a callback)."""
    if model is None or "torch" not in sys.modules:
        return "none", None
    try:
        units = fsdp2_modules(model)
        if units:
            return "fsdp2", _fsdp2_facts(units)
        if not _group_initialised():
            return "none", None  # every wrapper needs a process group: no heap scan for a lone process
        wrapper = find_wrapper(model, lambda obj: any(accepts(obj) for _, accepts in _WRAPPERS))
        if wrapper is not None:
            name = next(name for name, accepts in _WRAPPERS if accepts(wrapper))
            return name, _FACTS[name](wrapper)
    except Exception as exc:  # a wrapper of another torch version: say what failed, never raise
        return "none", {"error": f"{type(exc).__name__}: {exc}"}
    return "none", None


def _group_initialised() -> bool:
    try:
        import torch.distributed as dist

        return dist.is_available() and dist.is_initialized()
    except Exception:
        return False


def _dtype(value) -> str | None:
    return str(value).replace("torch.", "") if value is not None else None


def _group_size(group) -> int | None:
    try:
        return int(group.size())
    except Exception:
        return None


def param_groups(unit) -> list:
    """The ``FSDPParamGroup``s of one ``fully_shard`` module: a list in newer torch (``_fsdp_param_groups``),
    one or None in torch up to 2.11 (``_fsdp_param_group``: seen on a GPU host, where the plural is missing)."""
    state = unit._get_fsdp_state()
    groups = getattr(state, "_fsdp_param_groups", None)
    if groups is None:
        one = getattr(state, "_fsdp_param_group", None)
        groups = [one] if one is not None else []
    return list(groups)


def _fsdp2_facts(units: list) -> dict:
    groups = [g for m in units for g in param_groups(m)]
    first = groups[0] if groups else None
    mesh = getattr(first, "mesh_info", None)
    mp = getattr(first, "mp_policy", None)
    offload = getattr(first, "offload_policy", None)
    resharded = sum(1 for g in groups if getattr(g, "post_forward_mesh_info", None) is not None)
    return {
        "units": len(groups),
        "reshard_after_forward": resharded > 0,
        "resharded_units": resharded,
        "shard_group_size": getattr(mesh, "shard_mesh_size", None),
        "replicate_group_size": getattr(mesh, "replicate_mesh_size", None),  # HSDP only
        "offload": "cpu" if type(offload).__name__ == "CPUOffloadPolicy" else "none",
        "param_dtype": _dtype(getattr(mp, "param_dtype", None)),
        "reduce_dtype": _dtype(getattr(mp, "reduce_dtype", None)),
    }


def _fsdp1_facts(wrapper) -> dict:
    mp = getattr(wrapper, "mixed_precision", None)
    strategy = getattr(wrapper, "sharding_strategy", None)
    units = sum(1 for m in wrapper.modules() if _is_fsdp1(m))
    return {
        "units": units,
        "sharding_strategy": getattr(strategy, "name", None),
        "reshard_after_forward": getattr(strategy, "name", None) in ("FULL_SHARD", "HYBRID_SHARD"),
        "shard_group_size": _group_size(getattr(wrapper, "process_group", None)),
        "offload": "cpu" if getattr(getattr(wrapper, "cpu_offload", None), "offload_params", False) else "none",
        "param_dtype": _dtype(getattr(mp, "param_dtype", None)),
        "reduce_dtype": _dtype(getattr(mp, "reduce_dtype", None)),
        "use_orig_params": getattr(wrapper, "_use_orig_params", None),
    }


def _ddp_facts(wrapper) -> dict:
    cap = getattr(wrapper, "bucket_bytes_cap", None)
    return {"group_size": _group_size(getattr(wrapper, "process_group", None)),
            "bucket_cap_mb": round(cap / 2**20, 3) if isinstance(cap, (int, float)) else None,
            "find_unused_parameters": getattr(wrapper, "find_unused_parameters", None)}


def _deepspeed_facts(engine) -> dict:
    def ask(name):
        fn = getattr(engine, name, None)
        try:
            return fn() if callable(fn) else None
        except Exception:
            return None

    offload = ask("zero_offload_optimizer")  # the offload config, None without offload
    return {"zero_stage": ask("zero_optimization_stage"), "offload_optimizer": offload is not None,
            "dp_world_size": getattr(engine, "dp_world_size", None)}


_FACTS = {"fsdp1": _fsdp1_facts, "ddp": _ddp_facts, "deepspeed": _deepspeed_facts}
