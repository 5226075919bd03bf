"""What a console capture's lines state about the run, as meta with its provenance.

The console reader gathers the facts its lines state (``torch_lines.run_facts``: transformers'
totals, ``WORLD_SIZE=N`` / ``world_size = N``, accelerate's ``Num processes: N``, a launcher's
flags, ``Num GPUs``) with the line that first stated each, and the watchdog's timeouts; here they
become meta (``stated_facts``), each through ``SessionMeta.state`` so that a stated value wins over a
derived one, and a derived one over an inferred one, whatever the order the lines came in:

- stated: the world size a line prints, accelerate's state or ``--num_processes``, "worker N of M";
  the nodes of ``--nnodes`` / ``NNODES`` / ``--num_machines`` / ``--num_nodes``; the GPUs of ``Num
  GPUs`` or transformers' ``n_gpu``; transformers' total train batch size;
- derived: nodes x processes per node of a launcher's flags; an all-gather's NumelOut / NumelIn (its
  output is every rank's input side by side) and a reduce-scatter's NumelIn / NumelOut; the total
  batch over the per-device batch and the accumulation steps;
- inferred (lower bound): ``--nproc_per_node`` alone (one node at least).
"""

from __future__ import annotations

from logkit.ingest.readers.base import Read

# The run facts the lines state that become meta as they are (meta keys).
FACT_META = ("total_batch_size", "max_steps", "gpu_count", "per_device_batch_size", "gradient_accumulation_steps",
             "num_examples", "nproc_per_node", "data_parallel_size", "link_speed_gbps", "deepspeed_version",
             "memory_mb")
# What each stated world size is, as its provenance says it (a fact of tl.run_facts -> its words).
_WORLD_STATED = {"world_size_said": "the log prints world_size = {n}",
                 "num_processes_said": "accelerate's state: Num processes: {n}",
                 "num_processes": "accelerate launch --num_processes {n}",
                 "world_size_stated": "the log says worker N of {n}"}
# Collectives whose output is every rank's input side by side (world = NumelOut / NumelIn), and the
# reverse (world = NumelIn / NumelOut): torch's OpType names.
_GATHERS = ("ALLGATHER", "_ALLGATHER_BASE", "ALLGATHER_COALESCED", "ALLGATHER_INTO_TENSOR_COALESCED")
_SCATTERS = ("REDUCE_SCATTER", "_REDUCE_SCATTER_BASE", "REDUCE_SCATTER_TENSOR_COALESCED")


def _at(read: Read, lines: dict[str, int], *keys: str) -> str:
    """Where the facts ``keys`` were stated: ``file:line`` (lines joined by "," where several)."""
    found = sorted({lines[k] for k in keys if k in lines})
    return f"{read.label}:{','.join(map(str, found))}" if found else read.label


def stated_facts(read: Read, facts: dict, lines: dict[str, int], timeouts: list[dict]) -> None:
    """``facts`` (a fact of ``tl.run_facts`` -> its value, ``lines``: the line that first stated it) and
    the watchdog's ``timeouts`` (with their ``line``) into ``read.meta``, each with its provenance."""
    meta, f = read.meta, facts
    for key in FACT_META:
        if key in f and key not in ("total_batch_size", "gpu_count"):
            meta.setdefault(key, f[key])
    if "total_batch_size" in f:
        meta.state("total_batch_size", f["total_batch_size"], "stated",
                   "transformers' Total train batch size (w. parallel, distributed & accumulation)",
                   _at(read, lines, "total_batch_size"))
    for key, what in (("gpus_said", "the log prints Num GPUs: {n}"), ("gpu_count", "transformers' n_gpu: {n}")):
        if key in f:
            meta.state("gpu_count", f[key], "stated", what.format(n=f[key]), _at(read, lines, key))
    for key, what in _WORLD_STATED.items():
        if key in f:
            meta.state("world_size", f[key], "stated", what.format(n=f[key]), _at(read, lines, key))
    _derived_world(read, f, lines, timeouts)
    for key, flag in (("nnodes", "--nnodes / NNODES"), ("num_machines", "accelerate launch --num_machines"),
                      ("num_nodes", "deepspeed --num_nodes")):
        if key in f:
            meta.state("nodes", f[key], "stated", f"{flag} {f[key]}", _at(read, lines, key))


def _derived_world(read: Read, f: dict, lines: dict[str, int], timeouts: list[dict]) -> None:
    """World sizes computed from what the lines state: a launcher's nodes x processes per node, a
    collective's element counts, the batch sizes; a lower bound from processes per node alone."""
    meta = read.meta
    for per, nodes, what in (("nproc_per_node", "nnodes", "torchrun --nnodes x --nproc_per_node"),
                             ("num_gpus", "num_nodes", "deepspeed --num_nodes x --num_gpus")):
        if per in f and nodes in f:
            meta.state("world_size", f[per] * f[nodes], "derived", f"{what} ({f[nodes]} x {f[per]})",
                       _at(read, lines, per, nodes))
        elif per in f:
            meta.state("world_size", f[per], "inferred (lower bound)",
                       f"{what.split(' x ')[-1]} {f[per]} (one node at least)", _at(read, lines, per))
    for t in timeouts:
        n_in, n_out, op = t.get("numel"), t.get("numel_out"), str(t.get("op") or "").upper()
        if not n_in or not n_out or n_in <= 0 or n_out <= 0:
            continue
        big, small, name = (n_out, n_in, "NumelOut / NumelIn of an all-gather") if op in _GATHERS else (
            (n_in, n_out, "NumelIn / NumelOut of a reduce-scatter") if op in _SCATTERS else (None, None, None))
        if big is not None and big % small == 0 and big // small > 1:
            meta.state("world_size", big // small, "derived", f"{name} ({t['op']} {n_in} -> {n_out})",
                       f"{read.label}:{t['line']}")
    total, per, acc = (f.get(k) for k in ("total_batch_size", "per_device_batch_size", "gradient_accumulation_steps"))
    if total and per and acc and total % (per * acc) == 0:
        meta.state("world_size", total // (per * acc), "derived",
                   "transformers' batch sizes (total / per device / accumulation)",
                   _at(read, lines, "total_batch_size", "per_device_batch_size", "gradient_accumulation_steps"))
