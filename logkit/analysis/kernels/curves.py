"""The series the plots draw, made once here so that a plot only draws.

- loss: each training run's lowest-rank finite losses, ordered; x = samples seen (step x global
  batch) when every run's global batch is known (runs with different batches line up), else
  step (``loss_axis`` says which); eval loss (the lowest rank's ``eval_loss`` records) on the same axis.
- throughput: samples/s of each optimizer step (``throughput.step_throughput``), lowest rank.
- GPU utilization: utilization_pct per GPU against time since the session's start.
- bandwidth: per op and message size, the median busbw (algbw where busbw is missing) of each rank's
  records, and across ranks the record-weighted median of those medians (``comm_reduce.merged_points``:
  one definition whether the records were read whole or reduced rank by rank where they lie), and the
  number of records.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from logkit.analysis.kernels.comm_reduce import merged_points
from logkit.analysis.kernels.health import loss_curve
from logkit.analysis.kernels.throughput import step_throughput
from logkit.analysis.results import Curves, Scaling
from logkit.schema.vocab import LossAxis


def _by_step(session) -> tuple[np.ndarray, np.ndarray]:
    rows = session.main_rank_steps()
    rows = rows[rows["step"].notna() & rows["loss"].notna()].sort_values("step", kind="stable")
    x, loss = rows["step"].to_numpy(dtype="float64"), rows["loss"].to_numpy(dtype="float64")
    ok = np.isfinite(loss)
    return x[ok], loss[ok]


def _concat(parts: list[pd.DataFrame], empty: pd.DataFrame) -> pd.DataFrame:
    return pd.concat(parts, ignore_index=True) if parts else empty


def _loss(sessions, scaling: Scaling) -> tuple[pd.DataFrame, pd.DataFrame, str]:
    summaries = {s.session_id: s for s in scaling.sessions}
    runs = [s for s in sessions if summaries.get(s.session_id) is None or summaries[s.session_id].is_training]
    batch = {sid: s.total_batch_size for sid, s in summaries.items()}
    curves = {s.session_id: loss_curve(s, batch.get(s.session_id)) for s in runs}
    curves = {k: v for k, v in curves.items() if len(v[1])}
    by_samples = bool(curves) and all(basis == LossAxis.SAMPLES_SEEN for _, _, basis in curves.values())
    losses, evals = [], []
    for s in runs:
        if s.session_id in curves:
            x, loss, basis = curves[s.session_id]
            if not by_samples and basis == LossAxis.SAMPLES_SEEN:  # back to steps: every line shares the axis
                x, loss = _by_step(s)
            losses.append(pd.DataFrame({"session_id": s.session_id, "x": x, "loss": loss}))
        b = batch.get(s.session_id) or s.meta.total_batch_size
        ev = s.evals
        ev = ev[(ev["name"] == "eval_loss") & ev["step"].notna() & ev["value"].notna()] if not ev.empty else ev
        if len(ev) and ev["rank"].notna().any():  # the lowest rank's, as the loss (every rank logs them)
            ev = ev[ev["rank"] == ev["rank"].min()]
        if len(ev) and not (by_samples and not b):
            ex = ev["step"].to_numpy(dtype="float64") * (float(b) if by_samples else 1.0)
            order = np.argsort(ex, kind="stable")
            evals.append(pd.DataFrame({"session_id": s.session_id, "x": ex[order],
                                       "value": ev["value"].to_numpy(dtype="float64")[order]}))
    empty = Curves()
    return (_concat(losses, empty.loss), _concat(evals, empty.eval_loss),
            LossAxis.SAMPLES_SEEN if by_samples else LossAxis.STEP)


def _throughput(sessions) -> pd.DataFrame:
    parts = []
    for s in sessions:
        rows = s.main_rank_steps()
        if rows.empty:
            continue
        y = step_throughput(rows)
        keep = rows["step"].notna().to_numpy() & y.notna().to_numpy()
        if keep.any():
            parts.append(pd.DataFrame({"session_id": s.session_id,
                                       "step": rows["step"].to_numpy(dtype="float64")[keep],
                                       "samples_per_s": y.to_numpy(dtype="float64")[keep]}))
    return _concat(parts, Curves().throughput)


def _gpu_utilization(sessions) -> pd.DataFrame:
    parts = []
    for s in sessions:
        g = s.gpu
        if g.empty or g["utilization_pct"].notna().sum() == 0:
            continue
        part = pd.DataFrame({"session_id": s.session_id, "host": g["host"].astype("object").to_numpy(),
                             "gpu": g["gpu"].astype("float64").to_numpy(),
                             "time_s": g["time_s"].to_numpy(dtype="float64"),
                             "utilization_pct": g["utilization_pct"].to_numpy(dtype="float64")})
        part = part.sort_values(["host", "gpu", "time_s"], kind="stable", na_position="last")
        parts.append(part.dropna(subset=["time_s", "utilization_pct"]))
    return _concat(parts, Curves().gpu_utilization)


def _bandwidth(sessions, comm_parts: list) -> pd.DataFrame:
    parts = []
    for s, reduced in zip(sessions, comm_parts, strict=True):
        agg = merged_points(reduced)
        if agg.empty:
            continue
        parts.append(pd.DataFrame({"session_id": s.session_id, "op": agg["op"], "size_mb": agg["size_mb"],
                                   "busbw_mb_s": agg["median"], "records": agg["size"]}))
    return _concat(parts, Curves().bandwidth)


def curves(sessions: list, scaling: Scaling, comm_parts: list) -> Curves:
    """Every series of the plots (see module doc); ``comm_parts``: each session's ranks' comm
    reductions (``comm_reduce.CommPart``s)."""
    loss, eval_loss, axis = _loss(sessions, scaling)
    return Curves(loss=loss, eval_loss=eval_loss, loss_axis=axis, throughput=_throughput(sessions),
                  gpu_utilization=_gpu_utilization(sessions), bandwidth=_bandwidth(sessions, comm_parts))
