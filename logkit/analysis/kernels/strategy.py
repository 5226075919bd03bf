"""How a run spread its model over the ranks, said in words, and what each collective does in that
strategy: the one place the reports take these sentences from (renderers never decide what a figure
means).

- ``strategy_words(strategy, facts, zero_stage)``: "FSDP2 (fully_shard): 3 units sharded over 2 ranks,
  resharded after forward, no offload, parameters in bf16" from the strategy and ``strategy_facts``
  (session_start's, ``trainer_hooks/strategy.py``) or a foreign log's ZeRO stage; None without a strategy.
- ``op_role(strategy, op, zero_stage)``: what ``op`` does in a run of that strategy (why the sharded
  wrappers gather parameters and reduce-scatter gradients, where DDP all-reduces them), or None where
  the strategy says nothing of the op.
- ``first_collective(strategy, zero_stage)``: the collective a step of that strategy starts with, the one a
  rank late to a step holds the others in (DDP's gradient sync in backward, FSDP's and ZeRO-3's forward
  all-gather, ZeRO-1/2's gradient reduction); from the strategy alone, so that every reader of it (the CLI,
  whose sessions keep no communication records, and the Python API) names the same; None where unknown.

The roles follow torch's and DeepSpeed's own descriptions: FSDP all-gathers a unit's parameter shards
before its forward (and again before its backward when it resharded after forward), reduce-scatters its
gradients in backward so that each rank keeps its shard; DDP all-reduces gradient buckets during backward;
ZeRO-1/2 reduce(-scatter) gradients and all-gather the updated parameters after the optimizer step, ZeRO-3
gathers parameters per layer like FSDP.
"""

from __future__ import annotations

_NAMES = {"ddp": "DDP (DistributedDataParallel)", "fsdp1": "FSDP1 (FullyShardedDataParallel)",
          "fsdp2": "FSDP2 (fully_shard)", "fsdp": "FSDP", "deepspeed": "DeepSpeed", "none": "no data-parallel wrapper"}


def _family(strategy: str | None, zero_stage: int | None = None) -> str | None:
    """ddp, fsdp, zero3, zero12 (ZeRO-1/2: gradients reduced, parameters whole on every rank) or None."""
    if strategy in ("fsdp", "fsdp1", "fsdp2"):
        return "fsdp"
    if strategy == "ddp":
        return "ddp"
    if strategy == "deepspeed":
        return "zero3" if zero_stage == 3 else "zero12" if zero_stage in (1, 2) else "deepspeed"
    return None


def _facts_words(strategy: str, facts: dict) -> list[str]:
    out = []
    units, shard = facts.get("units"), facts.get("shard_group_size")
    sharding = facts.get("sharding_strategy")
    if sharding:
        out.append(str(sharding))
    if units is not None or shard is not None:
        where = f" sharded over {shard} rank(s)" if shard is not None else ""
        out.append(f"{units} unit(s){where}" if units is not None else where.strip())
    if facts.get("replicate_group_size") not in (None, 1):
        out.append(f"replicated over {facts['replicate_group_size']} group(s) (HSDP)")
    if strategy in ("fsdp1", "fsdp2", "fsdp") and facts.get("reshard_after_forward") is not None:
        out.append("resharded after forward" if facts["reshard_after_forward"] else "kept gathered after forward")
    if facts.get("offload") is not None:
        out.append("no offload" if facts["offload"] == "none" else f"offloaded to {facts['offload']}")
    if facts.get("offload_optimizer"):
        out.append("optimizer offloaded")
    dtypes = [f"{what} in {facts[key]}" for key, what in (("param_dtype", "parameters"),
                                                          ("reduce_dtype", "gradients reduced"))
              if facts.get(key)]
    out.append("mixed precision: " + ", ".join(dtypes) if dtypes else "")
    if strategy == "ddp":
        if facts.get("bucket_cap_mb") is not None:
            out.append(f"{facts['bucket_cap_mb']:g} MB buckets")
        if facts.get("group_size") is not None:
            out.append(f"{facts['group_size']} rank(s)")
    if facts.get("dp_world_size") is not None:
        out.append(f"{facts['dp_world_size']} data-parallel rank(s)")
    return [w for w in out if w]


def strategy_words(strategy: str | None, facts: dict | None = None, zero_stage: int | None = None) -> str | None:
    """The strategy and its facts in a line (see module doc), None without a strategy."""
    if not strategy:
        return None
    facts = facts if isinstance(facts, dict) else {}
    stage = zero_stage if zero_stage is not None else facts.get("zero_stage")
    version = facts.get("fsdp_version")
    name = _NAMES.get(f"fsdp{version}" if strategy == "fsdp" and version in (1, 2) else strategy, strategy)
    if strategy == "deepspeed" and stage is not None:
        name = f"DeepSpeed ZeRO-{stage}"
    words = _facts_words(strategy, facts)
    return name + (": " + ", ".join(words) if words else "")


_ROLES = {
    "fsdp": {
        "all_gather": "gathers each unit's parameter shards into whole parameters before its forward "
                      "(and before its backward when the unit resharded after forward)",
        "reduce_scatter": "reduces the gradients over the ranks and leaves each rank its own shard of them, "
                          "in backward",
        "all_reduce": "reduces gradients over the replicas (NO_SHARD, or across HSDP's replicate groups)",
        "broadcast": "sends rank 0's parameters and buffers to the others (sync_module_states at wrap time)",
    },
    "ddp": {
        "all_reduce": "averages each gradient bucket over the ranks during backward (every rank keeps whole "
                      "parameters)",
        "broadcast": "sends rank 0's parameters and buffers to the others (at wrap time, and buffers each "
                     "forward)",
        "all_gather": "gathers tensors from every rank (not DDP's own: metrics or objects the training code "
                      "gathers)",
    },
    "zero3": {
        "all_gather": "gathers each layer's parameter partitions before its forward and again before its "
                      "backward (ZeRO-3)",
        "reduce_scatter": "reduces the gradients and keeps each rank its partition, in backward (ZeRO-3)",
        "all_reduce": "reduces small tensors over the ranks (gradient norms, loss scaling checks)",
        "broadcast": "sends rank 0's values to the others (initial parameters)",
    },
    "zero12": {
        "reduce_scatter": "reduces the gradients and keeps each rank its partition (ZeRO-2), in backward",
        "all_reduce": "reduces the gradients over the ranks (ZeRO-1, or ZeRO-2 without reduce_scatter)",
        "all_gather": "gathers the parameters each rank updated from its optimizer partition, after the "
                      "optimizer step",
        "broadcast": "sends rank 0's values to the others (initial parameters)",
    },
}
_ALIASES = {"allreduce": "all_reduce", "gradient_sync": "all_reduce", "allgather": "all_gather",
            "_allgather_base": "all_gather", "allgather_into_tensor": "all_gather", "reducescatter": "reduce_scatter",
            "_reduce_scatter_base": "reduce_scatter", "reduce_scatter_tensor": "reduce_scatter"}


def op_role(strategy: str | None, op: str | None, zero_stage: int | None = None) -> str | None:
    """What ``op`` does in a run of ``strategy`` (see module doc)."""
    if not op:
        return None
    family = _family(strategy, zero_stage)
    key = _ALIASES.get(str(op).lower(), str(op).lower())
    return _ROLES.get(family or "", {}).get(key)


# the collective a step starts with, by family
_FIRST = {"ddp": "gradient sync (all_reduce)", "fsdp": "forward all_gather", "zero3": "forward all_gather",
          "zero12": "gradient reduction (reduce_scatter or all_reduce)"}


def first_collective(strategy: str | None, zero_stage: int | None = None) -> str | None:
    """The collective a step of ``strategy`` starts with (see module doc), None where unknown."""
    return _FIRST.get(_family(strategy, zero_stage) or "")


def strategy_name(strategy: str | None, zero_stage: int | None = None) -> str | None:
    """The strategy's name alone ("FSDP2 (fully_shard)", "DeepSpeed ZeRO-3", "DDP ..."), None without one
    or for ``none`` (a run without a wrapper says nothing of one)."""
    if not strategy or strategy == "none":
        return None
    if strategy == "deepspeed" and zero_stage is not None:
        return f"DeepSpeed ZeRO-{zero_stage}"
    return _NAMES.get(strategy, strategy)


# what a step's exposed communication is, and what shortens it, by family (the verdict's words)
_EXPOSED = {"fsdp": "in parameter gathers and gradient reduce-scatters that compute does not hide",
            "zero3": "in parameter gathers and gradient reduce-scatters that compute does not hide",
            "zero12": "in gradient reduction that backward does not hide"}
_COMM_ADVICE = {
    "ddp": "The exposed gradient sync is the largest cost: larger buckets (bucket_cap_mb), gradient "
           "accumulation or a faster interconnect shorten it.",
    "fsdp": "The exposed parameter gathers and gradient reduce-scatters are the largest cost: fewer, larger "
            "FSDP units, prefetching the next unit's all-gather, no reshard after forward for the last units, "
            "gradient accumulation or a faster interconnect shorten them.",
    "zero3": "The exposed ZeRO-3 collectives are the largest cost: overlap_comm, larger "
             "stage3_prefetch_bucket_size and reduce_bucket_size, gradient accumulation or a faster "
             "interconnect shorten them.",
    "zero12": "The exposed gradient reduction is the largest cost: overlap_comm, a larger reduce_bucket_size, "
              "gradient accumulation or a faster interconnect shorten it.",
}


def exposed_words(strategy: str | None, zero_stage: int | None = None) -> str:
    """How the verdict names a step's exposed communication in a run of ``strategy``."""
    return _EXPOSED.get(_family(strategy, zero_stage) or "", "in gradient sync that backward does not hide")


def comm_advice(strategy: str | None, zero_stage: int | None = None) -> str:
    """What shortens exposed communication in a run of ``strategy`` (DDP's advice where it is not known)."""
    return _COMM_ADVICE.get(_family(strategy, zero_stage) or "", _COMM_ADVICE["ddp"])
