"""Diagnose: findings ranked by severity, each with its evidence (``file:line`` where a line says it).

A finding is a dict ``{severity, kind, session_id, title, detail, evidence, ranks}``;
severity is one of ``SEVERITIES`` (critical > error > warning > info). ``diagnose`` takes the
sessions and the tables the other analyses computed (``analyze`` passes them), and never
recomputes a figure: each finding restates one and where it came from.

What the logs say is a finding too: the emitter's own checks (``anomaly`` / ``resource_warning``
events of kind slow_step, gpu_util_low, memory_high, gpu_memory_high, loss_spike, grad_explode,
grad_vanish; NaN kinds go to the NaN finding), and generic warning / error lines that name a
known problem (``KNOWN_PROBLEMS``: NCCL timeout, distributed initialisation failure, out of
memory, network errors, collective mismatch, gradient clipping); the other warning lines are
listed in one info finding, so that none is lost. Evidence is the event's ``file:line``.
Findings derived from frames cite ``file:line`` where the frame has a source column, else the
file and the step range.

Thresholds: low GPU utilization < ``LOW_UTIL`` % average; communication-bound when a
gradient-sync op takes >= ``scaling_report.COMM_BOUND_SHARE`` of step time; low scaling
efficiency < ``LOW_EFFICIENCY`` (headline efficiency: steady state where known); step counts
"not rescaled" when the runs' samples seen differ by more than 5%.
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd

from logkit.analysis.communication import SYNC_OPS
from logkit.analysis.scaling_report import COMM_BOUND_SHARE

__all__ = ["SEVERITIES", "LOW_UTIL", "LOW_EFFICIENCY", "KNOWN_PROBLEMS", "EMITTER_KINDS", "diagnose",
           "sort_findings"]

SEVERITIES = ("critical", "error", "warning", "info")
LOW_UTIL = 50.0
LOW_EFFICIENCY = 0.7
MAX_EVIDENCE = 10

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

# The emitter's own checks (anomaly / resource_warning ``kind``): (title, severity, what it means).
EMITTER_KINDS: dict[str, tuple[str, str, str]] = {
    "slow_step": ("Slow steps reported by the run", "warning",
                  "steps far slower than the run's recent median (the emitter's check)"),
    "gpu_util_low": ("Low GPU utilization reported by the run", "warning",
                     "a GPU's utilization fell below the threshold: input pipeline, small batch, or waiting on "
                     "other ranks"),
    "memory_high": ("Host memory high", "warning", "host memory above the threshold: swapping or the OOM "
                                                   "killer are next"),
    "gpu_memory_high": ("GPU memory high", "warning", "GPU memory above the threshold: an out-of-memory error "
                                                      "is close (fragmentation, a longer batch)"),
    "loss_spike": ("Loss spikes", "warning", "losses far above the recent median"),
    "grad_explode": ("Exploding gradients", "warning",
                     "a layer's gradient norm jumped above 10x its recent median while carrying at least its "
                     "share of the step's gradient: harmless once; when it repeats or the loss follows, lower the "
                     "learning rate, clip gradients, check the data"),
    "grad_vanish": ("Vanishing gradients", "warning", "gradient norms below the threshold: layers stop learning"),
}
NAN_SUBKINDS = {"nan_loss", "nan_grad", "nan_grad_norm", "inf_loss", "inf_grad", "inf_grad_norm", "nan"}


def _finding(severity, kind, sid, title, detail, evidence=(), ranks=(), **extra) -> dict:
    ev = [str(e) for e in evidence if e]
    return {"severity": severity, "kind": kind, "session_id": sid, "title": title, "detail": detail,
            "evidence": ev[:MAX_EVIDENCE], "evidence_total": len(ev),
            "ranks": sorted({int(r) for r in ranks if r is not None and not pd.isna(r)}), **extra}


def sort_findings(findings: list[dict]) -> list[dict]:
    """Stable sort by severity (critical first)."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: order.get(f["severity"], len(order)))


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


def _files_of(session, ranks=None) -> list[str]:
    """Base names of the session's files (rank streams of ``ranks`` when given): evidence of
    figures derived from whole frames, which carry no line numbers."""
    names = [Path(p).name for p in session.meta.get("files") or []]
    if ranks is not None:
        picked = [n for n in names if any(n.endswith(f"_rank{r}.jsonl") for r in ranks)]
        if picked:
            return picked
    jsonl = [n for n in names if n.endswith(".jsonl")]
    return jsonl or names[:3] or [str(session.meta.get("session_id"))]


def _event_findings(session) -> list[dict]:
    sid = session.meta.get("session_id")
    ev = session.events
    out: list[dict] = []
    if ev.empty:
        return out
    kind = ev["kind"].astype("object")

    t = ev[kind == "nccl_timeout"]
    if len(t):
        for seq, g in t.groupby(t["seq"].astype("float64").fillna(-1), sort=True):
            per_rank = ", ".join(
                f"rank {'?' if pd.isna(r) else int(r)}: {op or '?'}"
                + (f" ({int(n)} elements)" if pd.notna(n) else "")
                + (f", ran {e / 1000:.0f} s of a {tm / 1000:.0f} s timeout" if pd.notna(e) and pd.notna(tm) else "")
                for r, op, n, e, tm in zip(g["rank"], g["op"], g["numel"], g["elapsed_ms"], g["timeout_ms"],
                                           strict=True))
            ops = sorted({str(o) for o in g["op"].dropna()})
            seq_txt = f"#{int(seq)}" if seq >= 0 else "(no sequence number)"
            detail = f"Watchdog timeout of collective {seq_txt}: {per_rank}."
            if len(ops) > 1:
                detail += " The ranks disagree on the operation: a collective mismatch (diverging code paths)."
            else:
                detail += (" Ranks missing from the list never reached this collective, or are waiting on "
                           "another one: look for a crashed or slow rank.")
            out.append(_finding("critical", "nccl_timeout", sid, f"NCCL timeout at collective {seq_txt} on "
                                f"{len(g)} rank(s)", detail, g["source"], g["rank"],
                                seq=None if seq < 0 else int(seq), ops=ops))

    m = ev[kind == "collective_mismatch"]
    for _, row in m.iterrows():
        ranks, ops = _int_list(row.get("ranks")), str(row.get("ops") or "").split(",")
        seq = row.get("seq")
        pairs = ", ".join(f"rank {r}: {o}" for r, o in zip(ranks, ops, strict=False))
        out.append(_finding("critical", "collective_mismatch", sid,
                            f"Collective mismatch at sequence {'?' if pd.isna(seq) else int(seq)}",
                            f"Ranks called different collectives at the same sequence number ({pairs}); "
                            "the job hangs until the watchdog fires.", [row["source"]], ranks,
                            seq=None if pd.isna(seq) else int(seq), ops=[o for o in ops if o]))

    o = ev[kind == "cuda_oom"]
    if len(o):
        parts = []
        for r, req, cap, free in zip(o["rank"], o.get("requested_gib"), o.get("capacity_gib"), o.get("free_gib"),
                                     strict=True):
            txt = f"rank {'?' if pd.isna(r) else int(r)}"
            if pd.notna(req):
                txt += f" asked {req:.2f} GiB"
            if pd.notna(cap):
                txt += f" of {cap:.2f} GiB total"
            if pd.notna(free):
                txt += f" ({free:.2f} GiB free)"
            parts.append(txt)
        out.append(_finding("critical", "cuda_oom", sid, f"CUDA out of memory on {len(o)} rank(s)",
                            "; ".join(parts) + ". Lower the per-device batch, enable gradient checkpointing, "
                            "or shard optimizer state.", o["source"], o["rank"]))

    c = ev[kind == "child_failed"]
    if len(c):
        parts = []
        for r, code, sig, host in zip(c["rank"], c["exitcode"], c["signal"], c["host"], strict=True):
            parts.append(f"rank {'?' if pd.isna(r) else int(r)}" + (f" on {host}" if host else "")
                         + (f" exit code {int(code)}" if pd.notna(code) else "") + (f" ({sig})" if sig else ""))
        root = c[c["root_cause"] == True] if "root_cause" in c.columns else c.iloc[:0]  # noqa: E712
        detail = "Failed child processes: " + "; ".join(parts) + "."
        if len(root):
            detail += f" Root cause: rank {', '.join(str(int(r)) for r in root['rank'].dropna())}."
        out.append(_finding("error", "child_failed", sid, f"{len(c)} child process(es) failed", detail,
                            c["source"], c["rank"]))

    w = ev[kind == "nccl_warn"]
    if len(w):
        out.append(_finding("warning", "nccl_warn", sid, f"{len(w)} NCCL warning(s)",
                            "NCCL reported warnings (transport or network set-up); the first: "
                            f"{str(w['message'].iloc[0])[:200]}", w["source"], w["rank"]))

    structured = {f["kind"] for f in out}
    out.extend(_generic_findings(session, ev[kind.isin(["warning", "error"])], structured))
    out.extend(_emitter_findings(session, ev[kind.isin(["anomaly", "resource_warning"])]))
    return out


def _col(frame: pd.DataFrame, name: str) -> pd.Series:
    return frame[name] if name in frame.columns else pd.Series([None] * len(frame), index=frame.index, dtype="object")


def _generic_findings(session, lines: pd.DataFrame, structured: set[str]) -> list[dict]:
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
        out.append(_finding(sev, kind, sid, title, detail, rows["source"], rows["rank"]))
    if rest:
        rows = lines.loc[rest]
        errors = rows[rows["kind"] == "error"]
        warns = rows[rows["kind"] != "error"]
        if len(errors):
            out.append(_finding("error", "error", sid, f"{len(errors)} error line(s)",
                                f"Errors in the logs; the first: {str(errors['message'].iloc[0])[:200]}",
                                errors["source"], errors["rank"]))
        if len(warns):
            out.append(_finding("info", "warning_lines", sid, f"{len(warns)} other warning line(s)",
                                "Warnings that name no known problem; the first: "
                                f"{str(warns['message'].iloc[0])[:200]}", warns["source"], warns["rank"]))
    return out


def _emitter_findings(session, events: pd.DataFrame) -> list[dict]:
    """The emitter's own anomaly / resource_warning checks, one finding per kind."""
    sid = session.meta.get("session_id")
    if events.empty:
        return []
    sub = _col(events, "subkind").astype("object")
    out = []
    others = []
    for kind in dict.fromkeys(x for x in sub if isinstance(x, str) and x):
        if kind in NAN_SUBKINDS:
            continue  # the NaN finding (health) counts them
        rows = events[sub == kind]
        if kind not in EMITTER_KINDS:
            others.append(rows)
            continue
        title, severity, meaning = EMITTER_KINDS[kind]
        values = rows["value"].astype("float64") if "value" in rows.columns else pd.Series(dtype="float64")
        thr = rows["threshold"].astype("float64").dropna() if "threshold" in rows.columns else pd.Series(
            dtype="float64")
        detail = f"{len(rows)} report(s): {meaning}."
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
        out.append(_finding(severity, kind, sid, f"{title} ({len(rows)})", detail, rows["source"], rows["rank"]))
    if others:
        rows = pd.concat(others)
        kinds = sorted({str(k) for k in _col(rows, "subkind")})
        out.append(_finding("info", "run_notes", sid, f"{len(rows)} other note(s) from the run's own checks",
                            f"Kinds: {', '.join(kinds)}; the first: {str(rows['message'].iloc[0])[:200]}",
                            rows["source"], rows["rank"]))
    return out


def _step_range(frame: pd.DataFrame) -> str:
    steps = frame["step"].dropna() if "step" in frame.columns else pd.Series(dtype="float64")
    if steps.empty:
        return ""
    lo, hi = int(steps.min()), int(steps.max())
    return f" (step {lo})" if lo == hi else f" (steps {lo}-{hi})"


def _rank_evidence(session, ranks) -> list[str]:
    """The file of each rank with the step range of its rows: evidence of a figure derived from a frame
    without line numbers."""
    steps = session.steps
    out = []
    for r in ranks:
        files = _files_of(session, [r])
        rows = steps[steps["rank"] == r] if not steps.empty and "rank" in steps.columns else steps
        rng = _step_range(rows) if len(rows) else ""
        out.extend(f"{f}{rng}" for f in files[:1])
    return out or _files_of(session)


def _merge(out: list[dict], sid, event_kind: str, table_kind: str) -> None:
    """An emitter's report and the same finding derived from the frames are one finding: the frame's,
    with the report's lines added to its evidence."""
    ev = [f for f in out if f["session_id"] == sid and f["kind"] == event_kind]
    table = [f for f in out if f["session_id"] == sid and f["kind"] == table_kind]
    if not ev or not table:
        return
    t = table[0]
    extra = [e for f in ev for e in f["evidence"]]
    t["evidence"] = list(dict.fromkeys(extra + t["evidence"]))[:MAX_EVIDENCE]
    t["evidence_total"] += sum(f["evidence_total"] for f in ev)
    t["detail"] += " The run's own check reported it too: " + "; ".join(f["detail"] for f in ev)
    for f in ev:
        out.remove(f)


def diagnose(sessions: list, parts: dict) -> list[dict]:
    """Findings for ``sessions`` from the other analyses' results in ``parts`` (keys: scaling,
    communication, performance, stragglers, gpus, health, slow_steps {sid: [..]}), sorted by severity."""
    out: list[dict] = []
    perf, strag, gpus, comm = (parts.get(k, pd.DataFrame()) for k in
                               ("performance", "stragglers", "gpus", "communication"))
    health = parts.get("health", {})
    for s in sessions:
        sid = s.meta.get("session_id")
        out.extend(_event_findings(s))
        status = s.meta.get("status")
        if status in ("failed", "interrupted"):
            out.append(_finding("error", "status", sid, f"Run {status}", f"session_end says status={status}.",
                                _files_of(s)))
        elif status == "incomplete":
            out.append(_finding("warning", "status", sid, "Run cut off (no session_end record)",
                                "The streams end without session_end: the run was killed or is still running.",
                                _files_of(s)))
        h = health.get(sid) or {}
        if h.get("nan_steps"):
            steps = sorted({n["step"] for n in h["nan_steps"] if n["step"] is not None})
            out.append(_finding("error", "nan", sid, f"NaN/Inf at {len(h['nan_steps'])} point(s)",
                                f"Non-finite loss, gradients or tensors at steps {steps[:20]}.",
                                [n["source"] for n in h["nan_steps"]] or _files_of(s),
                                [n["rank"] for n in h["nan_steps"]]))
        if h.get("divergence"):
            d = h["divergence"]
            lowest = s.steps[s.steps["rank"] == s.steps["rank"].min()] if not s.steps.empty else s.steps
            out.append(_finding("warning", "divergence", sid, "Loss diverging",
                                f"Smoothed loss rose from its minimum {d['min_loss']:.4g} to "
                                f"{d['final_loss_smoothed']:.4g} ({d['kind']}).",
                                [f"{f}{_step_range(lowest)}" for f in _files_of(s, [0])[:1]]))
        g = gpus[gpus["session_id"] == sid] if len(gpus) else gpus
        low = g[g["avg_util"] < LOW_UTIL] if len(g) else g
        if len(low):
            where = "summary.json" if "source" in low.columns and (low["source"] == "summary.json").all() \
                else "GPU snapshots"
            out.append(_finding("warning", "low_gpu_util", sid, f"Low GPU utilization on {len(low)} GPU(s)",
                                "; ".join(f"GPU {int(x)}: {u:.1f}% avg util" for x, u in
                                          zip(low["gpu"], low["avg_util"], strict=True))
                                + f" (below {LOW_UTIL:g}%, from the {where}): input pipeline, small batch, or "
                                  "waiting on others.", [f"{f} ({where})" for f in _files_of(s)[:1]]))
        _merge(out, sid, "gpu_util_low", "low_gpu_util")
        busy = parts.get("busy_gpu", {}).get(sid)
        if busy and (s.meta.get("world_size") or 1) <= 1:
            out.append(_finding("warning", "config_device_map_auto", sid,
                                "One process, several GPUs, one busy",
                                f"GPU {busy['busy']} averages {busy['busy_util']:.0f}% while GPUs {busy['idle']} "
                                "idle: device_map=\"auto\" splits the model across GPUs, which then take turns; "
                                "this is not data parallelism. Launch one process per GPU (accelerate launch).",
                                _files_of(s)))
        st = strag[(strag["session_id"] == sid) & strag["is_straggler"].astype(bool)] if len(strag) else strag
        for _, row in st.iterrows():
            out.append(_finding("warning", "straggler", sid, f"Rank {int(row['rank'])} is a straggler",
                                f"Median step {row['median_step_s']:.4g} s, {row['vs_fastest']:.2f}x the fastest "
                                f"rank (score {row['score']:.2f}).", _rank_evidence(s, [int(row["rank"])]),
                                [row["rank"]]))
        p = perf[perf["session_id"] == sid] if len(perf) else perf
        slow = p[p["slow_steps"] > 0] if len(p) else p
        if len(slow):
            total, n = int(slow["slow_steps"].sum()), int(p["steps"].sum())
            worst = parts.get("slow_steps", {}).get(sid) or []
            evidence = [f"{f} (step {w['step']})" for w in worst
                        for f in _files_of(s, [w["rank"]] if w["rank"] is not None else None)[:1]]
            out.append(_finding("warning" if total > 0.01 * n else "info", "slow_steps", sid,
                                f"{total} slow step(s)",
                                f"{total} of {n} steps took more than 3x their rank's median; the worst: "
                                + ", ".join(f"step {w['step']} on rank {w['rank']} ({w['x_median']:.1f}x)"
                                            for w in worst[:5]), evidence or _rank_evidence(s, list(slow["rank"])),
                                slow["rank"]))
        _merge(out, sid, "slow_step", "slow_steps")
        c = comm[comm["session_id"] == sid] if len(comm) else comm
        sync = c[c["op"].isin(SYNC_OPS)] if len(c) else c
        bound = sync[sync["sync_share_of_step_time"] >= COMM_BOUND_SHARE] if len(sync) else sync
        if len(bound):
            out.append(_finding("warning", "communication_bound", sid, "Communication-bound",
                                "Gradient sync takes " + ", ".join(
                                    f"{x:.0%} of step time on rank {int(r)} (over {int(m)} steps)" for r, x, m in
                                    zip(bound["rank"], bound["sync_share_of_step_time"], bound["matched_steps"],
                                        strict=True))
                                + " (an upper bound: buckets overlap the backward pass).",
                                _sources(bound) or _rank_evidence(s, list(bound["rank"])), bound["rank"]))
        lat = c[c["verdict"] == "latency-bound"] if len(c) and "verdict" in c.columns else c.iloc[:0]
        if len(lat):
            out.append(_finding("info", "latency_bound", sid, "Collectives are latency-bound",
                                str(lat["note"].iloc[0]) + ": larger buckets (bucket_cap_mb) or gradient "
                                "accumulation move more bytes per call.", _sources(lat) or _files_of(s),
                                lat["rank"]))
        below = c[c["verdict"] == "below peak"] if len(c) and "verdict" in c.columns else c.iloc[:0]
        if len(below):
            out.append(_finding("warning", "below_link_peak", sid, "Collectives below the link's peak",
                                str(below["note"].iloc[0]) + ".", _sources(below) or _files_of(s), below["rank"]))
        diag = s.diagnostics
        if len(diag):
            out.append(_finding("info", "unparsed_lines", sid, f"{len(diag)} line(s) not understood",
                                "Lines that matched no grammar or were torn; kept in the diagnostics.",
                                [f"{Path(str(f)).name}:{int(n)}" if pd.notna(n) else Path(str(f)).name
                                 for f, n in zip(diag["file"], diag["line"], strict=True)]))
    out.extend(_comparison_findings(sessions, parts.get("scaling") or {}))
    return sort_findings(out)


def _sources(rows: pd.DataFrame) -> list[str]:
    if "sources" not in rows.columns:
        return []
    return [str(x) for x in rows["sources"] if isinstance(x, str) and x]


def _comparison_findings(sessions, scaling: dict) -> list[dict]:
    out = []
    by_id = {s.meta.get("session_id"): s for s in sessions}
    for c in scaling.get("comparisons", []):
        sid, base = c["candidate"], c["baseline"]
        files = _files_of(by_id[sid]) if sid in by_id else []
        for flag in c.get("flags", []):
            out.append(_finding("warning", f"scaling_{flag['kind']}", sid,
                                f"{flag['kind'].capitalize()}: speedup {flag['speedup']:.2f}x on "
                                f"{flag['rank_ratio']:g}x the ranks of {base}", f"Likely cause: {flag['cause']}.",
                                files))
        eff = c.get("scaling_efficiency")
        if eff is not None and eff < LOW_EFFICIENCY and not c.get("flags") and (c.get("rank_ratio") or 1) > 1:
            out.append(_finding("warning", "low_scaling_efficiency", sid, f"Scaling efficiency {eff:.0%}",
                                f"Against {base}: below {LOW_EFFICIENCY:.0%} ({c.get('basis') or 'whole run'}).",
                                files))
        ratio, rr = c.get("samples_ratio"), c.get("rank_ratio") or 1
        if ratio and abs(ratio - 1) > 0.05:
            if c["regime"] == "weak" and abs(ratio - rr) / rr < 0.05:
                title, detail = ("Step count not rescaled for the number of GPUs",
                                 f"Same per-device batch and the same step count: the candidate saw {ratio:.2f}x "
                                 f"the samples of {base}. Compare by throughput (as speedup does), or divide "
                                 "max_steps by the number of GPUs to train on the same data.")
            elif c["regime"] == "strong" and abs(ratio * rr - 1) < 0.05:
                title, detail = ("Step count divided although the batch is global",
                                 f"The global batch is the same but the steps were divided by {rr:g}: the "
                                 f"candidate saw {ratio:.2f}x the samples of {base}.")
            else:
                title, detail = ("Runs saw different numbers of samples",
                                 f"The candidate saw {ratio:.2f}x the samples of {base} ({c['regime']} regime): "
                                 "time-to-finish comparisons are not like for like.")
            out.append(_finding("warning", "config_steps_not_rescaled", sid, title, detail, files,
                                samples_ratio=ratio))
        if c["regime"] == "mixed":
            out.append(_finding("warning", "config_batch_mismatch", sid, "Batch sizes not comparable",
                                f"The global batch is neither the same as {base}'s (strong scaling) nor its "
                                "per-device batch x ranks (weak scaling): per-device vs global batch mixed up?",
                                files))
    return out
