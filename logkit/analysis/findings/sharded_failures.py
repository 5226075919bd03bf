"""Failures of sharded runs read as such: a watchdog timeout in a collective that a sharded run issues
(``_ALLGATHER_BASE``, ``ALLGATHER_INTO_TENSOR``, ``_REDUCE_SCATTER_BASE``, ``REDUCE_SCATTER``, ...) says
what that collective does there and the phase it was in; an out-of-memory error raised inside a sharded
step (a traceback through FSDP's or ZeRO's code) says which step of the sharding ran out.

Where the phase comes from, first found: the ranks' own ``error`` / ``stall`` records (phase
``collective``, detail "all_gather (forward) ...", ``FsdpCommTimer.where``); a traceback's frames in the
wrapper's code, which the console reader puts on the event its exception line makes (``phase``,
``phase_detail``: ``ingest.readers.sharded_frames``). Without either the finding says the phase is not in
the logs. One ``sharded_failure`` finding per timed-out collective, and one for the out-of-memory errors.
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis.findings.collective_findings import column, rank_text
from logkit.analysis.results import Finding
from logkit.schema.findings import FindingKind
from logkit.schema.records import EventType
from logkit.schema.vocab import EventKind

_KIND = FindingKind.SHARDED_FAILURE
_GATHER = ("gathers each rank's shard of the parameters into whole parameters before a unit's forward (and "
           "again in backward where the unit resharded after forward: FSDP FULL_SHARD, ZeRO-3); ZeRO-1/2 gather "
           "the updated partitions after the optimizer step")
_SCATTER = ("sums the gradients of all ranks and leaves each rank its shard of them, after a unit's backward "
            "(FSDP, ZeRO-2/3)")
# the watchdog's OpType (and torch.distributed's names) -> what the collective does in a sharded run
ROLES = {
    **dict.fromkeys(("_ALLGATHER_BASE", "ALLGATHER_INTO_TENSOR", "ALLGATHER", "ALLGATHER_INTO_TENSOR_COALESCED",
                     "ALL_GATHER", "ALL_GATHER_SINGLE", "ALL_GATHER_INTO_TENSOR"), _GATHER),
    **dict.fromkeys(("_REDUCE_SCATTER_BASE", "REDUCE_SCATTER", "REDUCE_SCATTER_TENSOR_COALESCED",
                     "REDUCE_SCATTER_TENSOR", "REDUCE_SCATTER_SINGLE"), _SCATTER),
}
SHARDED_STRATEGIES = ("fsdp", "fsdp1", "fsdp2", "deepspeed")
# the ops only the sharded wrappers issue (into one flat tensor); a plain ALLGATHER / REDUCE_SCATTER is any
# code's, so it is read as sharded only where the run is known to be (its strategy, or sharded frames)
SHARDED_ONLY = ("_ALLGATHER_BASE", "ALLGATHER_INTO_TENSOR", "ALLGATHER_INTO_TENSOR_COALESCED", "ALL_GATHER_INTO_TENSOR",
                "_REDUCE_SCATTER_BASE", "REDUCE_SCATTER_TENSOR", "REDUCE_SCATTER_TENSOR_COALESCED")


def _phase_rows(ev: pd.DataFrame) -> pd.DataFrame:
    """Events that say the phase of a sharded step: the ranks' records in a collective, and the events a
    traceback through a sharded wrapper's code made."""
    if "phase" not in ev.columns:
        return ev.iloc[:0]
    placed = ev[ev["phase"].notna()]
    ours = placed["kind"].isin([EventType.ERROR, EventType.STALL]) & (placed["phase"] == "collective")
    framed = placed["kind"].isin([EventKind.FAILURE_CAUSE, EventKind.CUDA_OOM]) & column(placed, "phase_detail").notna()
    return placed[ours | framed]


def _phase_words(rows: pd.DataFrame) -> tuple[str, list]:
    """What the phase rows say, each with its rank, and their evidence."""
    parts = []
    for r, phase, detail in zip(rows["rank"], rows["phase"], column(rows, "phase_detail"), strict=True):
        said = detail if phase == "collective" else f"{phase or 'phase unknown'}: {detail}"
        parts.append(f"rank {rank_text(r)} was in {said}")
    return "; ".join(dict.fromkeys(parts)), list(rows["source"].dropna())


def sharded_failure_findings(session) -> list[Finding]:
    """The ``sharded_failure`` findings of ``session`` (see the module doc)."""
    ev, sid = session.events, session.meta.session_id
    if not len(ev):
        return []
    kind = ev["kind"].astype("object")
    phases = _phase_rows(ev)
    phase_text, phase_sources = _phase_words(phases) if len(phases) else ("", [])
    strategy = session.meta.strategy
    out = []
    timeouts = ev[kind == EventKind.NCCL_TIMEOUT]
    if len(timeouts):
        ops = timeouts["op"].astype("object").str.upper()
        sharded = timeouts[ops.isin(list(ROLES))]
        known = strategy in SHARDED_STRATEGIES or len(phases) > 0
        for op, rows in sharded.groupby(ops[ops.isin(list(ROLES))], sort=True):
            if not known and op not in SHARDED_ONLY:
                continue  # an all-gather of a run not known to be sharded: the timeout findings say it
            ranks = sorted({int(r) for r in rows["rank"].dropna()})
            seqs = sorted({int(s) for s in rows["seq"].dropna()}) if "seq" in rows.columns else []
            detail = (f"{op} timed out on rank(s) {', '.join(map(str, ranks)) or '?'}"
                      + (f" (collective #{', #'.join(map(str, seqs))})" if seqs else "") + f". In a sharded run it "
                      f"{ROLES[op]}" + (f" (this run: {strategy})" if strategy in SHARDED_STRATEGIES else "") + ". "
                      + (f"Where: {phase_text}." if phase_text else "The phase it was in is not in the logs "
                         "(a traceback through FSDP's or ZeRO's code, or logkit's records, would say it).")
                      + " A rank that never reached it (data, evaluation or a checkpoint on rank 0 alone, an "
                        "exception) is what the others waited for.")
            out.append(Finding.make(_KIND.severity, _KIND, sid, f"Sharded collective timed out: {op}", detail,
                                    list(rows["source"]) + phase_sources, list(rows["rank"]), op=op,
                                    phase=_first_phase(phases)))
    ooms = ev[kind == EventKind.CUDA_OOM]
    framed = ooms[column(ooms, "phase_detail").notna()] if len(ooms) else ooms
    if len(framed):
        where, sources = _phase_words(framed)
        out.append(Finding.make(_KIND.severity, _KIND, sid, f"Out of memory inside a sharded step ({_first_phase(framed)})",
                                f"CUDA ran out of memory inside the sharded step: {where}. Gathering a unit's "
                                "parameters needs its whole size at once: wrap smaller units, reshard after forward, "
                                "lower the batch, or offload.", sources, list(framed["rank"]),
                                phase=_first_phase(framed)))
    return out


def _first_phase(rows: pd.DataFrame) -> str | None:
    for phase, detail in zip(rows["phase"], column(rows, "phase_detail"), strict=True):
        if phase == "collective" and isinstance(detail, str) and "(" in detail:
            return detail.split("(", 1)[1].split(")", 1)[0]  # "all_gather (forward) ..." -> forward
        if isinstance(phase, str) and phase and phase != "collective":
            return phase
    return None
