"""Findings from what the logs say: NCCL timeouts and collective mismatches, CUDA out of memory,
failed child processes, NCCL warnings, the emitter's own checks, what the stream checks repaired
or set aside (``record_findings.py``), and warning / error lines.

Generic warning / error lines that name a known problem (``KNOWN_PROBLEMS``: NCCL timeout,
distributed initialisation failure, out of memory, network errors, collective mismatch, gradient
clipping) become that problem's finding; the other warning lines are listed in one info finding,
so that none is lost. The emitter's ``anomaly`` / ``resource_warning`` events of a kind of
``schema.findings.EMITTER_KINDS`` become one finding per kind (the non-finite kinds go to the
NaN finding). Evidence is the event's ``file:line``.

Failed child processes: a negative exit code is a signal (``SIGNAL_MEANINGS``). The finding
names the first failure (the root cause) and, where a launcher's own lines are all there is (no
ChildFailedError block), the workers torn down after it. A process killed by a signal whose
cause the log cannot show (SIGKILL: the host's OOM killer, most often; SIGSEGV, SIGBUS) is a
finding of its own, with where to look. A collective mismatch names the fields torch says differ
and both values; ranks whose watchdog stopped at a work item but printed no timeout are named
with the timeout of that collective.
"""

from __future__ import annotations

import re

import pandas as pd

from logkit.analysis.findings.record_findings import record_check_findings
from logkit.analysis.results import Finding
from logkit.ingest.record_checks import RECORD_CHECK
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

# What a signal that ended a training process most often means.
SIGNAL_MEANINGS = {
    "SIGKILL": "killed by SIGKILL: most often the host's out-of-memory killer (check `dmesg -T` or "
               "`journalctl -k` on that host for 'Killed process'), else a scheduler enforcing a limit",
    "SIGABRT": "aborted (SIGABRT): often NCCL's watchdog taking the process down after a timeout or "
               "an NCCL error, or a failed C++ assertion",
    "SIGSEGV": "crashed in native code (SIGSEGV): a CUDA, NCCL, driver or extension fault; check for a "
               "core dump and rerun with CUDA_LAUNCH_BLOCKING=1",
    "SIGBUS": "SIGBUS: often shared memory exhausted (a container's small /dev/shm used by the data "
              "loader or NCCL)",
    "SIGTERM": "terminated (SIGTERM): torn down by the launcher after another rank failed, or by the "
               "scheduler (time limit, preemption)",
    "SIGINT": "interrupted (SIGINT): Ctrl-C or the launcher",
}
# Signals whose cause the log cannot show: a finding of their own, saying where to look.
OUTSIDE_SIGNALS = ("SIGKILL", "SIGSEGV", "SIGBUS", "SIGILL", "SIGFPE")


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


def _value(row, name):
    v = row.get(name) if hasattr(row, "get") else None
    return None if v is None or (not isinstance(v, (list, tuple, str)) and pd.isna(v)) else v


def _who(row) -> str:
    """A failed process as the log names it: its rank, else its local rank and pid."""
    rank, local, pid = (_value(row, k) for k in ("rank", "local_rank", "pid"))
    if rank is not None:
        return f"rank {int(rank)}"
    who = f"local rank {int(local)}" if local is not None else "a worker"
    return who + (f" (pid {int(pid)})" if pid is not None else "")


def _stuck(work: pd.DataFrame | None, seq: float, named: set) -> str:
    """Ranks whose watchdog stopped at work ``seq`` (or near it) without a timeout line of theirs."""
    if work is None or work.empty:
        return ""
    rows = work[~work["rank"].isin(list(named))] if named else work
    if seq >= 0:
        rows = rows[(rows["seq"].astype("float64") - seq).abs() <= 2]
    if rows.empty:
        return ""
    parts = ", ".join(f"rank {_rank(r)} at work {int(w)}" + (f" (last completed {int(c)})" if pd.notna(c) else "")
                      for r, w, c in zip(rows["rank"], rows["seq"], rows["last_completed"], strict=True))
    return f" The watchdog also stopped {parts} with no timeout line of its own: a rank stuck there."


def _timeouts(t: pd.DataFrame, sid, work: pd.DataFrame | None = None) -> list[Finding]:
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
        stuck = _stuck(work, seq, set(t["rank"].dropna()))
        evidence, ranks = list(g["source"]), list(g["rank"])
        if stuck:
            near = work[(work["seq"].astype("float64") - seq).abs() <= 2] if seq >= 0 else work
            near = near[~near["rank"].isin(list(t["rank"].dropna()))]
            evidence, ranks = evidence + list(near["source"]), ranks + list(near["rank"])
        out.append(Finding.make("critical", "nccl_timeout", sid, f"NCCL timeout at collective {seq_txt} on "
                                f"{len(g)} rank(s)", detail + stuck, evidence, ranks,
                                seq=None if seq < 0 else int(seq), ops=ops))
    return out


def _work_only(work: pd.DataFrame, sid) -> list[Finding]:
    """Watchdog lines naming the work each rank stopped at, where no timeout line survived."""
    parts = ", ".join(f"rank {_rank(r)} at work {int(w)}" + (f" (last completed {int(c)})" if pd.notna(c) else "")
                      for r, w, c in zip(work["rank"], work["seq"], work["last_completed"], strict=True))
    return [Finding.make("critical", "nccl_timeout", sid, f"NCCL watchdog stopped {len(work)} rank(s)",
                         f"The NCCL watchdog reported an error or timeout: {parts}. Ranks at different work "
                         "items are waiting on each other: the lowest one is where the job stopped.",
                         work["source"], work["rank"], seq=int(work["seq"].min()))]


def _fingerprints(row) -> list[str]:
    """``rank 1: ALLREDUCE [195812480] BFloat16`` for each rank the mismatch names."""
    ranks, ops = _int_list(row.get("ranks")), str(row.get("ops") or "").split(",")
    shapes = str(_value(row, "shapes") or "").split(";")
    dtypes = str(_value(row, "dtypes") or "").split(",")
    out = []
    for i, r in enumerate(ranks):
        extra = "".join(f" {x[i]}" for x in (shapes, dtypes) if len(x) > i and x[i] not in ("", "?"))
        out.append(f"rank {r}: {ops[i] if i < len(ops) else '?'}{extra}")
    return out


def _mismatch_detail(row, pairs: str) -> tuple[str, str]:
    """(title tail, detail) of a mismatch: what torch says differs, else what the fingerprints show."""
    differences = _value(row, "differences")
    if differences:
        return (f" ({differences})", f"Ranks ran the same collective number with different arguments "
                f"({', '.join(_fingerprints(row))}): torch says they differ in {differences}. The job hangs "
                "until the watchdog fires; the code paths diverged before this call (a shape or dtype that "
                "depends on the rank's data).")
    ops = [o for o in str(row.get("ops") or "").split(",") if o]
    if len(set(ops)) == 1 and len(ops) > 1:
        found = [f for f, col, sep in (("shape", "shapes", ";"), ("dtype", "dtypes", ",")) if
                 len({x for x in str(_value(row, col) or "").split(sep) if x and x != "?"}) > 1]
        said = f"different tensor {' and '.join(found)}" if found else "arguments the log does not show"
        return (f" ({', '.join(found)})" if found else "",
                f"Ranks ran the same operation ({ops[0]}) at the same sequence number with {said} "
                f"({', '.join(_fingerprints(row))}); the job hangs until the watchdog fires.")
    return "", (f"Ranks called different collectives at the same sequence number ({pairs}); "
                "the job hangs until the watchdog fires.")


def _mismatches(m: pd.DataFrame, sid) -> list[Finding]:
    out = []
    for _, row in m.iterrows():
        ranks, ops = _int_list(row.get("ranks")), str(row.get("ops") or "").split(",")
        seq = row.get("seq")
        pairs = ", ".join(f"rank {r}: {o}" for r, o in zip(ranks, ops, strict=False))
        tail, detail = _mismatch_detail(row, pairs)
        extra = {k: _value(row, k) for k in ("differs", "differences", "shapes", "dtypes") if _value(row, k)}
        out.append(Finding.make("critical", "collective_mismatch", sid,
                                f"Collective mismatch at sequence {'?' if pd.isna(seq) else int(seq)}{tail}",
                                detail, [row["source"]], ranks, seq=None if pd.isna(seq) else int(seq),
                                ops=[o for o in ops if o], **extra))
    return out


def _ooms(o: pd.DataFrame, sid) -> list[Finding]:
    parts = []
    gpus = o["gpu"] if "gpu" in o.columns else pd.Series([None] * len(o), index=o.index)
    for r, req, cap, free, gpu in zip(o["rank"], o.get("requested_gib"), o.get("capacity_gib"), o.get("free_gib"),
                                      gpus, strict=True):
        who = f"GPU {int(gpu)} (rank not in the log)" if pd.isna(r) and pd.notna(gpu) else f"rank {_rank(r)}"
        parts.append(who + (f" asked {req:.2f} GiB" if pd.notna(req) else "")
                     + (f" of {cap:.2f} GiB total" if pd.notna(cap) else "")
                     + (f" ({free:.2f} GiB free)" if pd.notna(free) else ""))
    return [Finding.make("critical", "cuda_oom", sid, f"CUDA out of memory on {len(o)} rank(s)",
                         "; ".join(parts) + ". Lower the per-device batch, enable gradient checkpointing, "
                         "or shard optimizer state.", o["source"], o["rank"])]


def _children(c: pd.DataFrame, sid, teardown: pd.DataFrame | None = None) -> list[Finding]:
    """torchrun's ChildFailedError entries, as its block gives them; exits reported by a launcher's
    own lines (no block: ``launcher`` set) get the root cause, the signal's meaning and the
    workers torn down after it."""
    launched = c["launcher"].notna() if "launcher" in c.columns else pd.Series(False, index=c.index)
    signals = _signals(c)
    if launched.any():
        return [_launcher_children(c, sid, teardown, signals)]
    parts = [f"rank {_rank(r)}" + (f" on {host}" if host else "") + (f" exit code {int(code)}" if pd.notna(code) else "")
             + (f" ({sig})" if sig else "")
             for r, code, sig, host in zip(c["rank"], c["exitcode"], c["signal"], c["host"], strict=True)]
    root = c[c["root_cause"] == True] if "root_cause" in c.columns else c.iloc[:0]  # noqa: E712
    detail = "Failed child processes: " + "; ".join(parts) + "."
    if len(root):
        detail += f" Root cause: rank {', '.join(str(int(r)) for r in root['rank'].dropna())}."
    return [Finding.make("error", "child_failed", sid, f"{len(c)} child process(es) failed", detail, c["source"],
                         c["rank"], signals=signals, root_cause=_root(c))]


def _signals(c: pd.DataFrame) -> list[dict]:
    """Each failed process with its exit code, signal and what the signal most often means."""
    out = []
    for _, row in c.iterrows():
        sig = _value(row, "signal")
        out.append({"process": _who(row), "exitcode": _value(row, "exitcode"), "signal": sig,
                    "meaning": SIGNAL_MEANINGS.get(sig) if sig else None, "host": _value(row, "host")})
    return out


def _root(c: pd.DataFrame) -> dict | None:
    root = c[c["root_cause"] == True] if "root_cause" in c.columns else c.iloc[:0]  # noqa: E712
    if root.empty:
        return None
    row = root.iloc[0]
    return {"process": _who(row), "pid": _value(row, "pid"), "exitcode": _value(row, "exitcode"),
            "signal": _value(row, "signal"), "source": row["source"]}


def _launcher_children(c: pd.DataFrame, sid, teardown: pd.DataFrame | None, signals: list[dict]) -> Finding:
    root = c[c["root_cause"] == True] if "root_cause" in c.columns else c.iloc[:0]  # noqa: E712
    first = root.iloc[0] if len(root) else c.iloc[0]
    sig = _value(first, "signal")
    code = _value(first, "exitcode")
    detail = f"First failure (root cause): {_who(first)}" + (f" on {_value(first, 'host')}" if _value(first, "host") else "")
    detail += f", exit code {int(code)}" if code is not None else ""
    detail += f": {SIGNAL_MEANINGS.get(sig, sig)}." if sig else "."
    others = [_who(r) + (f" ({_value(r, 'signal')})" if _value(r, "signal") else "")
              for _, r in c.iterrows() if r["source"] != first["source"]]
    if others:
        detail += f" Also failed: {', '.join(others)}."
    pids = [int(p) for p in teardown["pid"].dropna()] if teardown is not None and len(teardown) else []
    if pids:
        detail += (f" Torn down after it by the launcher: {len(pids)} worker(s) (pids {', '.join(map(str, pids))}): "
                   "their exits are a consequence, not a cause.")
    return Finding.make("error", "child_failed", sid, f"{len(c)} child process(es) failed", detail, c["source"],
                        c["rank"], signals=signals, root_cause=_root(c), torn_down_pids=pids)


def _outside_signals(c: pd.DataFrame, sid) -> list[Finding]:
    """A process killed by a signal whose cause the log cannot show: say where to look."""
    if "signal" not in c.columns:
        return []
    hit = c[c["signal"].isin(OUTSIDE_SIGNALS)]
    out = []
    for sig, rows in hit.groupby("signal", sort=False):
        who = ", ".join(_who(r) + (f" on {_value(r, 'host')}" if _value(r, "host") else "") for _, r in rows.iterrows())
        out.append(Finding.make("critical", "killed_by_signal", sid, f"{sig}: {len(rows)} process(es) killed",
                                f"{who} {SIGNAL_MEANINGS.get(sig, 'ended by ' + str(sig))}. The log cannot show "
                                "why: look at the host.", rows["source"], rows["rank"], signal=sig))
    return out


def _nccl_warnings(w: pd.DataFrame, sid) -> list[Finding]:
    return [Finding.make("warning", "nccl_warn", sid, f"{len(w)} NCCL warning(s)",
                         "NCCL reported warnings (transport or network set-up); the first: "
                         f"{str(w['message'].iloc[0])[:200]}", w["source"], w["rank"])]


def _own_errors(own: pd.DataFrame, sid) -> list[Finding]:
    return [Finding.make("warning", "logger_error", sid, f"{len(own)} problem(s) of the logger itself",
                         "The logger could not do all it was asked (its errors log): records may be missing "
                         f"from these logs; the first: {str(own['message'].iloc[0])[:200]}", own["source"],
                         own["rank"])]


def _hangs(h: pd.DataFrame, sid) -> list[Finding]:
    parts = ", ".join(f"rank {_rank(r)}" + (f" (process group {pg}" + (f" {name}" if name else "") + ")" if pg else "")
                      for r, pg, name in zip(h["rank"], _col(h, "pg"), _col(h, "pg_name"), strict=True))
    return [Finding.make("critical", "watchdog_hang", sid, f"NCCL watchdog hang on {len(h)} rank(s)",
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


def _nccl_errors(e: pd.DataFrame, sid) -> list[Finding]:
    row = e.iloc[0]
    error, version, op = _value(row, "error"), _value(row, "nccl_version"), _value(row, "op")
    where = f" in {op}" if op else ""
    meaning = next((m for word, m in NCCL_ERROR_MEANINGS if word in str(error or "").lower()),
                   "rerun with NCCL_DEBUG=INFO to see which call failed")
    return [Finding.make("critical", "nccl_error", sid, f"NCCL error: {error or 'unknown'}",
                         f"NCCL failed{where}" + (f" (NCCL {version})" if version else "") + f": {error}: {meaning}. "
                         f"{len(e)} line(s) say so.", e["source"], e["rank"],
                         errors=sorted({str(x) for x in _col(e, "error").dropna()}))]


def _setup_failures(f: pd.DataFrame, sid) -> list[Finding]:
    parts = []
    for _, row in f.iterrows():
        if row["kind"] == "rendezvous_timeout":
            ms = _value(row, "timeout_ms")
            parts.append("the rendezvous store could not be reached" + (f" within {ms / 1000:.0f} s" if ms else ""))
        else:
            port = _value(row, "port")
            parts.append(f"port {int(port) if port is not None else '?'} was already in use (another job, or a "
                         "rank started twice)")
    return [Finding.make("critical", "distributed_init_failed", sid, "Distributed initialisation failed",
                         f"{'; '.join(dict.fromkeys(parts))}. The ranks could not form a process group: check "
                         "MASTER_ADDR/MASTER_PORT, the firewall between hosts, and that every node started.",
                         f["source"], f["rank"])]


# event kind(s) -> their findings, in the order they are listed
_BY_KIND = ((("collective_mismatch",), _mismatches), (("cuda_oom",), _ooms), (("watchdog_hang",), _hangs),
            (("nccl_error",), _nccl_errors), (("rendezvous_timeout", "address_in_use"), _setup_failures),
            (("nccl_warn",), _nccl_warnings), (("logger_error",), _own_errors),
            ((RECORD_CHECK,), record_check_findings))


def event_findings(session) -> list[Finding]:
    sid = session.meta.get("session_id")
    ev = session.events
    if ev.empty:
        return []
    kind = ev["kind"].astype("object")
    out: list[Finding] = _watchdog(ev, kind, sid) + _failed_children(ev, kind, sid)
    for names, make in _BY_KIND:
        rows = ev[kind.isin(names)]
        if len(rows):
            out += make(rows, sid)
    out = _ordered(out)
    structured = {f.kind for f in out}
    generic = ev[kind.isin(["warning", "error"])]
    out.extend(_generic_findings(session, generic, structured))
    out.extend(_emitter_findings(session, ev[kind.isin([EventType.ANOMALY, EventType.RESOURCE_WARNING])]))
    return out


# the order findings of one session are listed in (a stable sort by severity follows)
_ORDER = ("nccl_timeout", "collective_mismatch", "cuda_oom", "child_failed", "killed_by_signal", "watchdog_hang",
          "nccl_error", "distributed_init_failed", "nccl_warn", "logger_error", RECORD_CHECK)


def _ordered(found: list[Finding]) -> list[Finding]:
    return sorted(found, key=lambda f: _ORDER.index(f.kind) if f.kind in _ORDER else len(_ORDER))


def _watchdog(ev: pd.DataFrame, kind: pd.Series, sid) -> list[Finding]:
    timeouts, work = ev[kind == "nccl_timeout"], ev[kind == "watchdog_work"]
    if len(timeouts):
        return _timeouts(timeouts, sid, work)
    return _work_only(work, sid) if len(work) else []


def _failed_children(ev: pd.DataFrame, kind: pd.Series, sid) -> list[Finding]:
    children = ev[kind == "child_failed"]
    if children.empty:
        return []
    sub = _col(ev, "subkind").astype("object")
    teardown = ev[(kind == "warning") & (sub == "sigterm_sent")]
    return _children(children, sid, teardown) + _outside_signals(children, sid)


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


