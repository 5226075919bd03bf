"""What every renderer reads: the results of an analysis as plain Python values.

``analysis_view`` takes the ``Analysis`` object of ``logkit.analysis.analyze`` (attributes
``scaling, communication, performance, stragglers, gpus, mfu, health, loss_parity,
findings``), a dict with the same keys (its ``to_dict()``), or the older
``ComparisonReport``, and gives back a dict of the same keys whose tables are lists of
row dicts (DataFrames flattened, their index made columns), with NaN and <NA> as None and
numpy scalars as Python numbers. Renderers only read this; nothing here computes a figure.

    >>> view = analysis_view({"scaling": {"sessions": [], "comparisons": []}})
    >>> view["communication"], view["findings"]
    ([], [])
"""

from __future__ import annotations

import math
from typing import Any

__all__ = ["SECTIONS", "TABLES", "FALLBACK_DEFINITIONS", "analysis_view", "plain", "records", "definitions",
           "severity_rank"]

# Keys of the view; the tables among them become lists of row dicts.
SECTIONS: tuple[str, ...] = ("scaling", "communication", "nccl_tests", "communication_peaks", "performance", "stragglers",
                             "gpus", "mfu", "health", "loss_parity", "findings")
TABLES: tuple[str, ...] = ("communication", "nccl_tests", "communication_peaks", "performance", "stragglers", "gpus")

# Definitions of the figures the renderers show, used where the analysis states none of its own
# (an analysis' own "definitions" always win). They restate the analysis' documented contract.
FALLBACK_DEFINITIONS: dict[str, str] = {
    "speedup": "candidate samples/s / baseline samples/s (throughput ratio)",
    "scaling_efficiency": "speedup / (candidate ranks / baseline ranks)",
    "steady_speedup": "speedup over the steady-state steps only (warm-up steps excluded)",
    "speedup_ci": "bootstrap confidence interval of the speedup (resampled step times)",
    "serial_fraction": "Amdahl fit: speedup(n) = 1 / (s + (1 - s) / n); s is the serial fraction",
    "karp_flatt": "experimentally determined serial fraction e = (1/speedup - 1/n) / (1 - 1/n)",
    "count": "communication records of that op on that rank",
    "total_bytes / mean_bytes": "sum / mean of size_bytes per op on the rank; MB = 10^6 bytes",
    "p50_ms / p95_ms": "median / 95th percentile of duration_ms per operation",
    "algbw_mb_s": "bytes moved by one rank / duration (MB/s, SI)",
    "busbw_mb_s": "algbw x 2(n-1)/n for all-reduce, (n-1)/n for all-gather and reduce-scatter, 1 otherwise",
    "sync_share_of_step_time": "sum of the op's duration / sum of step_time_s on that rank",
    "pct_of_peak": "busbw / the link's peak bus bandwidth x 100",
    "latency_bound": "messages too small to reach bandwidth: time is dominated by per-call latency",
    "step_p50_s / p95 / max": "percentiles of step_time_s over the rank's steps",
    "slow_steps": "steps slower than the analysis' slow-step threshold (relative to the rank's median)",
    "data_share": "sum of data-loading time / sum of step_time_s",
    "vs_fastest": "the rank's median step time / the fastest rank's median step time",
    "avg_util / peak_util": "mean / max of utilization_pct over the GPU snapshots",
    "avg_memory_pct": "mean of memory used / memory total x 100 over the snapshots",
    "mfu": "achieved model FLOP/s / peak FLOP/s of the GPU model",
    "nan_steps": "steps with a NaN/Inf loss or gradient, as the logs report them",
    "divergence": "the loss rose clearly above its minimum (the analysis states its rule)",
    "score": "vs_fastest - 1",
    "loss_parity": "final-loss difference of a candidate against the baseline, and the largest "
                   "absolute difference of the loss curves aligned by step (or by samples seen)",
    "severity": "critical > error > warning > info; findings are listed in that order",
}

_SEVERITY_ORDER = {"critical": 0, "error": 1, "high": 1, "warning": 2, "medium": 2, "info": 3, "low": 3}


def plain(value: Any) -> Any:
    """A value fit for a template or JSON: None for NaN/<NA>, Python numbers for numpy ones;
    dicts, lists and tuples converted throughout."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {(k if isinstance(k, str) else plain(k)): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if hasattr(value, "to_dict") and hasattr(value, "columns"):
        return records(value)
    if hasattr(value, "tolist") and not hasattr(value, "item"):  # numpy arrays
        return plain(value.tolist())
    if hasattr(value, "item"):
        try:
            return plain(value.item())
        except (ValueError, TypeError):
            pass
    try:
        if value != value:  # pandas.NA, NaT
            return None
    except TypeError:
        return None
    if hasattr(value, "isoformat"):
        return value.isoformat()
    return value


def records(frame) -> list[dict]:
    """Rows of a DataFrame (its index made columns where it is named) as plain dicts."""
    if frame is None:
        return []
    if isinstance(frame, list):
        return [plain(r) for r in frame]
    if isinstance(frame, dict):  # {column: [values]} or {key: row}
        return plain(list(frame.values())) if all(isinstance(v, dict) for v in frame.values()) else []
    names = [n for n in (frame.index.names or []) if n is not None]
    if names:
        frame = frame.reset_index()
    return [{str(k): plain(v) for k, v in row.items()} for row in frame.to_dict("records")]


def _get(analysis, key: str):
    if isinstance(analysis, dict):
        return analysis.get(key)
    return getattr(analysis, key, None)


def _from_comparison_report(report) -> dict:
    gpus = [{"session_id": sid, **g} for sid, rows in report.gpus.items() for g in rows]
    return {
        "scaling": {"sessions": report.sessions, "comparisons": report.comparisons, "fit": None,
                    "definitions": dict(report.definitions), "baseline": report.baseline},
        "gpus": gpus,
    }


def analysis_view(analysis) -> dict:
    """The view of ``analysis`` (an ``Analysis``, its dict, a ``ComparisonReport``, or a view)."""
    if isinstance(analysis, dict) and analysis.get("_view"):
        return analysis
    if analysis is not None and not isinstance(analysis, dict) and hasattr(analysis, "comparisons") \
            and not hasattr(analysis, "scaling"):
        analysis = _from_comparison_report(analysis)
    view: dict[str, Any] = {}
    for key in SECTIONS:
        value = _get(analysis, key) if analysis is not None else None
        if key in TABLES:
            view[key] = records(value)
        elif key == "scaling":
            scaling = plain(value) if value is not None else {}
            scaling.setdefault("sessions", [])
            scaling.setdefault("comparisons", [])
            scaling.setdefault("fit", None)
            scaling.setdefault("fits", [scaling["fit"]] if scaling.get("fit") else [])
            scaling.setdefault("groups", [])
            scaling.setdefault("not_compared", [])
            scaling.setdefault("definitions", {})
            view[key] = scaling
        elif key in ("findings", "loss_parity"):
            view[key] = plain(list(value)) if value is not None else []
        else:
            view[key] = plain(value) if value is not None else {}
    view["findings"] = sorted(view["findings"], key=lambda f: _SEVERITY_ORDER.get(
        str(f.get("severity", "")).lower(), 9))  # stable: keeps the analysis' order within a level
    extra = _get(analysis, "definitions") if analysis is not None else None
    view["definitions"] = definitions(view, plain(extra) if isinstance(extra, dict) else None)
    view["_view"] = True
    return view


def definitions(view: dict, extra: dict | None = None) -> dict[str, str]:
    """Every definition: the fallback texts, overridden by the analysis' own."""
    out = dict(FALLBACK_DEFINITIONS)
    out.update(view.get("scaling", {}).get("definitions") or {})
    for m in (view.get("mfu") or {}).values():
        if isinstance(m, dict) and m.get("definition"):
            out["mfu"] = m["definition"]
            break
    out.update(extra or {})
    return out


def severity_rank(severity: str | None) -> int:
    return _SEVERITY_ORDER.get(str(severity or "").lower(), 9)
