"""Training health: NaN/Inf, divergence, and loss parity between compared runs.

Definitions (``definitions.HEALTH``):

- ``nan_steps``: steps of ``nan_detected`` events (the emitter's, and those ingest makes of a loss
  or grad_norm logged as NaN/Inf, with its file:line), of ``anomaly`` / ``resource_warning``
  events of kind nan_loss / nan_grad / inf_*, and steps whose loss or grad_norm is +-inf in the
  frame; one point per rank and step. (A NaN in a frame also means "not logged", so a NaN value
  of a frame alone is not counted: the event is what says it was logged.)
- divergence: over the lowest rank's finite losses, smoothed by a running median of
  ``K = clip(n // 10, 3, 100)`` points: the final smoothed loss exceeds the smoothed minimum by
  more than 25% of the drop from the first smoothed value to that minimum (and by more than
  1% of the minimum's magnitude), or the last max(5, K) raw losses all rise (by > 1% of the minimum). Needs 10 or more points.
- loss parity: both curves (lowest rank, finite losses) placed on samples seen = step x
  total_batch_size (step when a batch size is unknown), the candidate interpolated linearly
  onto the baseline's points inside the overlap; ``max_abs_diff_aligned`` / ``mean_abs_diff``
  over those points; ``final_loss_diff`` = candidate final_loss - baseline final_loss;
  ``final_loss_rel_diff`` = that / |baseline final_loss|.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from logkit.analysis.results import Divergence, Health, LossParity, NanPoint
from logkit.schema.findings import NONFINITE_KINDS
from logkit.schema.records import EventType
from logkit.schema.values import to_float
from logkit.schema.vocab import DivergenceKind, LossAxis

NAN_KINDS = NONFINITE_KINDS | {EventType.NAN_DETECTED}


def _curve_rows(session) -> pd.DataFrame:
    rows = session.main_rank_steps()
    return rows[rows["step"].notna()]


def nan_steps(session) -> tuple[NanPoint, ...]:
    """The points of non-finite values (see module doc), sorted by step; one entry per
    rank and step (an event, which names its file and line, wins over the +-inf value of a steps row)."""
    out = []
    seen = set()
    ev = session.events
    if not ev.empty:
        kinds = ev["kind"].astype("object")
        sub = ev["subkind"].astype("object") if "subkind" in ev.columns else pd.Series(None, index=ev.index)
        hit = ev[(kinds == EventType.NAN_DETECTED) | sub.isin(NAN_KINDS)]
        for k, sk, r, st, src in zip(hit["kind"], hit["subkind"] if "subkind" in hit.columns else [None] * len(hit),
                                     hit["rank"], hit["step"], hit["source"], strict=True):
            step = None if pd.isna(st) else int(st)
            rank = None if pd.isna(r) else int(r)
            if step is not None and (rank, step) in seen:
                continue
            seen.add((rank, step))
            out.append(NanPoint(step, rank, sk if isinstance(sk, str) and sk else k,
                                src if isinstance(src, str) else None))
    steps = session.steps
    if not steps.empty:
        for col in ("loss", "grad_norm"):
            bad = steps[np.isinf(steps[col].to_numpy(dtype="float64"))]
            for r, s, v in zip(bad["rank"], bad["step"], bad[col], strict=True):
                step, rank = None if pd.isna(s) else int(s), None if pd.isna(r) else int(r)
                if (rank, step) in seen:
                    continue
                seen.add((rank, step))
                out.append(NanPoint(step, rank, f"{col}={v}", None))
    return tuple(sorted(out, key=lambda d: (d.step is None, d.step or 0, d.rank or 0)))


def loss_curve(session, batch_size: int | None = None) -> tuple[np.ndarray, np.ndarray, str]:
    """(x, loss, basis) of the lowest rank: x = samples seen (step x batch) or step. ``batch_size``: the
    global batch where the rows lack one (default: meta's total_batch_size)."""
    rows = _curve_rows(session)
    if rows.empty:
        return np.array([]), np.array([]), LossAxis.SAMPLES_SEEN
    loss = rows["loss"].to_numpy(dtype="float64")
    step = rows["step"].to_numpy(dtype="float64")
    batch = rows["total_batch_size"].astype("float64")
    default = batch_size or session.meta.total_batch_size
    if default:
        batch = batch.fillna(float(default))
    ok = np.isfinite(loss)
    if batch.notna().all():
        x, basis = step * batch.to_numpy(), LossAxis.SAMPLES_SEEN
    else:
        x, basis = step, LossAxis.STEPS
    order = np.argsort(x[ok], kind="stable")
    return x[ok][order], loss[ok][order], basis


def divergence(loss: np.ndarray, x: np.ndarray | None = None) -> Divergence | None:
    """The divergence finding for a loss curve (see module doc), or None."""
    n = len(loss)
    if n < 10:
        return None
    k = int(min(100, max(3, n // 10)))
    smooth = pd.Series(loss).rolling(k, min_periods=1).median().to_numpy()
    i_min = int(np.argmin(smooth))
    lo, first, last = smooth[i_min], smooth[min(k - 1, n - 1)], smooth[-1]
    drop = max(first - lo, 0.0)
    rise = last - lo
    tail = loss[-max(5, k):]
    rising = bool(np.all(np.diff(tail) > 0)) and tail[-1] - tail[0] > 0.01 * abs(lo)
    if (rise > 0.25 * drop and rise > 0.01 * abs(lo) and rise > 0) or rising:
        at = x[i_min] if x is not None else i_min
        return Divergence(DivergenceKind.RISING_TAIL if rising else DivergenceKind.ABOVE_MINIMUM, float(lo), float(at), float(last),
                          float(rise), float(rise / drop) if drop > 0 else None, k)
    return None


def session_health(session, final_loss: float | None = None, final_loss_from: str | None = None) -> Health:
    """NaN/Inf points (one per rank and step), ``nan_detected`` events, divergence and final loss of one
    session. ``final_loss``: the run's own, where the summary states it (sampled step lines: the run's,
    not the last line's)."""
    x, loss, basis = loss_curve(session)
    final = float(loss[-1]) if len(loss) else to_float(session.meta.final_loss, finite=True)
    if final_loss is not None:
        final = final_loss
    ev = session.events
    events = int((ev["kind"].astype("object") == EventType.NAN_DETECTED).sum()) if not ev.empty else 0
    return Health(nan_steps=nan_steps(session), nan_events=events, divergence=divergence(loss, x),
                  final_loss=final, points=int(len(loss)), basis=basis,
                  final_loss_from=final_loss_from if final_loss is not None else None)


def loss_parity(base, cand, base_batch: int | None = None, cand_batch: int | None = None,
                base_final: float | None = None, cand_final: float | None = None) -> LossParity:
    """Loss parity of ``cand`` against ``base`` (see module doc); ``*_batch``: global batches where the
    rows lack them (e.g. derived from the runs' totals); ``*_final``: the runs' final losses where the
    last logged point is not the run's last (sampled step lines; ``summary.session_summary`` says)."""
    bx, bl, bb = loss_curve(base, base_batch)
    cx, cl, cb = loss_curve(cand, cand_batch)
    basis = LossAxis.SAMPLES_SEEN if bb == cb == LossAxis.SAMPLES_SEEN else LossAxis.STEPS
    if basis == LossAxis.STEPS and (bb != LossAxis.STEPS or cb != LossAxis.STEPS):
        # one side lacks batch sizes: fall back to steps on both sides
        bx, bl, _ = _by_step(base)
        cx, cl, _ = _by_step(cand)
    out = {"baseline": base.meta.session_id, "candidate": cand.meta.session_id, "aligned_by": basis}
    b_end = base_final if base_final is not None else (float(bl[-1]) if len(bl) else None)
    c_end = cand_final if cand_final is not None else (float(cl[-1]) if len(cl) else None)
    if b_end is not None and c_end is not None:
        out["final_loss_diff"] = c_end - b_end
        out["final_loss_rel_diff"] = (c_end - b_end) / abs(b_end) if b_end != 0 else None
    if len(bl) and len(cl):
        lo, hi = max(bx[0], cx[0]), min(bx[-1], cx[-1])
        grid = (bx >= lo) & (bx <= hi)
        if grid.any() and len(cx) >= 1:
            diff = np.interp(bx[grid], cx, cl) - bl[grid]
            out.update(max_abs_diff_aligned=float(np.abs(diff).max()), mean_abs_diff_aligned=float(
                np.abs(diff).mean()), points=int(grid.sum()), overlap=(float(lo), float(hi)))
    return LossParity(**out)


def _by_step(session):
    rows = _curve_rows(session)
    loss = rows["loss"].to_numpy(dtype="float64")
    step = rows["step"].to_numpy(dtype="float64")
    ok = np.isfinite(loss)
    order = np.argsort(step[ok], kind="stable")
    return step[ok][order], loss[ok][order], LossAxis.STEPS
