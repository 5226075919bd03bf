"""Diagnose: findings ranked by severity, each with its evidence (``file:line`` where a line says it).

``diagnose`` takes the sessions and the results the other analyses computed (``analyze``
passes them) and never recomputes a figure: each finding restates one and where it came from.
What the logs say themselves is a finding too (``log_findings.py``). Findings derived from
frames cite ``file:line`` where the frame has a source column, else the file and the step range.

Thresholds (``thresholds.py``): low GPU utilization < ``LOW_UTIL`` % average;
communication-bound when a gradient-sync op takes >= ``COMM_BOUND_SHARE`` of step time (not for a
group of one rank: its collectives cross no link); low
scaling efficiency < ``LOW_EFFICIENCY`` (headline efficiency: steady state where known); step
counts "not rescaled" when the runs' samples seen differ by more than 5%.
"""

from __future__ import annotations

import dataclasses
from pathlib import PurePath

import pandas as pd

from logkit.analysis.findings.fabric_findings import fabric_findings
from logkit.analysis.findings.hang import hang_findings
from logkit.analysis.findings.log_findings import event_findings
from logkit.analysis.findings.lone_processes import lone_process_findings
from logkit.analysis.findings.memory_balance import uneven_memory_findings
from logkit.analysis.findings.sharded_failures import sharded_failure_findings
from logkit.analysis.findings.solo_work import solo_work_findings
from logkit.analysis.kernels.breakdown import CAUSE_ADVICE, CAUSE_WORDS
from logkit.analysis.kernels.communication import SYNC_OPS
from logkit.analysis.kernels.fabric import ALONE, alone
from logkit.analysis.kernels.shares import comm_bound, data_heavy, of_step
from logkit.analysis.results import MAX_EVIDENCE, Finding, Scaling
from logkit.analysis.thresholds import (
    LOW_EFFICIENCY,
    LOW_UTIL,
    SAMPLES_RATIO_TOLERANCE,
    SLOW_FACTOR,
    SLOW_STEPS_WARNING,
)
from logkit.ingest.meta import IN_PROGRESS_MIN_S, IN_PROGRESS_STEPS
from logkit.schema.findings import SCALING_FLAG_KINDS, FindingKind, Severity
from logkit.schema.vocab import Regime, Status

_DEVICE_MAP, _STRAGGLER, _COMM_BOUND = (FindingKind.CONFIG_DEVICE_MAP_AUTO, FindingKind.STRAGGLER,
                                        FindingKind.COMMUNICATION_BOUND)
_LOW_EFFICIENCY, _NOT_RESCALED, _BATCH_MISMATCH = (FindingKind.LOW_SCALING_EFFICIENCY,
                                                   FindingKind.CONFIG_STEPS_NOT_RESCALED,
                                                   FindingKind.CONFIG_BATCH_MISMATCH)


def _files_of(session, ranks=None) -> list[str]:
    """Base names of the session's files (rank streams of ``ranks`` when given): evidence of
    figures derived from whole frames, which carry no line numbers."""
    names = [PurePath(p).name for p in session.meta.files or []]
    if ranks is not None:
        picked = [n for n in names if any(n.endswith(f"_rank{r}.jsonl") for r in ranks)]
        if picked:
            return picked
    jsonl = [n for n in names if n.endswith(".jsonl")]
    return jsonl or names[:3] or [str(session.meta.session_id)]


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


def _merge(out: list[Finding], sid, event_kind: FindingKind, table_kind: FindingKind) -> None:
    """An emitter's report and the same finding derived from the frames are one finding: the frame's,
    with the report's lines added to its evidence."""
    ev = [f for f in out if f.session_id == sid and f.kind == event_kind]
    table = [f for f in out if f.session_id == sid and f.kind == table_kind]
    if not ev or not table:
        return
    t = table[0]
    extra = [e for f in ev for e in f.evidence]
    out[out.index(t)] = dataclasses.replace(
        t, evidence=tuple(dict.fromkeys(extra + list(t.evidence)))[:MAX_EVIDENCE],
        evidence_total=t.evidence_total + sum(f.evidence_total for f in ev),
        detail=t.detail + " The run's own check reported it too: " + "; ".join(f.detail for f in ev))
    for f in ev:
        out.remove(f)


def _status_findings(s, sid) -> list[Finding]:
    status, idle = s.meta.status, s.meta.idle_s
    if status in (Status.FAILED, Status.INTERRUPTED):
        return [Finding.make(Severity.ERROR, FindingKind.STATUS, sid, f"Run {status}", f"session_end says status={status}.",
                             _files_of(s))]
    if status == Status.INCOMPLETE:
        said = (f" and were last written {idle:.0f} s ago: the run was killed or stopped without ending its "
                "session" if idle is not None else ": the run was killed or is still running")
        return [Finding.make(Severity.WARNING, FindingKind.STATUS, sid, "Run cut off (no session_end record)",
                             f"The streams end without session_end{said}.", _files_of(s))]
    if status == Status.IN_PROGRESS:
        return [Finding.make(Severity.INFO, FindingKind.STATUS, sid, f"Run in progress: {s.meta.status_detail}",
                             f"No session_end yet and its files were written {idle:.0f} s ago (within max("
                             f"{IN_PROGRESS_MIN_S:.0f} s, {IN_PROGRESS_STEPS} x its median step time)): "
                             + ("every figure covers the steps logged so far." if len(s.steps) else
                                "no step is logged yet."), _files_of(s))]
    if status == Status.NO_RECORD:
        ranks = s.meta.ranks_found or []
        files = f"the streams of rank(s) {', '.join(map(str, ranks))}" if ranks else "its files"
        return [Finding.make(FindingKind.NO_RECORDS.severity, FindingKind.NO_RECORDS, sid, FindingKind.NO_RECORDS.title,
                             f"The session folder holds {files} but not one record: the run was killed, or failed, "
                             "before the logger's first flush (half a second after it started, by default), or hung "
                             "in its start (every rank must reach it). The launcher's console output says why.",
                             _files_of(s), ranks)]
    return []


def _health_findings(s, sid, h) -> list[Finding]:
    out = []
    if h is not None and h.nan_steps:
        steps = sorted({n.step for n in h.nan_steps if n.step is not None})
        out.append(Finding.make(FindingKind.NAN.severity, FindingKind.NAN, sid, f"NaN/Inf at {len(h.nan_steps)} point(s)",
                                f"Non-finite loss, gradients or tensors at steps {steps[:20]}.",
                                [n.source for n in h.nan_steps if n.source] or _files_of(s),
                                [n.rank for n in h.nan_steps]))
    if h is not None and h.divergence:
        d = h.divergence
        lowest = s.steps[s.steps["rank"] == s.steps["rank"].min()] if not s.steps.empty else s.steps
        out.append(Finding.make(FindingKind.DIVERGENCE.severity, FindingKind.DIVERGENCE, sid, FindingKind.DIVERGENCE.title,
                                f"Smoothed loss rose from its minimum {d.min_loss:.4g} to "
                                f"{d.final_loss_smoothed:.4g} ({d.kind}).",
                                [f"{f}{_step_range(lowest)}" for f in _files_of(s, [0])[:1]]))
    return out


def _gpu_findings(s, sid, gpus: pd.DataFrame, busy: dict | None) -> list[Finding]:
    out = []
    g = gpus[gpus["session_id"] == sid] if len(gpus) else gpus
    low = g[g["avg_util"] < LOW_UTIL] if len(g) else g
    if len(low):
        where = "summary.json" if "source" in low.columns and (low["source"] == "summary.json").all() \
            else "GPU snapshots"
        out.append(Finding.make(FindingKind.LOW_GPU_UTIL.severity, FindingKind.LOW_GPU_UTIL, sid,
                                f"Low GPU utilization on {len(low)} GPU(s)",
                                "; ".join(f"GPU {int(x)}: {u:.1f}% avg util" for x, u in
                                          zip(low["gpu"], low["avg_util"], strict=True))
                                + f" (below {LOW_UTIL:g}%, from the {where}): input pipeline, small batch, or "
                                  "waiting on others.", [f"{f} ({where})" for f in _files_of(s)[:1]]))
    if busy and (s.meta.world_size or 1) <= 1:
        out.append(Finding.make(_DEVICE_MAP.severity, _DEVICE_MAP, sid, _DEVICE_MAP.title,
                                f"GPU {busy['busy']} averages {busy['busy_util']:.0f}% while GPUs {busy['idle']} "
                                "idle: device_map=\"auto\" splits the model across GPUs, which then take turns; "
                                "this is not data parallelism. Launch one process per GPU (accelerate launch).",
                                _files_of(s)))
    return out


def _straggler(s, sid, row) -> Finding:
    rank = int(row["rank"])
    share = row.get("last_arrival_share")
    if share is None or pd.isna(share):  # no per-step phases: by step time
        return Finding.make(_STRAGGLER.severity, _STRAGGLER, sid, f"Rank {rank} is a straggler",
                            f"Median step {row['median_step_s']:.4g} s, {row['vs_fastest']:.2f}x the fastest "
                            f"rank (score {row['score']:.2f}).", _rank_evidence(s, [rank]), [rank])
    cause = row.get("cause")
    why = (f" Cause: {CAUSE_WORDS[cause]}; {CAUSE_ADVICE[cause].format(rank=rank)}." if cause in CAUSE_WORDS
           else " Its data, compute and host times do not explain it.")
    return Finding.make(_STRAGGLER.severity, _STRAGGLER, sid, f"Rank {rank} holds the others back at the gradient sync",
                        f"Rank {rank} was the last to reach the gradient sync in {share:.0%} of the synced steps, "
                        f"{row['lateness_s'] * 1e3:.3g} ms after the first rank ({row['score']:.0%} of a step)."
                        + why, _rank_evidence(s, [rank]), [rank], cause=cause, last_arrival_share=float(share))


def _step_findings(s, sid, perf: pd.DataFrame, strag: pd.DataFrame, worst: list[dict]) -> list[Finding]:
    out = []
    st = strag[(strag["session_id"] == sid) & strag["is_straggler"].astype(bool)] if len(strag) else strag
    for _, row in st.iterrows():
        out.append(_straggler(s, sid, row))
    p = perf[perf["session_id"] == sid] if len(perf) else perf
    slow = p[p["slow_steps"] > 0] if len(p) else p
    if len(slow):
        total, n = int(slow["slow_steps"].sum()), int(p["steps"].sum())
        evidence = [f"{f} (step {w['step']})" for w in worst
                    for f in _files_of(s, [w["rank"]] if w["rank"] is not None else None)[:1]]
        out.append(Finding.make(Severity.WARNING if total > SLOW_STEPS_WARNING * n else Severity.INFO, FindingKind.SLOW_STEPS, sid,
                                f"{total} slow step(s)",
                                f"{total} of {n} steps took more than {SLOW_FACTOR:g}x their rank's median (warm-up left out); the "
                                "worst: " + ", ".join(f"step {w['step']} on rank {w['rank']} ({w['x_median']:.1f}x)"
                                                      for w in worst[:5]),
                                evidence or _rank_evidence(s, list(slow["rank"])), slow["rank"]))
    return out


def _data_wait_hidden(s, sid, breakdown: pd.DataFrame) -> list[Finding]:
    """transformers' Trainer gathers each step's token count across ranks before the step
    (``average_tokens_across_devices``): a slow loader on one rank then shows as data time on every
    rank, and nobody arrives last at the gradient sync, so the straggler cannot be named."""
    rows = breakdown[breakdown["session_id"] == sid] if len(breakdown) else breakdown
    config = s.meta.config if isinstance(s.meta.config, dict) else {}
    if not len(rows) or not config.get("average_tokens_across_devices"):
        return []
    heavy = rows[data_heavy(of_step(rows["data_s"], rows["step_s"]))]
    if len(heavy) < 2:
        return []
    kind = FindingKind.DATA_WAIT_IN_TOKEN_GATHER
    return [Finding.make(
        kind.severity, kind, sid, kind.title,
        "transformers' Trainer gathers each step's token count across the ranks before the step "
        "(average_tokens_across_devices=True), so every rank's data time ("
        + ", ".join(f"rank {int(r)} {d * 1e3:.3g} ms" for r, d in zip(heavy["rank"], heavy["data_s"], strict=True))
        + ", median) includes waiting for the slowest rank's loader, and no rank arrives last at the gradient "
          "sync: run once with average_tokens_across_devices=False to see which rank loads slowly, then give its "
          "DataLoader more workers (num_workers, pin_memory, prefetch_factor).",
        _rank_evidence(s, list(heavy["rank"])), heavy["rank"])]


def _exposed_bound(s, sid, rows: pd.DataFrame) -> list[Finding]:
    """Communication-bound by the exposed sync (the per-step phases say how much of it is waiting)."""
    share = pd.Series(of_step(rows["comm_exposed_s"], rows["step_s"]), index=rows.index)
    bound = rows[comm_bound(share)]
    if not len(bound):
        return []
    return [Finding.make(_COMM_BOUND.severity, _COMM_BOUND, sid, _COMM_BOUND.title,
                         "The gradient sync that backward does not hide takes " + ", ".join(
                             f"{x:.0%} of step time on rank {int(r)} ({e * 1e3:.3g} of {t * 1e3:.3g} ms, median)"
                             for r, x, e, t in zip(bound["rank"], share[bound.index], bound["comm_exposed_s"],
                                                   bound["step_s"], strict=True))
                         + ": larger buckets (bucket_cap_mb), gradient accumulation (fewer syncs per sample) or a "
                           "faster interconnect shorten it.", _rank_evidence(s, list(bound["rank"])), bound["rank"])]


def _comm_findings(s, sid, comm: pd.DataFrame, breakdown: pd.DataFrame) -> list[Finding]:
    out = []
    c = comm[comm["session_id"] == sid] if len(comm) else comm
    sync = c[c["op"].isin(SYNC_OPS)] if len(c) else c
    # a collective of a group of one rank crosses no link: its time is no communication to bind a run
    sync = sync[sync["link"] != ALONE["link"]] if len(sync) and "link" in sync.columns else sync
    phased = breakdown[breakdown["session_id"] == sid] if len(breakdown) and not alone(s, None) else breakdown[:0]
    bound = sync[comm_bound(sync["sync_share_of_step_time"])] if len(sync) and not len(phased) else sync[:0]
    out += _exposed_bound(s, sid, phased) if len(phased) else []
    if len(bound):
        out.append(Finding.make(_COMM_BOUND.severity, _COMM_BOUND, sid, _COMM_BOUND.title,
                                "Gradient sync takes " + ", ".join(
                                    f"{x:.0%} of step time on rank {int(r)} (over {int(m)} steps)" for r, x, m in
                                    zip(bound["rank"], bound["sync_share_of_step_time"], bound["matched_steps"],
                                        strict=True))
                                + " (an upper bound: buckets overlap the backward pass).",
                                _sources(bound) or _rank_evidence(s, list(bound["rank"])), bound["rank"]))
    lat = c[c["verdict"] == "latency-bound"] if len(c) and "verdict" in c.columns else c.iloc[:0]
    if len(lat):
        out.append(Finding.make(FindingKind.LATENCY_BOUND.severity, FindingKind.LATENCY_BOUND, sid,
                                FindingKind.LATENCY_BOUND.title,
                                str(lat["note"].iloc[0]) + ": larger buckets (bucket_cap_mb) or gradient "
                                "accumulation move more bytes per call.", _sources(lat) or _files_of(s),
                                lat["rank"]))
    below = c[c["verdict"] == "below peak"] if len(c) and "verdict" in c.columns else c.iloc[:0]
    if len(below):
        out.append(Finding.make(FindingKind.BELOW_LINK_PEAK.severity, FindingKind.BELOW_LINK_PEAK, sid,
                                FindingKind.BELOW_LINK_PEAK.title,
                                str(below["note"].iloc[0]) + ".", _sources(below) or _files_of(s), below["rank"]))
    return out


def _unparsed(s, sid) -> list[Finding]:
    diag = s.diagnostics
    if not len(diag):
        return []
    return [Finding.make(FindingKind.UNPARSED_LINES.severity, FindingKind.UNPARSED_LINES, sid,
                         f"{len(diag)} line(s) not understood",
                         "Lines that matched no grammar or were torn; kept in the diagnostics.",
                         [f"{PurePath(str(f)).name}:{int(n)}" if pd.notna(n) else PurePath(str(f)).name
                          for f, n in zip(diag["file"], diag["line"], strict=True)])]


def diagnose(sessions: list, parts: dict) -> tuple[Finding, ...]:
    """Findings for ``sessions`` from the other analyses' results in ``parts`` (keys: scaling,
    communication, performance, stragglers, step_breakdown, gpus, health {sid: Health}, busy_gpu {sid: ..},
    slow_steps {sid: [..]}), most severe first (stable within a severity)."""
    out: list[Finding] = []
    empty = pd.DataFrame()
    perf, strag, gpus, comm = (parts.get(k, empty) for k in ("performance", "stragglers", "gpus", "communication"))
    for s in sessions:
        sid = s.meta.session_id
        out += event_findings(s) + hang_findings(s) + sharded_failure_findings(s) + uneven_memory_findings(s)
        out += solo_work_findings(s)
        out += _status_findings(s, sid)
        out += _health_findings(s, sid, parts.get("health", {}).get(sid))
        out += _gpu_findings(s, sid, gpus, parts.get("busy_gpu", {}).get(sid))
        _merge(out, sid, FindingKind.GPU_UTIL_LOW, FindingKind.LOW_GPU_UTIL)
        out += _step_findings(s, sid, perf, strag, parts.get("slow_steps", {}).get(sid) or [])
        _merge(out, sid, FindingKind.SLOW_STEP, FindingKind.SLOW_STEPS)
        out += _comm_findings(s, sid, comm, parts.get("step_breakdown", empty)) + _unparsed(s, sid)
        out += _data_wait_hidden(s, sid, parts.get("step_breakdown", empty))
        out += fabric_findings(s, comm, strag)
    out += _comparison_findings(sessions, parts.get("scaling") or Scaling())
    out += lone_process_findings(sessions)
    return tuple(sorted(out, key=lambda f: f.severity.rank))


def _sources(rows: pd.DataFrame) -> list[str]:
    if "sources" not in rows.columns:
        return []
    return [str(x) for x in rows["sources"] if isinstance(x, str) and x]


def _comparison_findings(sessions, scaling: Scaling) -> list[Finding]:
    out = []
    by_id = {s.meta.session_id: s for s in sessions}
    for c in scaling.comparisons:
        sid, base = c.candidate, c.baseline
        files = _files_of(by_id[sid]) if sid in by_id else []
        for flag in c.flags:
            kind = SCALING_FLAG_KINDS[flag.kind]
            out.append(Finding.make(kind.severity, kind, sid,
                                    f"{flag.kind.capitalize()}: speedup {flag.speedup:.2f}x on "
                                    f"{flag.rank_ratio:g}x the ranks of {base}", f"Likely cause: {flag.cause}.",
                                    files))
        eff = c.scaling_efficiency
        if eff is not None and eff < LOW_EFFICIENCY and not c.flags and c.is_scaling:
            out.append(Finding.make(_LOW_EFFICIENCY.severity, _LOW_EFFICIENCY, sid, f"Scaling efficiency {eff:.0%}",
                                    f"Against {base}: below {LOW_EFFICIENCY:.0%} ({c.basis}).", files))
        out += _samples_findings(c, sid, base, files)
    return out


def _samples_findings(c, sid, base, files) -> list[Finding]:
    out = []
    ratio, rr, tol = c.samples_ratio, c.rank_ratio, SAMPLES_RATIO_TOLERANCE
    if ratio and abs(ratio - 1) > tol:
        if c.regime == Regime.WEAK and abs(ratio - rr) / rr < tol:
            title, detail = ("Step count not rescaled for the number of GPUs",
                             f"Same per-device batch and the same step count: the candidate saw {ratio:.2f}x "
                             f"the samples of {base}. Compare by throughput (as speedup does), or divide "
                             "max_steps by the number of GPUs to train on the same data.")
        elif c.regime == Regime.STRONG and abs(ratio * rr - 1) < tol:
            title, detail = ("Step count divided although the batch is global",
                             f"The global batch is the same but the steps were divided by {rr:g}: the "
                             f"candidate saw {ratio:.2f}x the samples of {base}.")
        else:
            title, detail = ("Runs saw different numbers of samples",
                             f"The candidate saw {ratio:.2f}x the samples of {base} ({c.regime} regime): "
                             "time-to-finish comparisons are not like for like.")
        out.append(Finding.make(_NOT_RESCALED.severity, _NOT_RESCALED, sid, title, detail, files,
                                samples_ratio=ratio))
    if c.regime == Regime.MIXED:
        out.append(Finding.make(_BATCH_MISMATCH.severity, _BATCH_MISMATCH, sid, _BATCH_MISMATCH.title,
                                f"The global batch is neither the same as {base}'s (strong scaling) nor its "
                                "per-device batch x ranks (weak scaling): per-device vs global batch mixed up?",
                                files))
    return out
