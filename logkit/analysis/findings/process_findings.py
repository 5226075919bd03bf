"""Findings about failed processes from what the logs say: torchrun's ChildFailedError entries and
a launcher's own exit lines. A negative exit code is a signal (``SIGNAL_MEANINGS``). The finding
names the first failure (the root cause) and, where a launcher's own lines are all there is (no
ChildFailedError block), the workers torn down after it. A process killed by a signal whose cause
the log cannot show (SIGKILL: the host's OOM killer, most often; SIGSEGV, SIGBUS) is a finding of
its own, with where to look.
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis.findings.collective_findings import cell, column, rank_text
from logkit.analysis.results import Finding
from logkit.schema.findings import FindingKind
from logkit.schema.vocab import EventKind, FailureCause, LineSubkind

_FAILED, _KILLED = FindingKind.CHILD_FAILED, FindingKind.KILLED_BY_SIGNAL
# Which cause a failed process's lines name first, when they name several (a missing module raises an
# exception, an NCCL error follows a CUDA error): the most specific.
CAUSE_ORDER = (FailureCause.FILE_NOT_FOUND, FailureCause.MODULE_NOT_FOUND, FailureCause.IMPORT_ERROR,
               FailureCause.CUDA_OOM, FailureCause.CUDA_ERROR, FailureCause.NCCL_ERROR, FailureCause.SIGNAL,
               FailureCause.EXCEPTION)

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


def _who(row) -> str:
    """A failed process as the log names it: its rank, else its local rank and pid."""
    rank, local, pid = (cell(row, k) for k in ("rank", "local_rank", "pid"))
    if rank is not None:
        return f"rank {int(rank)}"
    who = f"local rank {int(local)}" if local is not None else "a worker"
    return who + (f" (pid {int(pid)})" if pid is not None else "")


def failed_children(ev: pd.DataFrame, kind: pd.Series, sid) -> list[Finding]:
    children = ev[kind == EventKind.CHILD_FAILED]
    causes = ev[kind == EventKind.FAILURE_CAUSE]
    if children.empty:
        return []  # a cause without a failed child: the error lines' findings say it
    sub = column(ev, "subkind").astype("object")
    teardown = ev[(kind == EventKind.WARNING) & (sub == LineSubkind.SIGTERM_SENT)]
    return _children(children, sid, teardown, causes) + _outside_signals(children, sid)


def cause_of(causes: pd.DataFrame, rank) -> dict | None:
    """Why the process of ``rank`` failed, as the lines say it: a cause its own lines name, else one no
    rank is named for, else the first any rank names (the ranks of a job mostly fail alike); the most
    specific first (``CAUSE_ORDER``), then the first in the file."""
    if causes.empty:
        return None
    ranks = column(causes, "rank")
    pick = causes[ranks == rank] if rank is not None else causes.iloc[:0]
    if pick.empty:
        pick = causes[ranks.isna()]
    if pick.empty:
        pick = causes
    order = pick["cause"].map(lambda c: CAUSE_ORDER.index(c) if c in CAUSE_ORDER else len(CAUSE_ORDER))
    row = pick.loc[order.sort_values(kind="stable").index[0]]
    return {"cause": str(row["cause"]), "message": cell(row, "message"), "source": row["source"],
            "rank": cell(row, "rank")}


def _cause_sentence(who: str, cause: dict | None) -> str:
    """``rank 3 failed: ModuleNotFoundError: No module named 'flash_attn' (train.log:12).``; nothing for a
    signal, which the failure's own exit code already says (the finding's ``cause`` keeps it)."""
    if cause is None or cause["cause"] == FailureCause.SIGNAL:
        return ""
    return f"{who} failed: {cause['message']} ({cause['source']}). "


def _evidence(c: pd.DataFrame, cause: dict | None) -> list:
    """The failures' lines, after the line that says why (where it says more than the exit code)."""
    said = cause is not None and cause["cause"] != FailureCause.SIGNAL
    return ([cause["source"]] if said else []) + list(c["source"])


def _children(c: pd.DataFrame, sid, teardown: pd.DataFrame | None = None,
              causes: pd.DataFrame | None = None) -> list[Finding]:
    """torchrun's ChildFailedError entries, as its block gives them; exits reported by a launcher's
    own lines (no block: ``launcher`` set) get the root cause, the signal's meaning and the
    workers torn down after it. Where lines say why the first failure failed (``failure_cause``
    events), the detail opens with it."""
    launched = c["launcher"].notna() if "launcher" in c.columns else pd.Series(False, index=c.index)
    signals = _signals(c)
    root = c[c["root_cause"] == True] if "root_cause" in c.columns else c.iloc[:0]  # noqa: E712
    first = root.iloc[0] if len(root) else c.iloc[0]
    cause = cause_of(causes if causes is not None else c.iloc[:0], cell(first, "rank"))
    opening = _cause_sentence(_who(first), cause)
    if launched.any():
        return [_launcher_children(c, sid, teardown, signals, opening, cause)]
    parts = [f"rank {rank_text(r)}" + (f" on {host}" if host else "") + (f" exit code {int(code)}" if pd.notna(code) else "")
             + (f" ({sig})" if sig else "")
             for r, code, sig, host in zip(c["rank"], c["exitcode"], c["signal"], c["host"], strict=True)]
    root = c[c["root_cause"] == True] if "root_cause" in c.columns else c.iloc[:0]  # noqa: E712
    detail = opening + "Failed child processes: " + "; ".join(parts) + "."
    if len(root):
        detail += f" Root cause: rank {', '.join(str(int(r)) for r in root['rank'].dropna())}."
    evidence = _evidence(c, cause)
    return [Finding.make(_FAILED.severity, _FAILED, sid, f"{len(c)} child process(es) failed", detail, evidence,
                         c["rank"], signals=signals, root_cause=_root(c), cause=cause)]


def _signals(c: pd.DataFrame) -> list[dict]:
    """Each failed process with its exit code, signal and what the signal most often means."""
    out = []
    for _, row in c.iterrows():
        sig = cell(row, "signal")
        out.append({"process": _who(row), "exitcode": cell(row, "exitcode"), "signal": sig,
                    "meaning": SIGNAL_MEANINGS.get(sig) if sig else None, "host": cell(row, "host")})
    return out


def _root(c: pd.DataFrame) -> dict | None:
    root = c[c["root_cause"] == True] if "root_cause" in c.columns else c.iloc[:0]  # noqa: E712
    if root.empty:
        return None
    row = root.iloc[0]
    return {"process": _who(row), "pid": cell(row, "pid"), "exitcode": cell(row, "exitcode"),
            "signal": cell(row, "signal"), "source": row["source"]}


def _launcher_children(c: pd.DataFrame, sid, teardown: pd.DataFrame | None, signals: list[dict], opening: str = "",
                       cause: dict | None = None) -> Finding:
    root = c[c["root_cause"] == True] if "root_cause" in c.columns else c.iloc[:0]  # noqa: E712
    first = root.iloc[0] if len(root) else c.iloc[0]
    sig = cell(first, "signal")
    code = cell(first, "exitcode")
    detail = opening + f"First failure (root cause): {_who(first)}" + (
        f" on {cell(first, 'host')}" if cell(first, "host") else "")
    detail += f", exit code {int(code)}" if code is not None else ""
    detail += f": {SIGNAL_MEANINGS.get(sig, sig)}." if sig else "."
    others = [_who(r) + (f" ({cell(r, 'signal')})" if cell(r, "signal") else "")
              for _, r in c.iterrows() if r["source"] != first["source"]]
    if others:
        detail += f" Also failed: {', '.join(others)}."
    pids = [int(p) for p in teardown["pid"].dropna()] if teardown is not None and len(teardown) else []
    if pids:
        detail += (f" Torn down after it by the launcher: {len(pids)} worker(s) (pids {', '.join(map(str, pids))}): "
                   "their exits are a consequence, not a cause.")
    evidence = _evidence(c, cause)
    return Finding.make(_FAILED.severity, _FAILED, sid, f"{len(c)} child process(es) failed", detail, evidence,
                        c["rank"], signals=signals, root_cause=_root(c), torn_down_pids=pids, cause=cause)


def _outside_signals(c: pd.DataFrame, sid) -> list[Finding]:
    """A process killed by a signal whose cause the log cannot show: say where to look."""
    if "signal" not in c.columns:
        return []
    hit = c[c["signal"].isin(OUTSIDE_SIGNALS)]
    out = []
    for sig, rows in hit.groupby("signal", sort=False):
        who = ", ".join(_who(r) + (f" on {cell(r, 'host')}" if cell(r, "host") else "") for _, r in rows.iterrows())
        out.append(Finding.make(_KILLED.severity, _KILLED, sid, f"{sig}: {len(rows)} process(es) killed",
                                f"{who} {SIGNAL_MEANINGS.get(sig, 'ended by ' + str(sig))}. The log cannot show "
                                "why: look at the host.", rows["source"], rows["rank"], signal=sig))
    return out
