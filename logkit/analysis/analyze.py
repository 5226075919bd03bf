"""The facade: every analysis of a set of sessions in one ``Analysis`` (pure; no printing, no files).

    >>> from logkit.analysis.analyze import analyze       # doctest: +SKIP
    >>> a = analyze(sessions)
    >>> a.scaling["comparisons"][0]["speedup"], a.communication.head(), a.findings[:3]
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import pandas as pd

from logkit.analysis.communication import (
    COMM_COLUMNS,
    COMMUNICATION_DEFINITIONS,
    NCCL_TESTS_COLUMNS,
    SYNC_OPS,
    communication_peaks,
    communication_table,
    nccl_tests_table,
)
from logkit.analysis.diagnose import diagnose
from logkit.analysis.health import HEALTH_DEFINITIONS, loss_parity, session_health
from logkit.analysis.performance import (
    GPU_COLUMNS,
    PERFORMANCE_DEFINITIONS,
    STEP_COLUMNS,
    busy_gpu,
    gpu_table,
    mfu,
    slow_step_list,
    step_stats,
    stragglers,
)
from logkit.analysis.scaling_report import scaling_analysis

__all__ = ["Analysis", "analyze", "plain"]


def plain(value):
    """JSON-able: NaN/<NA> -> None, numpy scalars -> Python, non-str dict keys -> str, frames -> records."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, pd.DataFrame):
        return [plain(r) for r in value.to_dict("records")]
    if hasattr(value, "item"):
        try:
            return plain(value.item())
        except (TypeError, ValueError):
            pass
    try:
        if pd.isna(value):
            return None
    except (TypeError, ValueError):
        pass
    return value


@dataclass
class Analysis:
    """Results of ``analyze``. Frames: ``communication``, ``nccl_tests``, ``communication_peaks``,
    ``performance``, ``stragglers``, ``gpus``; dicts keyed by session_id: ``mfu``, ``health``; lists:
    ``loss_parity``, ``findings``; ``scaling`` a dict; ``definitions`` every figure's definition."""

    scaling: dict = field(default_factory=dict)
    communication: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=COMM_COLUMNS))
    nccl_tests: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=NCCL_TESTS_COLUMNS))
    communication_peaks: pd.DataFrame = field(default_factory=communication_peaks)
    performance: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=STEP_COLUMNS))
    stragglers: pd.DataFrame = field(default_factory=pd.DataFrame)
    gpus: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=GPU_COLUMNS))
    mfu: dict = field(default_factory=dict)
    health: dict = field(default_factory=dict)
    loss_parity: list = field(default_factory=list)
    findings: list = field(default_factory=list)
    definitions: dict = field(default_factory=dict)

    def to_dict(self) -> dict:
        """Everything as JSON-able values: frames as lists of row dicts, NaN as None, keys as str."""
        return {k: plain(getattr(self, k)) for k in (
            "scaling", "communication", "nccl_tests", "communication_peaks", "performance", "stragglers", "gpus", "mfu",
            "health", "loss_parity", "findings", "definitions")}


def _concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    frames = [f for f in frames if len(f)]
    if not frames:
        return pd.DataFrame(columns=columns)
    return pd.concat(frames, ignore_index=True)


def analyze(sessions: list) -> Analysis:
    """Every analysis of ``sessions`` (in the order given; the baseline by ``pick_baseline``)."""
    sessions = list(sessions)
    perf = _concat([step_stats(s) for s in sessions], STEP_COLUMNS)
    strag = stragglers(perf)
    gpus = _concat([gpu_table(s) for s in sessions], GPU_COLUMNS)
    comm = _concat([communication_table(s) for s in sessions], COMM_COLUMNS)
    nccl = _concat([nccl_tests_table(s) for s in sessions], NCCL_TESTS_COLUMNS)
    busy, context = {}, {}
    for s in sessions:
        sid = s.meta.get("session_id")
        b = busy_gpu(gpus[gpus["session_id"] == sid]) if len(gpus) else None
        if b:
            busy[sid] = b
        sync = comm[(comm["session_id"] == sid) & comm["op"].isin(SYNC_OPS)] if len(comm) else comm
        share = sync["sync_share_of_step_time"].max() if len(sync) else None
        st = strag[(strag["session_id"] == sid) & strag["is_straggler"].astype(bool)] if len(strag) else strag
        context[sid] = {"busy_gpu": bool(b), "sync_share": None if share is None or pd.isna(share) else float(share),
                        "straggler": int(st["rank"].iloc[0]) if len(st) else None}
    scaling = scaling_analysis(sessions, context)
    health = {s.meta.get("session_id"): session_health(s) for s in sessions}
    for row in scaling["sessions"]:  # the run's final loss, as the summary states it (sampled lines: the run's)
        h = health.get(row["session_id"])
        if h is not None and row.get("final_loss") is not None:
            h["final_loss"], h["final_loss_from"] = row["final_loss"], row.get("final_loss_from")
    by_id = {s.meta.get("session_id"): s for s in sessions}
    rows = {r["session_id"]: r for r in scaling["sessions"]}

    def final(sid):  # the run's own final loss where its step lines are sampled
        r = rows.get(sid) or {}
        return r.get("final_loss") if r.get("basis") == "run totals" and r.get("logged_steps") else None

    parity = [loss_parity(by_id[c["baseline"]], by_id[c["candidate"]], rows[c["baseline"]].get("total_batch_size"),
                          rows[c["candidate"]].get("total_batch_size"), final(c["baseline"]), final(c["candidate"]))
              for c in scaling["comparisons"]]
    result = Analysis(
        scaling=scaling, communication=comm, nccl_tests=nccl, performance=perf, stragglers=strag, gpus=gpus,
        mfu={s.meta.get("session_id"): mfu(s) for s in sessions}, health=health, loss_parity=parity,
    )
    result.findings = diagnose(sessions, {
        "scaling": scaling, "communication": comm, "performance": perf, "stragglers": strag, "gpus": gpus,
        "health": health, "busy_gpu": busy, "slow_steps": {s.meta.get("session_id"): slow_step_list(s)
                                                           for s in sessions},
    })
    result.definitions = {**scaling["definitions"], **COMMUNICATION_DEFINITIONS, **PERFORMANCE_DEFINITIONS,
                          **HEALTH_DEFINITIONS}
    return result
