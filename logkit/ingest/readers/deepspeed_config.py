"""A DeepSpeed config (``ds_config.json``, or any name a run gives it: ``--deepspeed my_z2.json``), kept in
the run's output folder beside its logs: ``zero_optimization.stage`` (DeepSpeed's ``DeepSpeedZeroConfig.stage``)
-> ``meta.zero_stage``, with the file and line in ``meta.facts_source``. A stage that is no ZeRO stage (0-3)
is a diagnostic, never a fact.
"""

from __future__ import annotations

from pathlib import Path

from logkit.ingest.readers.base import Read, ReadResult
from logkit.ingest.readers.formats import FileFormat
from logkit.ingest.readers.json_docs import line_of, load_doc


def read_deepspeed_config(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.DEEPSPEED_CONFIG, time_base="elapsed")
    doc = load_doc(read)
    if doc is None:
        return read.result()
    zero = doc.get("zero_optimization")
    stage = zero.get("stage") if isinstance(zero, dict) else None
    line = line_of(read, '"stage"', after='"zero_optimization"')
    if isinstance(stage, int) and not isinstance(stage, bool) and 0 <= stage <= 3:
        read.meta.zero_stage = stage
        read.meta.facts_source = {"zero_stage": f"{read.label}:{line}" if line else read.label}
    elif stage is not None:
        read.note(line, f"zero_optimization.stage {stage!r} is no ZeRO stage (0-3): left unknown")
    return read.result()
