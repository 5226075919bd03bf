"""Megatron-LM's start-up lines in a console log (its iteration lines are ``torch_lines.parse_megatron``'s).

``megatron/training/arguments.py`` (``validate_args``) prints on rank 0 how the world is split::

    using world size: 2, data-parallel size: 2, context-parallel size: 1, hierarchical context-parallel
    sizes: None, tensor-model-parallel size: 1, pipeline-model-parallel size: 1

(one line; before 2024 ``data-parallel-size: 1`` with a hyphen and no context parallelism, in forks
``model-parallel-size: 1``; some 2025 versions glue ``Nonetensor-model-parallel size``), ``using
torch.float16 for parameters ...``, ``setting global batch size to 128``. Then the
arguments dump, ``------------------------ arguments ------------------------`` to ``--------------------
end of arguments ---------------------``, one ``  name ....... value`` a line: recognised as a dump.
GPT-NeoX's ``configure_distributed_args`` line states the world size too.
"""

from __future__ import annotations

import re

from logkit.ingest.readers.stated_facts import Facts

_WORLD = re.compile(r"^using world size: (?P<world>\d+), data-parallel[- ]size: (?P<dp>\d+)")
# GPT-NeoX (a Megatron fork run by DeepSpeed's launcher: no framework of its own here), on rank 0:
# "NeoXArgs.configure_distributed_args() using world size: 1 and model-parallel size: 1 " (later versions
# name the pipe- and context-parallel sizes before the model-parallel one)
_NEOX = re.compile(r"^NeoXArgs\.configure_distributed_args\(\) using world size: (?P<world>\d+)[, ]")
# validate_args' other start-up lines: Megatron's, nothing kept
_NOTHING = re.compile(r"^(?:using torch\.\w+ for parameters \.\.\.|Number of virtual stages per pipeline stage: "
                      r"|setting global batch size to \d+$)")
DUMP_OPEN = "------------------------ arguments ------------------------"
DUMP_CLOSE = "-------------------- end of arguments ---------------------"


def line(facts: Facts, number: int, text: str) -> str | bool:
    """Whether ``text`` is Megatron's start-up line (its facts noted); for the arguments dump's first line,
    the line that closes it."""
    stripped = text.strip()
    if stripped == DUMP_OPEN:
        facts.saw("megatron", number)
        return DUMP_CLOSE
    if (n := _NEOX.match(stripped)) is not None:
        facts.state("world_size", int(n["world"]), f"using world size: {n['world']} (GPT-NeoX's "
                                                   "configure_distributed_args)", number)
        return True
    m = _WORLD.match(stripped)
    if m is None:
        if _NOTHING.match(stripped) is None:
            return False
        facts.saw("megatron", number)
        return True
    facts.saw("megatron", number)
    facts.state("world_size", int(m["world"]), f"using world size: {m['world']} (Megatron-LM)", number)
    facts.state("data_parallel_size", int(m["dp"]), f"data-parallel size: {m['dp']} (Megatron-LM)", number)
    return True
