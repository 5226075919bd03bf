"""The run facts a program's printed arguments state: the flags of the command that started it (one a line
under a ``\\`` continuation, as people paste a launch script, or on the command's own line), and an argparse
``Namespace(...)`` a script prints at its start (fairseq's ``distributed_world_size=4,
distributed_backend='nccl'``).

What they state: FSDP or DeepSpeed asked of transformers' Trainer (``--fsdp "full_shard auto_wrap"``,
``--deepspeed ds_config.json``) or of DeepSpeed itself (``--deepspeed_config ds.json``, or ``--deepspeed`` alone,
its switch): the strategy; the world size (``distributed_world_size``, ``world_size``) and
the process group's backend. A flag that turns a thing off (``--fsdp ""``, ``deepspeed=None``) states nothing.
"""

from __future__ import annotations

import re

from logkit.ingest.readers.stated_facts import Facts

# a command's line: a launcher or an interpreter, then the flags; or a continuation line of flags alone
_COMMAND = re.compile(r"^(?:\S*[$#] ?)?(?:\S*/)?(?:python[\d.]*|torchrun|deepspeed|accelerate launch|\S+\.(?:py|sh))\s.*\s--\w")
_CONTINUED = re.compile(r"^\s*--[A-Za-z]\w*(?:[ =]|\s*\\?\s*$)")
_FLAG = re.compile(r"(?:^|\s)--(?P<key>[A-Za-z][\w-]*)(?:[ =](?P<value>\"[^\"]*\"|'[^']*'|[^\s\\-][^\s\\]*))?")
_NAMESPACE = re.compile(r"^\s*Namespace\(")
# key=value of a Namespace: a quoted string, a list, or a bare word
_PAIR = re.compile(r"(?:^|[(,]\s*)(?P<key>[A-Za-z_]\w*)=(?P<value>'[^']*'|\"[^\"]*\"|\[[^\]]*\]|[^,()\s]+)")
_OFF = frozenset({"", "none", "false", "[]", "0", "no"})
_BACKENDS = frozenset({"nccl", "gloo", "mpi", "ucc", "hccl", "xccl", "ccl"})
_STRATEGY = {"fsdp": "fsdp", "deepspeed": "deepspeed", "deepspeed_config": "deepspeed"}
_WORLD = ("distributed_world_size", "world_size")
_BACKEND = ("distributed_backend", "dist_backend", "backend", "ddp_backend")


def _pairs(text: str) -> list[tuple[str, str]] | None:
    """The (key, value) pairs ``text`` prints, or None where it is no command, flag line or Namespace."""
    if _NAMESPACE.match(text) is not None:
        return [(m["key"], m["value"]) for m in _PAIR.finditer(text)]
    if _CONTINUED.match(text) is not None or ("--" in text and _COMMAND.match(text) is not None):
        # a flag alone is a switch turned on (DeepSpeed's ``--deepspeed``)
        return [(m["key"].replace("-", "_"), "true" if m["value"] is None else m["value"]) for m in _FLAG.finditer(text)]
    return None


def line(facts: Facts, number: int, text: str) -> bool:
    """Whether ``text`` prints a program's arguments (the facts they state noted)."""
    pairs = _pairs(text)
    if pairs is None:
        return False
    for key, raw in pairs:
        value = raw.strip("'\"")
        said = f"{key}={raw} (the printed arguments)"
        if key in _STRATEGY and value.lower() not in _OFF:
            facts.state("strategy", _STRATEGY[key], said, number)
        elif key in _WORLD and value.isdigit():
            facts.state("world_size", int(value), said, number)
        elif key in _BACKEND and value.lower() in _BACKENDS:
            facts.state("backend", value.lower(), said, number)
    return True
