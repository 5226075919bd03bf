"""accelerate's echoes in a console log: what a person pastes to say how the job was launched.

- ``AcceleratorState`` as scripts print it: ``Distributed environment: MULTI_GPU  Backend: nccl``
  (``DistributedType.FSDP`` in newer versions), then ``Num processes: 8``, ``Process index: 4``, ``Local
  process index: 4``, ``Device: cuda:4``, ``Mixed precision type: fp16`` (and ``ds_config: {...}``);
- ``accelerate env``: ``- `Accelerate` version: 0.18.0``, ``- Platform: ...`` and its default config as a
  list, ``- compute_environment: LOCAL_MACHINE``, ``- distributed_type: FSDP``, ``- num_processes: 8``,
  ``- num_machines: 2``, ``- deepspeed_config: {..., 'zero_stage': 2}``, ``- fsdp_config: {...}``;
- ``accelerate launch``'s defaults warning: ```--num_processes` was set to a value of `2```.

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
        elif key in ("deepspeed_config", "zero_stage") and (z := _ZERO.search(value) or re.match(r"^([0-3])$", value)):
            stage = z.group(z.lastindex)
            facts.state("zero_stage", int(stage), f"zero_stage {stage} ({what})", number)
