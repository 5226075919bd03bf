"""DeepSpeed's lines in a console log, as its logger writes them: ``[time] [INFO] [launch.py:163:main]
dist_world_size=8`` (time and level are taken off as Python logging's; the ``[file:line:function]`` part
here).

- the launcher (``launcher/launch.py``, ``launcher/runner.py``): ``WORLD INFO DICT: {'host': [0, 1, ...]}``
  (the hosts and the CUDA devices it gives each: ``devices``), ``nnodes=2, num_local_procs=8, node_rank=0``,
  ``global_rank_mapping=defaultdict(<class 'list'>, {'host': [0, 1]})`` (each host's global ranks:
  ``ranks_by_host``), ``dist_world_size=16``, ``Setting CUDA_VISIBLE_DEVICES=...``, ``process N
  spawned with command``, ``cmd = ...``; ``Setting ds_accelerator to cuda``;
- the engine: ``DeepSpeed info: version=0.14.0``, ``Initializing TorchBackend in DeepSpeed with backend
  nccl``, ``Creating ... ZeRO stage 3 optimizer``, and the configuration it prints
  (``runtime/config.py``'s ``print``: ``DeepSpeedEngine configuration:``, then ``  key ..... value`` a line,
  ``zero_optimization_stage``, ``train_batch_size``, ``train_micro_batch_size_per_gpu``,
  ``gradient_accumulation_steps``, ``world_size`` (its data-parallel ranks); a value ``{`` opens JSON that
  runs to a ``}`` line, as the user's ``json = {`` does).

- the multi-node runner (``launcher/multinode_runner.py``, before pdsh starts each node's launcher):
  ``Running on the following workers: host1,host2`` (the hosts, so the node count);
- the flops profiler's summary (``profiling/flops_profiler/profiler.py``, printed bare, each row padded to
  60 columns): ``world size:   4``, ``data parallel size:   4`` (``model paralel size`` in old versions).

Every line with DeepSpeed's ``[file:line:function]`` prefix is recognised; those above give facts.
"""

from __future__ import annotations

import ast
import re

from logkit.ingest.readers.stated_facts import Facts

_PREFIX = re.compile(r"^\[(?P<file>[\w.]+):\d+:(?P<func>\w+)\] ?")
_WORLD_INFO = re.compile(r"WORLD INFO DICT: (?P<d>\{.*\})\s*$")
_RANK_MAPPING = re.compile(r"global_rank_mapping=(?:defaultdict\(<class 'list'>, )?(?P<d>\{[^{}]*\})\)?\s*$")
_NNODES = re.compile(r"nnodes=(?P<nodes>\d+), num_local_procs=(?P<local>\d+), node_rank=\d+")
_DIST_WORLD = re.compile(r"^dist_world_size=(?P<n>\d+)\s*$")
_VERSION = re.compile(r"DeepSpeed info: version=(?P<v>[^,\s]+)")
_BACKEND = re.compile(r"Initializing TorchBackend in DeepSpeed with backend (?P<b>\w+)")
_ZERO = re.compile(r"ZeRO stage (?P<stage>[0-3]) optimizer|zero_optimization_stage \.* ?(?P<stage2>[0-3])\s*$")
_CONFIG = re.compile(r"^\s+(?P<key>[A-Za-z_]\w*) ?\.*\s+(?P<value>.*?)\s*$")
_JSON = re.compile(r'^\s*"(?P<key>train_batch_size|train_micro_batch_size_per_gpu|gradient_accumulation_steps|stage)"'
                   r":\s*(?P<value>\d+)\s*,?\s*$")
# engine configuration key -> the fact it states
_ENGINE = {"train_batch_size": "total_batch_size", "train_micro_batch_size_per_gpu": "per_device_batch_size",
           "gradient_accumulation_steps": "gradient_accumulation_steps", "zero_optimization_stage": "zero_stage",
           "world_size": "data_parallel_size"}
_USER = {"train_batch_size": "total_batch_size", "train_micro_batch_size_per_gpu": "per_device_batch_size",
         "gradient_accumulation_steps": "gradient_accumulation_steps", "stage": "zero_stage"}
_BARE = ("Setting ds_accelerator to ", "DeepSpeed info: version=")
_WORKERS = re.compile(r"^Running on the following workers: (?P<hosts>[^\s,]+(?:,[^\s,]+)*)\s*$")
# the flops profiler's summary rows ("{:<60}  {:<8}"): the sizes it states, and its headings (nothing kept)
_PROFILER = re.compile(r"^(?P<key>world size|data parallel size|model parall?el size|batch size per GPU):\s+(?P<n>\d+)\s*$")
_PROFILER_KEYS = {"world size": "world_size", "data parallel size": "data_parallel_size"}
_PROFILER_HEAD = re.compile(r"^-+ DeepSpeed Flops Profiler -+\s*$|^Profile Summary at step \d+:\s*$")
# torch's C++ extension builder, run by DeepSpeed to build its ops (torch's lines: no framework of their own)
_OPS = re.compile(r"^(?:Using \S+ as PyTorch extensions root|No modifications detected for re-loaded extension module"
                  r"|Loading extension module \w+|Time to load \w+ op:|Detected CUDA files, patching ldflags"
                  r"|Emitting ninja build file|Building extension module|Allowing ninja to set a default number"
                  r"|ninja: no work to do)")


def line(facts: Facts, number: int, text: str) -> str | bool:
    """Whether ``text`` is DeepSpeed's (its facts noted); ``"}"``: it opens JSON that a ``}`` line closes."""
    m = _PREFIX.match(text) if text.startswith("[") else None
    if m is None:
        if text.startswith(_BARE):  # printed without the logger's prefix by old versions
            facts.saw("deepspeed", number)
            _engine(facts, number, text)
            return True
        if (p := _PROFILER.match(text)) is not None:
            _profiler(facts, number, p)
            return True
        if _PROFILER_HEAD.match(text) is not None:
            facts.saw("deepspeed", number)
            return True
        return bool(_OPS.match(text))
    facts.saw("deepspeed", number)
    body = text[m.end():]
    if m["file"] == "launch.py":
        _launcher(facts, number, body)
    elif m["file"] == "multinode_runner.py" and (w := _WORKERS.match(body)) is not None:
        hosts = w["hosts"].split(",")
        facts.state("hosts", sorted(set(hosts)), "Running on the following workers (DeepSpeed's multi-node runner)",
                    number)
        facts.state("nodes", len(set(hosts)), f"{len(set(hosts))} worker(s) named (DeepSpeed's multi-node runner)",
                    number)
    elif m["file"] == "config.py":
        if (c := _CONFIG.match(body)) is not None and c["key"] in _ENGINE and c["value"].isdigit():
            key = _ENGINE[c["key"]]
            facts.state(key, int(c["value"]), f"{c['key']} {c['value']} (DeepSpeed's engine configuration)", number)
            if key == "zero_stage":
                facts.state("strategy", "deepspeed", f"ZeRO stage {c['value']} (DeepSpeed's engine configuration)",
                            number)
            elif key == "data_parallel_size":  # the job has at least its data-parallel ranks
                facts.infer("world_size", int(c["value"]), f"lower bound: DeepSpeed's data-parallel world_size "
                                                           f"{c['value']}", number)
        stripped = body.rstrip()
        if stripped.endswith("{"):
            return "}"
    else:
        _engine(facts, number, body)
    return True


def json_line(facts: Facts, number: int, text: str) -> None:
    """A line of a configuration DeepSpeed prints as JSON (``json = {``): the batch sizes and ZeRO stage."""
    if (j := _JSON.match(text)) is not None:
        key = _USER[j["key"]]
        facts.state(key, int(j["value"]), f"\"{j['key']}\": {j['value']} (DeepSpeed's configuration)", number)
        if key == "zero_stage":
            facts.state("strategy", "deepspeed", f"ZeRO stage {j['value']} (DeepSpeed's configuration)", number)


def _host_lists(text: str) -> dict[str, list[int]] | None:
    """``{'host': [0, 1], ...}`` as the launcher prints it: each host's whole numbers, sorted; else None."""
    try:
        found = ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None
    if not isinstance(found, dict) or not found or not all(
            isinstance(v, list) and all(isinstance(i, int) and not isinstance(i, bool) for i in v) for v in found.values()):
        return None
    return {str(h): sorted(v) for h, v in found.items()}


def _launcher(facts: Facts, number: int, body: str) -> None:
    if (w := _WORLD_INFO.search(body)) is not None:
        if (hosts := _host_lists(w["d"])) is None:
            return
        facts.state("nodes", len(hosts), f"WORLD INFO DICT names {len(hosts)} host(s) (DeepSpeed launcher)", number)
        facts.state("hosts", sorted(hosts), "WORLD INFO DICT (DeepSpeed launcher)", number)
        gpus = sum(len(v) for v in hosts.values())
        facts.state("gpu_count", gpus, f"WORLD INFO DICT gives {gpus} GPU(s) (DeepSpeed launcher)", number)
        # the CUDA devices the launcher gives each host's processes (--include / --num_gpus): each its
        # CUDA_VISIBLE_DEVICES, as NCCL's cudaDev names them
        facts.state("devices", hosts, "WORLD INFO DICT (DeepSpeed launcher)", number)
    elif "global_rank_mapping" in body and (r := _RANK_MAPPING.search(body)) is not None:
        if (ranks := _host_lists(r["d"])) is not None:
            facts.state("ranks_by_host", ranks, "global_rank_mapping (DeepSpeed launcher)", number)
    elif (n := _NNODES.search(body)) is not None:
        nodes, local = int(n["nodes"]), int(n["local"])
        facts.state("nodes", nodes, f"nnodes={nodes} (DeepSpeed launcher)", number)
        facts.state("nproc_per_node", local, f"num_local_procs={local} (DeepSpeed launcher)", number)
        facts.derive("world_size", nodes * local, f"nnodes={nodes} x num_local_procs={local} (DeepSpeed launcher)",
                     number)
    elif (d := _DIST_WORLD.match(body)) is not None:
        facts.state("world_size", int(d["n"]), f"dist_world_size={d['n']} (DeepSpeed launcher)", number)


def _engine(facts: Facts, number: int, body: str) -> None:
    if (v := _VERSION.search(body)) is not None:
        facts.state("deepspeed_version", v["v"], f"DeepSpeed info: version={v['v']}", number)
        facts.state("strategy", "deepspeed", "the DeepSpeed engine started (DeepSpeed info)", number)
    elif (b := _BACKEND.search(body)) is not None:
        facts.state("backend", b["b"], f"backend {b['b']} (DeepSpeed)", number)
    elif (z := _ZERO.search(body)) is not None:
        stage = z["stage"] or z["stage2"]
        facts.state("zero_stage", int(stage), f"ZeRO stage {stage} (DeepSpeed)", number)
        facts.state("strategy", "deepspeed", f"ZeRO stage {stage} (DeepSpeed)", number)


def _profiler(facts: Facts, number: int, p: re.Match) -> None:
    """A size row of the flops profiler's summary: the engine's world size and data-parallel size, stated."""
    facts.saw("deepspeed", number)
    if (key := _PROFILER_KEYS.get(p["key"])) is not None:
        facts.state(key, int(p["n"]), f"{p['key']}: {p['n']} (DeepSpeed's flops profiler)", number)
