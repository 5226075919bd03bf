"""Findings about NCCL collectives from what the logs say: watchdog timeouts (and the ranks the
watchdog stopped at a work item without a timeout line of their own), collective mismatches (the
fields torch says differ, and both values), the watchdog's own hang, NCCL errors. A timeout that a console
shows its main process saving or evaluating before (``last_phase``), that process not among the ranks that
timed out, says it: work one rank did alone while the others waited (``solo_phases.last_seen``). Also the row
helpers the other log findings share. Evidence is each line's ``file:line``.
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis.findings.solo_phases import last_seen
from logkit.analysis.results import Finding
from logkit.schema.findings import FindingKind
from logkit.schema.vocab import EventKind

_TIMEOUT = FindingKind.NCCL_TIMEOUT


def int_list(text) -> list[int]:
    if text is None or (not isinstance(text, (list, tuple)) and pd.isna(text)):
        return []
    items = text if isinstance(text, (list, tuple)) else str(text).replace(";", ",").split(",")
    out = []
    for x in items:
        try:
            out.append(int(str(x).strip()))
        except ValueError:
            continue
    return out


def rank_text(r) -> str:
    return "?" if pd.isna(r) else str(int(r))


def cell(row, name):
    v = row.get(name) if hasattr(row, "get") else None
    return None if v is None or (not isinstance(v, (list, tuple, str)) and pd.isna(v)) else v


def column(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame.columns else pd.Series([None] * len(frame), index=frame.index, dtype="object")


def _stuck(work: pd.DataFrame | None, seq: float, named: set) -> str:
    """Ranks whose watchdog stopped at work ``seq`` (or near it) without a timeout line of theirs."""
    if work is None or work.empty:
        return ""
    rows = work[~work["rank"].isin(list(named))] if named else work
    if seq >= 0:
        rows = rows[(rows["seq"].astype("float64") - seq).abs() <= 2]
    if rows.empty:
        return ""
    parts = ", ".join(f"rank {rank_text(r)} at work {int(w)}" + (f" (last completed {int(c)})" if pd.notna(c) else "")
                      for r, w, c in zip(rows["rank"], rows["seq"], rows["last_completed"], strict=True))
    return f" The watchdog also stopped {parts} with no timeout line of its own: a rank stuck there."


def _timeouts(t: pd.DataFrame, sid, work: pd.DataFrame | None = None, phase: pd.DataFrame | None = None
              ) -> list[Finding]:
    out = []
    for seq, g in t.groupby(t["seq"].astype("float64").fillna(-1), sort=True):
        per_rank = ", ".join(
            f"rank {rank_text(r)}: {op or '?'}" + (f" ({int(n)} elements)" if pd.notna(n) else "")
            + (f", ran {e / 1000:.0f} s of a {tm / 1000:.0f} s timeout" if pd.notna(e) and pd.notna(tm) else "")
            for r, op, n, e, tm in zip(g["rank"], g["op"], g["numel"], g["elapsed_ms"], g["timeout_ms"], strict=True))
        ops = sorted({str(o) for o in g["op"].dropna()})
        seq_txt = f"#{int(seq)}" if seq >= 0 else "(no sequence number)"
        detail = f"Watchdog timeout of collective {seq_txt}: {per_rank}."
        if len(ops) > 1:
            detail += " The ranks disagree on the operation: a collective mismatch (diverging code paths)."
        else:
            detail += (" Ranks missing from the list never reached this collective, or are waiting on "
                       "another one: look for a crashed or slow rank.")
        stuck = _stuck(work, seq, set(t["rank"].dropna()))
        evidence, ranks = list(g["source"]), list(g["rank"])
        if stuck:
            near = work[(work["seq"].astype("float64") - seq).abs() <= 2] if seq >= 0 else work
            near = near[~near["rank"].isin(list(t["rank"].dropna()))]
            evidence, ranks = evidence + list(near["source"]), ranks + list(near["rank"])
        # the rank the console last saw saving or evaluating, not among those that timed out: its work alone
        seen = last_seen(phase, g["rank"])
        extra = {}
        if seen is not None:
            stuck += seen[0]
            evidence = seen[1] + evidence
            extra = {"last_seen_phase": {"rank": seen[2], "phase": str(phase["phase"].iloc[-1])}}
        out.append(Finding.make(_TIMEOUT.severity, _TIMEOUT, sid, f"NCCL timeout at collective {seq_txt} on "
                                f"{len(g)} rank(s)", detail + stuck, evidence, ranks,
                                seq=None if seq < 0 else int(seq), ops=ops, **extra))
    return out


def _work_only(work: pd.DataFrame, sid) -> list[Finding]:
    """Watchdog lines naming the work each rank stopped at, where no timeout line survived."""
    parts = ", ".join(f"rank {rank_text(r)} at work {int(w)}" + (f" (last completed {int(c)})" if pd.notna(c) else "")
                      for r, w, c in zip(work["rank"], work["seq"], work["last_completed"], strict=True))
    return [Finding.make(_TIMEOUT.severity, _TIMEOUT, sid, f"NCCL watchdog stopped {len(work)} rank(s)",
                         f"The NCCL watchdog reported an error or timeout: {parts}. Ranks at different work "
                         "items are waiting on each other: the lowest one is where the job stopped.",
                         work["source"], work["rank"], seq=int(work["seq"].min()))]


def watchdog_findings(ev: pd.DataFrame, kind: pd.Series, sid) -> list[Finding]:
    timeouts, work = ev[kind == EventKind.NCCL_TIMEOUT], ev[kind == EventKind.WATCHDOG_WORK]
    if len(timeouts):
        return _timeouts(timeouts, sid, work, ev[kind == EventKind.LAST_PHASE])
    return _work_only(work, sid) if len(work) else []


def _fingerprints(row) -> list[str]:
    """``rank 1: ALLREDUCE [195812480] BFloat16`` for each rank the mismatch names."""
    ranks, ops = int_list(row.get("ranks")), str(row.get("ops") or "").split(",")
    shapes = str(cell(row, "shapes") or "").split(";")
    dtypes = str(cell(row, "dtypes") or "").split(",")
    out = []
    for i, r in enumerate(ranks):
        extra = "".join(f" {x[i]}" for x in (shapes, dtypes) if len(x) > i and x[i] not in ("", "?"))
        out.append(f"rank {r}: {ops[i] if i < len(ops) else '?'}{extra}")
    return out


def _mismatch_detail(row, pairs: str) -> tuple[str, str]:
    """(title tail, detail) of a mismatch: what torch says differs, else what the fingerprints show."""
    differences = cell(row, "differences")
    if differences:
        return (f" ({differences})", f"Ranks ran the same collective number with different arguments "
                f"({', '.join(_fingerprints(row))}): torch says they differ in {differences}. The job hangs "
                "until the watchdog fires; the code paths diverged before this call (a shape or dtype that "
                "depends on the rank's data).")
    ops = [o for o in str(row.get("ops") or "").split(",") if o]
    if len(set(ops)) == 1 and len(ops) > 1:
        found = [f for f, col, sep in (("shape", "shapes", ";"), ("dtype", "dtypes", ",")) if
                 len({x for x in str(cell(row, col) or "").split(sep) if x and x != "?"}) > 1]
        said = f"different tensor {' and '.join(found)}" if found else "arguments the log does not show"
        return (f" ({', '.join(found)})" if found else "",
                f"Ranks ran the same operation ({ops[0]}) at the same sequence number with {said} "
                f"({', '.join(_fingerprints(row))}); the job hangs until the watchdog fires.")
    return "", (f"Ranks called different collectives at the same sequence number ({pairs}); "
                "the job hangs until the watchdog fires.")


def mismatch_findings(m: pd.DataFrame, sid) -> list[Finding]:
    out = []
    for _, row in m.iterrows():
        ranks, ops = int_list(row.get("ranks")), str(row.get("ops") or "").split(",")
        seq = row.get("seq")
        pairs = ", ".join(f"rank {r}: {o}" for r, o in zip(ranks, ops, strict=False))
        tail, detail = _mismatch_detail(row, pairs)
        extra = {k: cell(row, k) for k in ("differs", "differences", "shapes", "dtypes") if cell(row, k)}
        out.append(Finding.make(FindingKind.COLLECTIVE_MISMATCH.severity, FindingKind.COLLECTIVE_MISMATCH, sid,
                                f"Collective mismatch at sequence {'?' if pd.isna(seq) else int(seq)}{tail}",
                                detail, [row["source"]], ranks, seq=None if pd.isna(seq) else int(seq),
                                ops=[o for o in ops if o], **extra))
    return out


def watchdog_hang_findings(h: pd.DataFrame, sid) -> list[Finding]:
    parts = ", ".join(f"rank {rank_text(r)}" + (f" (process group {pg}" + (f" {name}" if name else "") + ")" if pg else "")
                      for r, pg, name in zip(h["rank"], column(h, "pg"), column(h, "pg_name"), strict=True))
    return [Finding.make(FindingKind.WATCHDOG_HANG.severity, FindingKind.WATCHDOG_HANG, sid,
                         f"NCCL watchdog hang on {len(h)} rank(s)",
                         f"The NCCL watchdog itself hung and terminated {parts} after dumping debug info: a "
                         "collective never completed and could not be aborted (a stuck GPU kernel or a dead "
                         "peer). Look at the ranks' last collectives and at the NCCL flight recorder dump.",
                         h["source"], h["rank"])]


# What an NCCL error's reason most often means, by a word of it.
NCCL_ERROR_MEANINGS = (
    ("remote", "a peer process died or the network between hosts failed: look at the other ranks' last lines"),
    ("system", "a socket, memory or driver call failed: rerun with NCCL_DEBUG=INFO to see which (a firewall, "
               "a wrong network interface, /dev/shm too small)"),
    ("internal", "NCCL hit a state it does not expect: often NCCL versions that differ between hosts, or a "
                 "topology it cannot handle; rerun with NCCL_DEBUG=INFO"),
    ("invalid", "a call with invalid arguments or usage: ranks disagree on the communicator or the buffers"),
)


def nccl_error_findings(e: pd.DataFrame, sid) -> list[Finding]:
    row = e.iloc[0]
    error, version, op = cell(row, "error"), cell(row, "nccl_version"), cell(row, "op")
    where = f" in {op}" if op else ""
    meaning = next((m for word, m in NCCL_ERROR_MEANINGS if word in str(error or "").lower()),
                   "rerun with NCCL_DEBUG=INFO to see which call failed")
    return [Finding.make(FindingKind.NCCL_ERROR.severity, FindingKind.NCCL_ERROR, sid, f"NCCL error: {error or 'unknown'}",
                         f"NCCL failed{where}" + (f" (NCCL {version})" if version else "") + f": {error}: {meaning}. "
                         f"{len(e)} line(s) say so.", e["source"], e["rank"],
                         errors=sorted({str(x) for x in column(e, "error").dropna()}))]
