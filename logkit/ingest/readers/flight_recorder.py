"""PyTorch Flight Recorder dumps -> ``flight_recorder`` events, one per process group of the rank
that dumped: the last collective it enqueued there (sequence number, op, sizes, state, and the
Python stack that enqueued it).

A dump is what ``torch._C._distributed_c10d._dump_fr_trace()`` returns (the NCCL watchdog writes
the same on a timeout to ``TORCH_FR_DUMP_TEMP_FILE<rank>``, by default ``nccl_trace_rank_<rank>``):
a pickled dict ``{version, pg_config, pg_status, entries: [{collective_seq_id, profiling_name,
state, input_sizes, input_dtypes, frames, pg_id, process_group, timeout_ms, ...}]}``, or its JSON
form (``_dump_fr_trace_json``). A dump is data from another machine: it is unpickled with no
globals at all (a pickle naming any class or function is refused, never run), as plain dicts,
lists, strings and numbers. The rank is the number the file name ends with (as torch's
``fr_trace`` tool reads it), unless the folder says it.
"""

from __future__ import annotations

import io
import math
import pickle
import pickletools
import re
from pathlib import Path

import orjson

from logkit.ingest.readers.base import Read, ReadResult, read_bytes
from logkit.ingest.readers.formats import FileFormat
from logkit.schema.vocab import EventKind

_RANK = re.compile(r"(\d+)(?:\.(?:pkl|pickle|json))?(?:\.gz)?$")
MAX_FRAMES = 12  # the innermost frames of the stack that enqueued the collective


class _DataOnly(pickle.Unpickler):
    """Builtin containers and scalars only: any class or function a pickle names is refused."""

    def find_class(self, module, name):
        raise pickle.UnpicklingError(f"refused: the dump names {module}.{name} (only plain data is read)")

    def persistent_load(self, pid):
        raise pickle.UnpicklingError("refused: a persistent id (only plain data is read)")


# opcodes that build objects from code (classes, functions, extensions): never in a dump of plain data
_CODE_OPS = {"GLOBAL", "STACK_GLOBAL", "REDUCE", "BUILD", "INST", "OBJ", "NEWOBJ", "NEWOBJ_EX", "EXT1", "EXT2",
             "EXT4", "PERSID", "BINPERSID"}
_MEMO_OPS = {"PUT", "BINPUT", "LONG_BINPUT"}


def _check_ops(data: bytes) -> None:
    """Walk the pickle's opcodes before the unpickler runs: refuse code, and memo indices past
    the number of opcodes (a mutated index makes the unpickler allocate gigabytes)."""
    for n, (op, arg, _) in enumerate(pickletools.genops(data)):
        if op.name in _CODE_OPS:
            raise pickle.UnpicklingError(f"refused: opcode {op.name}{f' {arg}' if arg else ''} builds objects from "
                                         "code (only plain data is read)")
        if op.name in _MEMO_OPS and isinstance(arg, int) and arg > n:
            raise pickle.UnpicklingError(f"memo index {arg} past opcode {n}")


def load_dump(data: bytes) -> dict:
    """The dump's dict (JSON or pickle); raises ValueError for anything else."""
    if data.lstrip()[:1] == b"{":
        doc = orjson.loads(data)
    else:
        try:
            _check_ops(data)
            doc = _DataOnly(io.BytesIO(data)).load()
        except (pickle.UnpicklingError, EOFError, ValueError, TypeError, IndexError, KeyError,
                AttributeError, MemoryError, RecursionError, UnicodeDecodeError) as exc:
            raise ValueError(f"not a readable pickle: {exc}") from exc
    if not isinstance(doc, dict) or not isinstance(doc.get("entries"), list):
        raise ValueError("no 'entries' list: not a Flight Recorder dump")
    return doc


def _int(value) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    return None


def _numel(sizes) -> int | None:
    """Elements of the first input tensor (``input_sizes``: a list of shapes)."""
    if not isinstance(sizes, list) or not sizes or not isinstance(sizes[0], list):
        return None
    n = 1
    for d in sizes[0]:
        if _int(d) is None:
            return None
        n *= _int(d)
    return n


def _stack(frames) -> str | None:
    if not isinstance(frames, list):
        return None
    frames = [f for f in frames if isinstance(f, dict)]
    # torch's own frames (distributed_c10d, its logger wrapper) say nothing of where the run was
    own = [f for f in frames if "/torch/" not in str(f.get("filename")).replace("\\", "/")] or frames
    lines = [f"{f.get('filename')}:{f.get('line')} in {f.get('name')}" for f in own[:MAX_FRAMES]]
    return "\n".join(lines) or None


def _pg_of(entry: dict) -> tuple[str, str | None]:
    pg = entry.get("process_group")
    name = pg[0] if isinstance(pg, (list, tuple)) and pg else entry.get("pg_id")
    desc = pg[1] if isinstance(pg, (list, tuple)) and len(pg) > 1 else None
    return str(name if name is not None else "?"), (str(desc) if desc is not None else None)


def read_flight_recorder(path: Path, rank: int | None = None) -> ReadResult:
    read = Read(Path(path), FileFormat.FLIGHT_RECORDER)
    data = read_bytes(read.path, read)
    if not data:
        return read.result()
    try:
        doc = load_dump(data)
    except (ValueError, orjson.JSONDecodeError) as exc:
        read.note(None, f"not read as a Flight Recorder dump: {exc}")
        return read.result()
    if rank is None and (m := _RANK.search(read.path.name)) is not None:
        rank = int(m[1])
    read.meta.flight_recorder_version = str(doc.get("version"))
    status = doc.get("pg_status") if isinstance(doc.get("pg_status"), dict) else {}
    last: dict[str, dict] = {}
    for i, entry in enumerate(doc["entries"]):
        if not isinstance(entry, dict) or entry.get("is_p2p"):
            continue  # p2p work has its own sequence (p2p_seq_id)
        seq = _int(entry.get("collective_seq_id"))
        if seq is None:
            read.note(None, f"entry {i}: no collective_seq_id", str(entry)[:200])
            continue
        pg, _ = _pg_of(entry)
        if pg not in last or seq >= _int(last[pg].get("collective_seq_id")):
            last[pg] = entry
    for pg, entry in last.items():
        seq, (_, desc) = _int(entry.get("collective_seq_id")), _pg_of(entry)
        pg_status = status.get(str(entry.get("pg_id")), {}) if isinstance(status, dict) else {}
        op, state = entry.get("profiling_name"), entry.get("state")
        dtypes = entry.get("input_dtypes")
        read.event(EventKind.FLIGHT_RECORDER, None, rank=rank, pg=pg, pg_name=desc, seq=seq, op=str(op) if op is not None else None,
                   numel=_numel(entry.get("input_sizes")), status=str(state) if state is not None else None,
                   dtypes=",".join(map(str, dtypes)) if isinstance(dtypes, list) else None,
                   timeout_ms=float(t) if (t := _int(entry.get("timeout_ms"))) is not None else None,
                   last_completed=_int(pg_status.get("last_completed_collective")) if isinstance(pg_status, dict)
                   else None, stack=_stack(entry.get("frames")),
                   message=f"last collective #{seq} of process group {pg}{f' ({desc})' if desc else ''}: {op}, "
                           f"{state}")
    read.used = len(last)
    return read.result()
