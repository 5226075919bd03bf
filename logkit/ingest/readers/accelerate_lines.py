"""accelerate's echoes in a console log: what a person pastes to say how the job was launched.

- ``AcceleratorState`` as scripts print it: ``Distributed environment: MULTI_GPU  Backend: nccl``
  (``DistributedType.FSDP`` in newer versions), then ``Num processes: 8``, ``Process index: 4``, ``Local
  process index: 4``, ``Device: cuda:4``, ``Mixed precision type: fp16`` (and ``ds_config: {...}``);
- ``accelerate env``: ``- `Accelerate` version: 0.18.0``, ``- Platform: ...`` and its default config as a
  list, ``- compute_environment: LOCAL_MACHINE``, ``- distributed_type: FSDP``, ``- num_processes: 8``,
  ``- num_machines: 2``, ``- deepspeed_config: {..., 'zero_stage': 2}``, ``- fsdp_config: {...}``;
- ``accelerate launch``'s defaults warning: ```--num_processes` was set to a value of `2```;
- the FSDP plugin as a script prints it (``FullyShardedDataParallelPlugin(sharding_strategy=<ShardingStrategy.
  FULL_SHARD: 1>, ..., mixed_precision_policy=MixedPrecision(param_dtype=torch.bfloat16, ...), cpu_offload=
  CPUOffload(offload_params=True), ...``), and ``accelerate env``'s ``- fsdp_config: {'fsdp_sharding_strategy':
  1, 'fsdp_offload_params': False, ...}``: the strategy (fsdp, fsdp2 where ``fsdp_version`` is 2) and its facts
  (``strategy_facts``: sharding strategy, offload, parameter and reduce dtypes, ``fsdp_version``), as the
  emitter names them.

``transformers env`` (``transformers-cli env``) nests accelerate's config in its own report (``- `transformers`
version: 4.52.1``, ``- Accelerate config:    - distributed_type: FSDP``): its facts are read the same, and
the report is transformers' (the tool that wrote it), not accelerate's.

``num_processes`` is every process of the job (all machines), ``num_machines`` the hosts.
"""

from __future__ import annotations

import re

from logkit.ingest.readers.stated_facts import Facts

# the state as a logger prints it: after the logger's name where the log format puts one ("__main__ - ")
_ENV = re.compile(r"(?:^|\s-\s)Distributed environment: (?:DistributedType\.)?(?P<type>\w+)(?:\s+Backend: (?P<backend>\w+))?")
_STATE = re.compile(r"^(?P<key>Num processes|Process index|Local process index|Device|Mixed precision type|ds_config)"
                    r": (?P<value>.*?)\s*$")
_ITEM = re.compile(r"^\s*- (?P<key>`?\w[\w `?()]*?`?(?: \w+)*?): ?(?P<value>.*?)\s*$")
_DEFAULT = re.compile(r"^\s*`--(?P<key>\w+)` was set to a value of `'?(?P<value>[^'`]*)'?`")
_ZERO = re.compile(r"'zero_stage': (?P<stage>[0-3])")
_STRATEGY = {"MULTI_GPU": "ddp", "MULTI_NPU": "ddp", "MULTI_XPU": "ddp", "MULTI_CPU": "ddp", "FSDP": "fsdp",
             "DEEPSPEED": "deepspeed", "MEGATRON_LM": "megatron"}
# the FSDP plugin's fields, in its repr (key=value) or in the config dict ('fsdp_key': value)
_PLUGIN = re.compile(r"FullyShardedDataParallelPlugin\(")
_FSDP_FIELDS = {
    "sharding_strategy": re.compile(r"(?:\bsharding_strategy=<ShardingStrategy\.|'fsdp_sharding_strategy': '?)"
                                    r"(?P<v>[A-Z_0-9]+)"),
    "offload": re.compile(r"(?:offload_params=|'fsdp_offload_params': )(?P<v>True|False|true|false)"),
    "param_dtype": re.compile(r"\bparam_dtype=torch\.(?P<v>\w+)"),
    "reduce_dtype": re.compile(r"\breduce_dtype=torch\.(?P<v>\w+)"),
    "version": re.compile(r"(?:\bfsdp_version=|'fsdp_version': )(?P<v>[12])\b"),
    "reshard_after_forward": re.compile(r"(?:\breshard_after_forward=|'fsdp_reshard_after_forward': )(?P<v>True|False)"),
}
# accelerate numbers the sharding strategies from 1 (FSDP_SHARDING_STRATEGY in accelerate/utils/constants.py)
_SHARDING = ("FULL_SHARD", "SHARD_GRAD_OP", "NO_SHARD", "HYBRID_SHARD", "HYBRID_SHARD_ZERO2")
_TEXT = ("The following values were not passed to `accelerate launch`", "More than one GPU was found",
         "If this was unintended please pass in", "To avoid this warning pass in values",
         "Copy-and-paste the text below in your GitHub issue")


class Accelerate:
    """The state of one file's accelerate echoes: within ``AcceleratorState``'s lines, within ``accelerate
    env``'s list."""

    def __init__(self, facts: Facts) -> None:
        self.facts = facts
        self.in_state = False
        self.in_env = False
        self.reporter = "accelerate"  # whose env report the items are in: accelerate's, or transformers'

    def line(self, number: int, text: str) -> bool:
        stripped = text.strip()
        if "FullyShardedDataParallelPlugin(" in stripped and _PLUGIN.search(stripped) is not None:
            self.facts.saw("accelerate", number)
            self._fsdp(number, stripped, "FullyShardedDataParallelPlugin")
            return True
        if "Distributed environment" in stripped and (m := _ENV.search(stripped)) is not None:
            self.in_state = True
            self._type(number, m["type"], "Distributed environment")
            if m["backend"]:
                self.facts.state("backend", m["backend"], f"Backend: {m['backend']} (accelerate)", number)
            return True
        if self.in_state and (m := _STATE.match(stripped)) is not None:
            self._state(number, m["key"], m["value"])
            return True
        self.in_state = False
        if stripped.startswith("- ") and (m := _ITEM.match(text)) is not None:
            return self._item(number, m["key"].replace("`", "").strip(), m["value"])
        if stripped.startswith("`--") and (m := _DEFAULT.match(stripped)) is not None:
            self.facts.saw("accelerate", number)
            self._setting(number, m["key"], m["value"], "accelerate launch's default")
            return True
        if stripped.startswith(_TEXT):
            self.facts.saw("accelerate", number)
            return True
        return False

    def _type(self, number: int, kind: str, what: str, who: str = "accelerate") -> None:
        self.facts.saw(who, number)
        if kind in _STRATEGY:
            self.facts.state("strategy", _STRATEGY[kind], f"{what}: {kind} (accelerate)", number)

    def _state(self, number: int, key: str, value: str) -> None:
        facts = self.facts
        if key == "Num processes" and value.isdigit():
            facts.state("world_size", int(value), f"Num processes: {value} (accelerate)", number)
        elif key in ("Process index",) and value.isdigit():
            facts.rank_seen(int(value), f"Process index: {value}", number)
        elif key == "Mixed precision type":
            facts.state("mixed_precision", value, f"Mixed precision type: {value} (accelerate)", number)
        elif key == "ds_config" and (z := _ZERO.search(value)) is not None:
            facts.state("zero_stage", int(z["stage"]), f"ds_config zero_stage {z['stage']} (accelerate)", number)

    def _item(self, number: int, key: str, value: str) -> bool:
        if key == "transformers version" and not self.in_env:
            self.in_env, self.reporter = True, "transformers"  # its first item: the report is transformers'
        elif key in ("Accelerate version", "Accelerate default config", "compute_environment"):
            self.in_env = True
        if not self.in_env:
            return False
        self.facts.saw(self.reporter, number)
        self._setting(number, key, value, "accelerate config")
        return True

    def _setting(self, number: int, key: str, value: str, what: str) -> None:
        facts = self.facts
        if key == "num_processes" and value.isdigit():
            facts.state("world_size", int(value), f"num_processes {value} ({what})", number)
        elif key == "num_machines" and value.isdigit():
            facts.state("nodes", int(value), f"num_machines {value} ({what})", number)
        elif key == "distributed_type":
            self._type(number, value.replace("DistributedType.", ""), "distributed_type",
                       self.reporter if what == "accelerate config" else "accelerate")
        elif key == "mixed_precision" and value:
            facts.state("mixed_precision", value, f"mixed_precision {value} ({what})", number)
        elif key == "fsdp_config" and "fsdp_" in value:
            self._fsdp(number, value, f"fsdp_config ({what})")
        elif key in ("deepspeed_config", "zero_stage") and (z := _ZERO.search(value) or re.match(r"^([0-3])$", value)):
            stage = z.group(z.lastindex)
            facts.state("zero_stage", int(stage), f"zero_stage {stage} ({what})", number)

    def _fsdp(self, number: int, text: str, what: str) -> None:
        """The FSDP plugin's strategy and facts from its repr or its config dict (see module doc)."""
        found = {k: m["v"] for k, pattern in _FSDP_FIELDS.items() if (m := pattern.search(text)) is not None}
        facts: dict = {}
        sharding = found.get("sharding_strategy")
        if sharding is not None:
            facts["sharding_strategy"] = _SHARDING[int(sharding) - 1] if sharding.isdigit() and \
                1 <= int(sharding) <= len(_SHARDING) else sharding
            facts["reshard_after_forward"] = facts["sharding_strategy"] in ("FULL_SHARD", "HYBRID_SHARD")
        if "reshard_after_forward" in found:
            facts["reshard_after_forward"] = found["reshard_after_forward"] == "True"
        if "offload" in found:
            facts["offload"] = "cpu" if found["offload"].lower() == "true" else "none"
        for key in ("param_dtype", "reduce_dtype"):
            if key in found:
                facts[key] = found[key]
        version = found.get("version")  # FSDP1 or FSDP2 where the plugin names its version
        if version:
            facts["fsdp_version"] = int(version)
        # fsdp1 / fsdp2 where the version is named (a distributed_type stated before it keeps its generic
        # fsdp, the version then in the facts: the reports say FSDP2 from either)
        strategy = f"fsdp{version}" if version else "fsdp"
        self.facts.state("strategy", strategy, f"{what}{f' fsdp_version {version}' if version else ''} (accelerate)",
                         number)
        if facts:
            self.facts.state("strategy_facts", facts, f"{what} (accelerate)", number)
