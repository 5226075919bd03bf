"""Findings from what the logs say: NCCL timeouts and collective mismatches, CUDA out of memory,
failed child processes, NCCL warnings, the emitter's own checks, and warning / error lines.

Generic warning / error lines that name a known problem (``KNOWN_PROBLEMS``: NCCL timeout,
distributed initialisation failure, out of memory, network errors, collective mismatch, gradient
clipping) become that problem's finding; the other warning lines are listed in one info finding,
so that none is lost. The emitter's ``anomaly`` / ``resource_warning`` events of a kind of
``schema.findings.EMITTER_KINDS`` become one finding per kind (the non-finite kinds go to the
NaN finding). Evidence is the event's ``file:line``.
"""

from __future__ import annotations

import re

import pandas as pd

from logkit.analysis.results import Finding
from logkit.schema.findings import EMITTER_KINDS, NONFINITE_KINDS
from logkit.schema.records import EventType

# Generic warning / error lines that name a known problem: (kind, pattern, title, severity, advice).
KNOWN_PROBLEMS: tuple[tuple[str, re.Pattern, str, str, str], ...] = tuple(
    (kind, re.compile(pattern, re.I), title, severity, advice) for kind, pattern, title, severity, advice in (
        ("nccl_timeout", r"(nccl|collective|watchdog|all_?reduce|all_?gather|broadcast|barrier)\b.*"
                         r"(time[ -]?out|timed out)|(time[ -]?out|timed out).*\b(nccl|collective)",
         "NCCL communication timeout", "critical",
         "a collective did not finish in time: a rank crashed, hung or took another code path, or the network "
         "stalled; check every rank's last lines, NCCL_DEBUG=INFO output and the timeout setting"),
        ("distributed_init_failed", r"(distributed|backend|process group|init_process_group|rendezvous)\b.*"
                                    r"(fail|error|refused)|(fail|error).*(init_process_group|rendezvous)",
         "Distributed initialisation failed", "critical",
         "the ranks could not form a process group: MASTER_ADDR/MASTER_PORT, firewall, or a rank that never "
         "started"),
        ("cuda_oom", r"out of memory|OutOfMemoryError|CUDA OOM", "Out of memory", "critical",
         "lower the per-device batch, enable gradient checkpointing, or shard optimizer state"),
        ("network_error", r"connection (refused|reset|closed)|broken pipe|socket\b.*(error|timed out|timeout)"
                          r"|no route to host|network is unreachable",
         "Network errors between ranks", "error", "a peer went away or the network between hosts failed"),
        ("collective_mismatch", r"collective.*mismatch|mismatch.*collective|rank mismatch",
         "Collective mismatch", "critical", "ranks called different collectives: diverging code paths"),
        ("grad_clipped", r"grad(ient)?[ _]norm (exceeded|above|clipped)|clipping grad",
         "Gradient norm above max_grad_norm", "info",
         "the gradients were clipped; frequent clipping with a rising norm precedes divergence"),
    ))

def _int_list(text) -> list[int]:
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


def _rank(r) -> str:
    return "?" if pd.isna(r) else str(int(r))


def _timeouts(t: pd.DataFrame, sid) -> list[Finding]:
    out = []
    for seq, g in t.groupby(t["seq"].astype("float64").fillna(-1), sort=True):
        per_rank = ", ".join(
            f"rank {_rank(r)}: {op or '?'}" + (f" ({int(n)} elements)" if pd.notna(n) else "")
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
        out.append(Finding.make("critical", "nccl_timeout", sid, f"NCCL timeout at collective {seq_txt} on "
                                f"{len(g)} rank(s)", detail, g["source"], g["rank"],
                                seq=None if seq < 0 else int(seq), ops=ops))
    return out


def _mismatches(m: pd.DataFrame, sid) -> list[Finding]:
    out = []
    for _, row in m.iterrows():
        ranks, ops = _int_list(row.get("ranks")), str(row.get("ops") or "").split(",")
        seq = row.get("seq")
        pairs = ", ".join(f"rank {r}: {o}" for r, o in zip(ranks, ops, strict=False))
        out.append(Finding.make("critical", "collective_mismatch", sid,
                                f"Collective mismatch at sequence {'?' if pd.isna(seq) else int(seq)}",
                                f"Ranks called different collectives at the same sequence number ({pairs}); "
                                "the job hangs until the watchdog fires.", [row["source"]], ranks,
                                seq=None if pd.isna(seq) else int(seq), ops=[o for o in ops if o]))
    return out


def _ooms(o: pd.DataFrame, sid) -> list[Finding]:
    parts = []
    for r, req, cap, free in zip(o["rank"], o.get("requested_gib"), o.get("capacity_gib"), o.get("free_gib"),
                                 strict=True):
        parts.append(f"rank {_rank(r)}" + (f" asked {req:.2f} GiB" if pd.notna(req) else "")
                     + (f" of {cap:.2f} GiB total" if pd.notna(cap) else "")
                     + (f" ({free:.2f} GiB free)" if pd.notna(free) else ""))
    return [Finding.make("critical", "cuda_oom", sid, f"CUDA out of memory on {len(o)} rank(s)",
                         "; ".join(parts) + ". Lower the per-device batch, enable gradient checkpointing, "
                         "or shard optimizer state.", o["source"], o["rank"])]


def _children(c: pd.DataFrame, sid) -> list[Finding]:
    parts = [f"rank {_rank(r)}" + (f" on {host}" if host else "") + (f" exit code {int(code)}" if pd.notna(code) else "")
             + (f" ({sig})" if sig else "")
             for r, code, sig, host in zip(c["rank"], c["exitcode"], c["signal"], c["host"], strict=True)]
    root = c[c["root_cause"] == True] if "root_cause" in c.columns else c.iloc[:0]  # noqa: E712
    detail = "Failed child processes: " + "; ".join(parts) + "."
    if len(root):
        detail += f" Root cause: rank {', '.join(str(int(r)) for r in root['rank'].dropna())}."
    return [Finding.make("error", "child_failed", sid, f"{len(c)} child process(es) failed", detail, c["source"],
                         c["rank"])]


def _nccl_warnings(w: pd.DataFrame, sid) -> list[Finding]:
    return [Finding.make("warning", "nccl_warn", sid, f"{len(w)} NCCL warning(s)",
                         "NCCL reported warnings (transport or network set-up); the first: "
                         f"{str(w['message'].iloc[0])[:200]}", w["source"], w["rank"])]


def _own_errors(own: pd.DataFrame, sid) -> list[Finding]:
    return [Finding.make("warning", "logger_error", sid, f"{len(own)} problem(s) of the logger itself",
                         "The logger could not do all it was asked (its errors log): records may be missing "
                         f"from these logs; the first: {str(own['message'].iloc[0])[:200]}", own["source"],
                         own["rank"])]


# event kind -> its findings, in the order they are listed
_BY_KIND = (("nccl_timeout", _timeouts), ("collective_mismatch", _mismatches), ("cuda_oom", _ooms),
            ("child_failed", _children), ("nccl_warn", _nccl_warnings), ("logger_error", _own_errors))


def event_findings(session) -> list[Finding]:
    sid = session.meta.get("session_id")
    ev = session.events
    if ev.empty:
        return []
    kind = ev["kind"].astype("object")
    out: list[Finding] = []
    for name, make in _BY_KIND:
        rows = ev[kind == name]
        if len(rows):
            out += make(rows, sid)
    structured = {f.kind for f in out}
    out.extend(_generic_findings(session, ev[kind.isin(["warning", "error"])], structured))
    out.extend(_emitter_findings(session, ev[kind.isin([EventType.ANOMALY, EventType.RESOURCE_WARNING])]))
    return out


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame.columns else pd.Series([None] * len(frame), index=frame.index, dtype="object")


def _generic_findings(session, lines: pd.DataFrame, structured: set[str]) -> list[Finding]:
    """Warning and error lines: those naming a known problem become its finding (unless a structured
    event already made it); the rest become one finding per level, so that none is lost."""
    sid = session.meta.get("session_id")
    if lines.empty:
        return []
    completed = session.meta.get("status") == "completed"
    matched: dict[str, list[int]] = {}
    rest = []
    for i, msg in zip(lines.index, lines["message"].astype("object"), strict=True):
        text = str(msg or "")
        for kind, pattern, *_ in KNOWN_PROBLEMS:
            if pattern.search(text):
                matched.setdefault(kind, []).append(i)
                break
        else:
            rest.append(i)
    out = []
    for kind, _, title, severity, advice in KNOWN_PROBLEMS:
        if kind not in matched or kind in structured:
            continue
        rows = lines.loc[matched[kind]]
        sev = severity
        detail = f"{len(rows)} line(s) say so; the first: \"{str(rows['message'].iloc[0])[:200]}\". {advice[0].upper()}{advice[1:]}."
        if completed and severity == "critical":
            sev = "error"
            detail += " The run still completed (status completed): it recovered, or the line reports a retry."
        out.append(Finding.make(sev, kind, sid, title, detail, rows["source"], rows["rank"]))
    if rest:
        rows = lines.loc[rest]
        errors = rows[rows["kind"] == "error"]
        warns = rows[rows["kind"] != "error"]
        if len(errors):
            out.append(Finding.make("error", "error", sid, f"{len(errors)} error line(s)",
                                f"Errors in the logs; the first: {str(errors['message'].iloc[0])[:200]}",
                                errors["source"], errors["rank"]))
        if len(warns):
            out.append(Finding.make("info", "warning_lines", sid, f"{len(warns)} other warning line(s)",
                                "Warnings that name no known problem; the first: "
                                f"{str(warns['message'].iloc[0])[:200]}", warns["source"], warns["rank"]))
    return out


def _emitter_findings(session, events: pd.DataFrame) -> list[Finding]:
    """The emitter's own anomaly / resource_warning checks, one finding per kind."""
    sid = session.meta.get("session_id")
    if events.empty:
        return []
    sub = _col(events, "subkind").astype("object")
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
        if kind == "gpu_util_low":
            gpus = _col(rows, "gpu")
            parts = [f"GPU {int(g)}: {v:.1f}%" if g == g and g is not None else f"{v:.1f}%"
                     for g, v in zip(gpus, values, strict=True) if v == v]
            if parts:
                detail += " Lowest readings: " + ", ".join(parts[:5]) + "."
        elif kind == "slow_step" and values.notna().any():
            detail += f" The slowest: {values.max():.3g} s per step."
        elif values.notna().any():
            detail += f" The largest value: {values.max():.4g}."
        if len(thr):
            detail += f" Threshold: {thr.iloc[0]:g}."
        steps = rows["step"].dropna() if "step" in rows.columns else pd.Series(dtype="float64")
        if len(steps):
            detail += f" Steps {int(steps.min())}-{int(steps.max())}." if steps.min() != steps.max() \
                else f" Step {int(steps.min())}."
        out.append(Finding.make(declared.severity, kind, sid, f"{declared.title} ({len(rows)})", detail, rows["source"],
                                rows["rank"]))
    if others:
        rows = pd.concat(others)
        kinds = sorted({str(k) for k in _col(rows, "subkind")})
        out.append(Finding.make("info", "run_notes", sid, f"{len(rows)} other note(s) from the run's own checks",
                            f"Kinds: {', '.join(kinds)}; the first: {str(rows['message'].iloc[0])[:200]}",
                            rows["source"], rows["rank"]))
    return out


