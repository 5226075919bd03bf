"""Findings from what the logs say: NCCL timeouts and collective mismatches, CUDA out of memory,
failed child processes, NCCL warnings, the emitter's own checks, what the stream checks repaired
or set aside (``record_findings.py``), and warning / error lines.

Generic warning / error lines that name a known problem (``KNOWN_PROBLEMS``: NCCL timeout,
distributed initialisation failure, out of memory, network errors, collective mismatch, gradient
clipping) become that problem's finding; the other warning lines are listed in one info finding,
so that none is lost. The emitter's ``anomaly`` / ``resource_warning`` events of a kind of
``schema.findings.EMITTER_KINDS`` become one finding per kind (the non-finite kinds go to the
NaN finding). Evidence is the event's ``file:line``.

The collectives' findings are ``collective_findings.py``'s, the failed processes' ``process_findings.py``'s.
"""

from __future__ import annotations

import re

import pandas as pd

from logkit.analysis.findings.collective_findings import (
    cell,
    column,
    mismatch_findings,
    nccl_error_findings,
    rank_text,
    watchdog_findings,
    watchdog_hang_findings,
)
from logkit.analysis.findings.process_findings import failed_children
from logkit.analysis.findings.record_findings import record_check_findings
from logkit.analysis.results import Finding
from logkit.schema.findings import EMITTER_KINDS, NONFINITE_KINDS, FindingKind, Severity
from logkit.schema.records import EventType
from logkit.schema.vocab import EventKind, Status

_INIT = FindingKind.DISTRIBUTED_INIT_FAILED

# Generic warning / error lines that name a known problem: the problem's kind (its title, severity and
# what to do are its declaration's) and the pattern of the lines.
KNOWN_PROBLEMS: tuple[tuple[FindingKind, re.Pattern], ...] = tuple((kind, re.compile(pattern, re.I)) for kind, pattern in (
    (FindingKind.NCCL_TIMEOUT, r"(nccl|collective|watchdog|all_?reduce|all_?gather|broadcast|barrier)\b.*"
                               r"(time[ -]?out|timed out)|(time[ -]?out|timed out).*\b(nccl|collective)"),
    (FindingKind.DISTRIBUTED_INIT_FAILED, r"(distributed|backend|process group|init_process_group|rendezvous)\b.*"
                                          r"(fail|error|refused)|(fail|error).*(init_process_group|rendezvous)"),
    (FindingKind.CUDA_OOM, r"out of memory|OutOfMemoryError|CUDA OOM"),
    (FindingKind.NETWORK_ERROR, r"connection (refused|reset|closed)|broken pipe|socket\b.*(error|timed out|timeout)"
                                r"|no route to host|network is unreachable"),
    (FindingKind.COLLECTIVE_MISMATCH, r"collective.*mismatch|mismatch.*collective|rank mismatch"),
    (FindingKind.GRAD_CLIPPED, r"grad(ient)?[ _]norm (exceeded|above|clipped)|clipping grad"),
))


def _ooms(o: pd.DataFrame, sid) -> list[Finding]:
    parts = []
    gpus = o["gpu"] if "gpu" in o.columns else pd.Series([None] * len(o), index=o.index)
    for r, req, cap, free, gpu in zip(o["rank"], o.get("requested_gib"), o.get("capacity_gib"), o.get("free_gib"),
                                      gpus, strict=True):
        who = f"GPU {int(gpu)} (rank not in the log)" if pd.isna(r) and pd.notna(gpu) else f"rank {rank_text(r)}"
        parts.append(who + (f" asked {req:.2f} GiB" if pd.notna(req) else "")
                     + (f" of {cap:.2f} GiB total" if pd.notna(cap) else "")
                     + (f" ({free:.2f} GiB free)" if pd.notna(free) else ""))
    return [Finding.make(FindingKind.CUDA_OOM.severity, FindingKind.CUDA_OOM, sid, f"CUDA out of memory on {len(o)} rank(s)",
                         "; ".join(parts) + ". Lower the per-device batch, enable gradient checkpointing, "
                         "or shard optimizer state.", o["source"], o["rank"])]


def _nccl_warnings(w: pd.DataFrame, sid) -> list[Finding]:
    return [Finding.make(FindingKind.NCCL_WARN.severity, FindingKind.NCCL_WARN, sid, f"{len(w)} NCCL warning(s)",
                         "NCCL reported warnings (transport or network set-up); the first: "
                         f"{str(w['message'].iloc[0])[:200]}", w["source"], w["rank"])]


def _own_errors(own: pd.DataFrame, sid) -> list[Finding]:
    return [Finding.make(FindingKind.LOGGER_ERROR.severity, FindingKind.LOGGER_ERROR, sid,
                         f"{len(own)} problem(s) of the logger itself",
                         "The logger could not do all it was asked (its errors log): records may be missing "
                         f"from these logs; the first: {str(own['message'].iloc[0])[:200]}", own["source"],
                         own["rank"])]


def _setup_failures(f: pd.DataFrame, sid) -> list[Finding]:
    parts = []
    for _, row in f.iterrows():
        if row["kind"] == EventKind.RENDEZVOUS_TIMEOUT:
            ms = cell(row, "timeout_ms")
            parts.append("the rendezvous store could not be reached" + (f" within {ms / 1000:.0f} s" if ms else ""))
        else:
            port = cell(row, "port")
            parts.append(f"port {int(port) if port is not None else '?'} was already in use (another job, or a "
                         "rank started twice)")
    return [Finding.make(_INIT.severity, _INIT, sid, _INIT.title,
                         f"{'; '.join(dict.fromkeys(parts))}. The ranks could not form a process group: check "
                         "MASTER_ADDR/MASTER_PORT, the firewall between hosts, and that every node started.",
                         f["source"], f["rank"])]


# event kind(s) -> their findings, in the order they are listed
_BY_KIND = (((EventKind.COLLECTIVE_MISMATCH,), mismatch_findings), ((EventKind.CUDA_OOM,), _ooms),
            ((EventKind.WATCHDOG_HANG,), watchdog_hang_findings), ((EventKind.NCCL_ERROR,), nccl_error_findings),
            ((EventKind.RENDEZVOUS_TIMEOUT, EventKind.ADDRESS_IN_USE), _setup_failures),
            ((EventKind.NCCL_WARN,), _nccl_warnings), ((EventKind.LOGGER_ERROR,), _own_errors),
            ((EventKind.RECORD_CHECK,), record_check_findings))


def event_findings(session) -> list[Finding]:
    sid = session.meta.session_id
    ev = session.events
    if ev.empty:
        return []
    kind = ev["kind"].astype("object")
    out: list[Finding] = watchdog_findings(ev, kind, sid) + failed_children(ev, kind, sid)
    for names, make in _BY_KIND:
        rows = ev[kind.isin(list(names))]
        if len(rows):
            out += make(rows, sid)
    out = _ordered(out)
    structured = {f.kind for f in out}
    generic = ev[kind.isin([EventKind.WARNING, EventKind.ERROR])]
    out.extend(_generic_findings(session, generic, structured))
    out.extend(_emitter_findings(session, ev[kind.isin([EventType.ANOMALY, EventType.RESOURCE_WARNING])]))
    return out


# the order findings of one session are listed in (a stable sort by severity follows)
_ORDER = (FindingKind.NCCL_TIMEOUT, FindingKind.COLLECTIVE_MISMATCH, FindingKind.CUDA_OOM, FindingKind.CHILD_FAILED,
          FindingKind.KILLED_BY_SIGNAL, FindingKind.WATCHDOG_HANG, FindingKind.NCCL_ERROR,
          FindingKind.DISTRIBUTED_INIT_FAILED, FindingKind.NCCL_WARN, FindingKind.LOGGER_ERROR, FindingKind.RECORD_CHECK)


def _ordered(found: list[Finding]) -> list[Finding]:
    return sorted(found, key=lambda f: _ORDER.index(f.kind) if f.kind in _ORDER else len(_ORDER))


def _generic_findings(session, lines: pd.DataFrame, structured: set[str]) -> list[Finding]:
    """Warning and error lines: those naming a known problem become its finding (unless a structured
    event already made it); the rest become one finding per level, so that none is lost."""
    sid = session.meta.session_id
    if lines.empty:
        return []
    completed = session.meta.status == Status.COMPLETED
    matched: dict[FindingKind, list[int]] = {}
    rest = []
    for i, msg in zip(lines.index, lines["message"].astype("object"), strict=True):
        text = str(msg or "")
        for kind, pattern in KNOWN_PROBLEMS:
            if pattern.search(text):
                matched.setdefault(kind, []).append(i)
                break
        else:
            rest.append(i)
    out = []
    for kind, _ in KNOWN_PROBLEMS:
        if kind not in matched or kind in structured:
            continue
        rows = lines.loc[matched[kind]]
        sev, advice = kind.severity, kind.meaning
        detail = f"{len(rows)} line(s) say so; the first: \"{str(rows['message'].iloc[0])[:200]}\". {advice[0].upper()}{advice[1:]}."
        if completed and sev is Severity.CRITICAL:
            sev = Severity.ERROR
            detail += " The run still completed (status completed): it recovered, or the line reports a retry."
        out.append(Finding.make(sev, kind, sid, kind.title, detail, rows["source"], rows["rank"]))
    if rest:
        rows = lines.loc[rest]
        errors = rows[rows["kind"] == EventKind.ERROR]
        warns = rows[rows["kind"] != EventKind.ERROR]
        if len(errors):
            out.append(Finding.make(FindingKind.ERROR.severity, FindingKind.ERROR, sid, f"{len(errors)} error line(s)",
                                f"Errors in the logs; the first: {str(errors['message'].iloc[0])[:200]}",
                                errors["source"], errors["rank"]))
        if len(warns):
            out.append(Finding.make(FindingKind.WARNING_LINES.severity, FindingKind.WARNING_LINES, sid,
                                    f"{len(warns)} other warning line(s)",
                                "Warnings that name no known problem; the first: "
                                f"{str(warns['message'].iloc[0])[:200]}", warns["source"], warns["rank"]))
    return out


def _emitter_findings(session, events: pd.DataFrame) -> list[Finding]:
    """The emitter's own anomaly / resource_warning checks, one finding per kind."""
    sid = session.meta.session_id
    if events.empty:
        return []
    sub = column(events, "subkind").astype("object")
    out = []
    others = []
    for kind in dict.fromkeys(x for x in sub if isinstance(x, str) and x):
        if kind in NONFINITE_KINDS:
            continue  # the NaN finding (health) counts them
        rows = events[sub == kind]
        if kind not in EMITTER_KINDS:
            others.append(rows)
            continue
        declared = EMITTER_KINDS[kind]
        values = rows["value"].astype("float64") if "value" in rows.columns else pd.Series(dtype="float64")
        thr = rows["threshold"].astype("float64").dropna() if "threshold" in rows.columns else pd.Series(
            dtype="float64")
        detail = f"{len(rows)} report(s): {declared.meaning}."
        if declared is FindingKind.GPU_UTIL_LOW:
            gpus = column(rows, "gpu")
            parts = [f"GPU {int(g)}: {v:.1f}%" if g == g and g is not None else f"{v:.1f}%"
                     for g, v in zip(gpus, values, strict=True) if v == v]
            if parts:
                detail += " Lowest readings: " + ", ".join(parts[:5]) + "."
        elif declared is FindingKind.SLOW_STEP and values.notna().any():
            detail += f" The slowest: {values.max():.3g} s per step."
        elif values.notna().any():
            detail += f" The largest value: {values.max():.4g}."
        if len(thr):
            detail += f" Threshold: {thr.iloc[0]:g}."
        steps = rows["step"].dropna() if "step" in rows.columns else pd.Series(dtype="float64")
        if len(steps):
            detail += f" Steps {int(steps.min())}-{int(steps.max())}." if steps.min() != steps.max() \
                else f" Step {int(steps.min())}."
        out.append(Finding.make(declared.severity, declared, sid, f"{declared.title} ({len(rows)})", detail,
                                rows["source"], rows["rank"]))
    if others:
        rows = pd.concat(others)
        kinds = sorted({str(k) for k in column(rows, "subkind")})
        out.append(Finding.make(FindingKind.RUN_NOTES.severity, FindingKind.RUN_NOTES, sid,
                                f"{len(rows)} other note(s) from the run's own checks",
                            f"Kinds: {', '.join(kinds)}; the first: {str(rows['message'].iloc[0])[:200]}",
                            rows["source"], rows["rank"]))
    return out
