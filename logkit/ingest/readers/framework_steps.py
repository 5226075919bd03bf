"""A step that a framework's own line states, read for the console reader (``console.py``): verl's records
(a record a line broke continued on the next), a script's epoch summary, Megatron's iteration line, the
iteration lines of torchtune, litgpt, nanoGPT, nanotron and NeMo (``iteration_lines``), and a script's own
counter and loss lines (``script_lines``, per process)."""

from __future__ import annotations

from logkit.ingest.readers import console_blocks as blocks
from logkit.ingest.readers import iteration_lines, verl_lines
from logkit.ingest.readers import torch_lines as tl


def step(console, number: int, text: str, rank: int, t: float | None) -> bool:
    """A step a framework's own line states (verl's records, a script's epoch summary, Megatron's
    iteration line) as rows and facts; else False."""
    read = console.read
    if text.startswith("step:") and (v := verl_lines.record(text)) is not None:
        console.frameworks.facts.saw("verl", number)
        console.verl_row = read.step(number, {"rank": rank, "time_s": t, **v})
        return True
    if console.verl_row is not None and (v := verl_lines.rest(text)) is not None:
        console.verl_row.update(v)  # the rest of the record the line before broke
        return True
    console.verl_row = None
    if "oss" in text and (e := tl.parse_epoch_summary(text)) is not None:
        blocks.epoch_rows(read, number, e, rank, t)
        return True
    if "iteration" in text and (it := tl.parse_megatron(text)) is not None:
        read.step(number, {"rank": rank, "time_s": t, **it})
        console.frameworks.megatron_iteration(number, it, read.meta)
        return True
    # torchtune's, litgpt's, nanoGPT's, nanotron's, NeMo's own step lines
    if (it := iteration_lines.parse(text)) is not None:
        return iteration_lines.record(console, number, it, rank, t)
    # a script's own counter and loss lines (each process's: the rank its prefix names)
    said = console.script_progress.line(text, rank) if ("oss" in text or "poch" in text) else None
    if isinstance(said, dict):
        read.step(number, {"rank": rank, "time_s": t, **said})
    return said is not None
