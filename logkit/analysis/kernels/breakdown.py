"""Where each rank's step time goes, and which rank the others wait for: from the per-step phases
the emitter times on every rank (``step_phases``: when the step's gradients were ready, how long
the last bucket's all-reduce took), never from step times alone (in DDP the all-reduce makes
every rank's step take the same wall time, so step times cannot show who held the others back).

Definitions (``definitions.BREAKDOWN``), over the steps every rank of the session synchronised:

- ``sync_s`` of a rank and step: its last gradient bucket's all-reduce, launch to completion.
  The rank that arrives last at the sync waits for nobody, so its ``sync_s`` is the exposed
  communication alone; every other rank's is that plus its wait for the last one.
- ``comm_exposed_s`` = min over ranks of ``sync_s`` (communication not hidden behind backward);
  ``wait_s`` = the rank's ``sync_s`` - that minimum (time at the sync waiting for the last rank),
  plus its forward wait (``_forward_wait``: a collective at the start of forward).
- ``data_s`` (the step record's data time), ``compute_s`` (step start to the last bucket ready:
  forward and backward), ``other_s`` = step time - data - compute - sync (optimizer, host work).
- ``step_breakdown``: per (session, rank) the medians of those over the synced steps.
- ``lateness_s`` of a rank and step = the largest ``sync_s`` of the step - the rank's own (how
  much later than the first rank it arrived at the sync), or its step start - the earliest, if
  larger. The last arrival of a step is the rank with the largest lateness, if it came
  ``ARRIVAL_MARGIN`` (of the median step time) after the next (``kernels.straggler.worst_of_steps``).
- stragglers by arrival: the detector of ``kernels/straggler.py`` over each rank's lateness per
  step (``baseline="zero"``): ``last_arrival_share`` = share of the synced steps in which the rank
  was the last arrival; ``score`` = its median lateness / the session's median step time;
  ``p_value`` = the chance a fair draw (1/n per step) makes it last that often, times n. The
  straggler is the rank with the largest score, over ``STRAGGLER_SCORE``, last in at least
  ``STRAGGLER_SHARE`` of the steps, with p_value < ``STRAGGLER_ALPHA`` and a median lateness above
  ``STRAGGLER_NOISE`` x the robust spread of step times. ``cause``: the phase in which it spends
  more than the other ranks (median against the median of theirs): ``data``, ``compute`` (forward
  and backward) or ``host`` (``other_s``), when that excess explains at least ``CAUSE_SHARE`` of
  its lateness; else null.
- ``straggler_calls``, per session of the stragglers table: the basis (``BY_ARRIVAL`` where a
  rank has a ``last_arrival_share``, else ``BY_STEP_TIME``) and, when no rank is a straggler, the
  nearest one: the largest ``last_arrival_share`` (by arrival) or ``vs_fastest`` (by step time,
  with two ranks or more); the first such rank on a tie.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

# the module, not the package: logkit.analysis.results imports this module's columns while it loads
from logkit.analysis.kernels.straggler import detect, worst_of_steps
from logkit.analysis.results.performance import BY_ARRIVAL, BY_STEP_TIME, StragglerCall
from logkit.analysis.thresholds import ARRIVAL_MARGIN, CAUSE_SHARE

BREAKDOWN_COLUMNS = ["session_id", "rank", "steps", "data_s", "compute_s", "comm_exposed_s", "wait_s", "other_s",
                     "step_s"]
ARRIVAL_COLUMNS = ["session_id", "rank", "median_step_s", "vs_fastest", "score", "is_straggler", "cause",
                   "last_arrival_share", "lateness_s", "p_value"]
# the phases a straggler's lateness may come from: (cause, the per-step column)
CAUSES = (("data", "data_s"), ("compute", "compute_s"), ("host", "other_s"))
# what each cause means, and what to do about it
CAUSE_WORDS = {"data": "data loading", "compute": "slower forward/backward", "host": "host work after the sync"}
CAUSE_ADVICE = {
    "data": "give rank {rank}'s DataLoader more workers (num_workers, pin_memory, prefetch_factor) or move its "
            "preprocessing out of the loop",
    "compute": "rank {rank} computes slower than the others: check its GPU's clocks and temperature (nvidia-smi -q "
               "-d PERFORMANCE), a different GPU model, or an uneven share of the batch (sequence lengths)",
    "host": "rank {rank} spends longer between the sync and the step's end (optimizer on the CPU, logging, "
            "checkpoints, a busy host): look at what runs there on that rank only",
}


def synced_steps(session) -> pd.DataFrame:
    """One row per (rank, step) of the steps every rank synchronised: rank, step, data_s, compute_s,
    sync_s, step_s, other_s, comm_exposed_s, wait_s, lateness_s, last (the step's last arrival)."""
    ph = session.phases
    if ph.empty:
        return pd.DataFrame()
    ph = ph.dropna(subset=["rank", "step", "sync_s"]).drop_duplicates(["rank", "step"])
    ranks = ph["rank"].nunique()
    if ranks < 2:
        return pd.DataFrame()
    steps = session.steps.dropna(subset=["rank", "step"]).drop_duplicates(["rank", "step"])
    rows = ph.reindex(columns=["rank", "step", "begin_clock_s", "compute_s", "sync_s"]).merge(
        steps[["rank", "step", "data_time_s", "step_time_s"]], on=["rank", "step"], how="inner")
    rows = rows[rows.groupby("step")["rank"].transform("size") == ranks].rename(
        columns={"data_time_s": "data_s", "step_time_s": "step_s"})
    if rows.empty:
        return rows
    g = rows.groupby("step")["sync_s"]
    rows["comm_exposed_s"] = g.transform("min")
    rows["wait_s"] = rows["sync_s"] - rows["comm_exposed_s"]
    rows["lateness_s"] = g.transform("max") - rows["sync_s"]
    _forward_wait(rows)
    rows["other_s"] = (rows["step_s"] - rows["data_s"].fillna(0) - rows["compute_s"].fillna(0) - rows["wait_s"]
                       - rows["comm_exposed_s"]).clip(lower=0)
    rows["last"] = worst_of_steps(_lateness(rows))
    return rows.drop(columns="begin_clock_s").reset_index(drop=True)


def _forward_wait(rows: pd.DataFrame) -> None:
    """A collective at the start of forward (DDP broadcasts the module's buffers, e.g. rotary
    embeddings' inv_freq) holds a rank that started its step early until the last one starts: that
    wait lands in its compute_s, and the ranks reach the gradient sync together. Per step, with
    ``late_start`` = the last rank's step start - the rank's own (job clock):
    forward wait = clip(compute_s - the last starter's compute_s, 0, late_start), counted above
    ``ARRIVAL_MARGIN`` of the median step (below, it is compute's own noise); it moves from
    compute_s to wait_s, and lateness_s is the larger of the sync's and the start's."""
    if rows["begin_clock_s"].isna().any():
        return
    by_step = rows.groupby("step")["begin_clock_s"]
    late_start = by_step.transform("max") - rows["begin_clock_s"]
    starter = rows.loc[by_step.idxmax()].set_index("step")["compute_s"]
    fwd = (rows["compute_s"] - rows["step"].map(starter)).clip(lower=0).clip(upper=late_start).fillna(0)
    fwd = fwd.where(fwd > ARRIVAL_MARGIN * rows["step_s"].median(), 0.0)  # below: compute's own noise
    rows["compute_s"] -= fwd
    rows["wait_s"] += fwd
    rows["lateness_s"] = np.maximum(rows["lateness_s"], rows["begin_clock_s"] - by_step.transform("min"))


def _lateness(rows: pd.DataFrame) -> pd.DataFrame:
    """The detector's samples: each rank's lateness at the sync per step."""
    return pd.DataFrame({"rank": rows["rank"], "step": rows["step"], "value": rows["lateness_s"],
                         "step_s": rows["step_s"]}, index=rows.index)


def step_breakdown(session, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank of ``session``: ``BREAKDOWN_COLUMNS`` (medians over the synced steps)."""
    rows = synced_steps(session) if rows is None else rows
    if rows.empty:
        return pd.DataFrame(columns=BREAKDOWN_COLUMNS)
    g = rows.groupby("rank", sort=True)
    out = g[["data_s", "compute_s", "comm_exposed_s", "wait_s", "other_s", "step_s"]].median()
    out.insert(0, "steps", g.size())
    out = out.reset_index()
    out["rank"] = out["rank"].astype("int64")
    out.insert(0, "session_id", session.session_id)
    return out[BREAKDOWN_COLUMNS]


def arrival_stragglers(session, rows: pd.DataFrame | None = None) -> pd.DataFrame:
    """Per rank of ``session``: ``ARRIVAL_COLUMNS`` (see module doc); empty without synced steps."""
    rows = synced_steps(session) if rows is None else rows
    if rows.empty:
        return pd.DataFrame(columns=ARRIVAL_COLUMNS)
    found = detect(_lateness(rows), baseline="zero").set_index("rank")
    median_step = rows.groupby("rank", sort=True)["step_s"].median()
    out = pd.DataFrame({"median_step_s": median_step, "lateness_s": found["median_s"],
                        "last_arrival_share": found["worst_share"].astype("float64"), "score": found["score"],
                        "p_value": found["p_value"], "is_straggler": found["is_straggler"].astype(bool)})
    fastest = out["median_step_s"].min()
    out["vs_fastest"] = out["median_step_s"] / fastest if fastest > 0 else np.nan
    out["cause"] = None
    for top in out.index[out["is_straggler"]]:
        out.at[top, "cause"] = straggler_cause(rows, top, float(out.at[top, "lateness_s"]))
    out = out.reset_index()
    out["rank"] = out["rank"].astype("int64")
    out.insert(0, "session_id", session.session_id)
    return out[ARRIVAL_COLUMNS]


def straggler_cause(rows: pd.DataFrame, rank, lateness: float) -> str | None:
    """The phase ``rank`` spends more time in than the other ranks, when that explains its lateness."""
    medians = rows.groupby("rank")[[c for _, c in CAUSES]].median()
    mine, others = medians.loc[rank], medians.drop(index=rank).median()
    excess = {cause: float(mine[col] - others[col]) for cause, col in CAUSES
              if pd.notna(mine[col]) and pd.notna(others[col])}
    if not excess:
        return None
    cause = max(excess, key=excess.get)
    return cause if excess[cause] >= CAUSE_SHARE * lateness and excess[cause] > 0 else None


def with_arrivals(by_step_time: pd.DataFrame, by_arrival: list[pd.DataFrame]) -> pd.DataFrame:
    """The stragglers table: a session's rows by arrival where it has synced steps, else its rows
    by step time (``performance.stragglers``: no cause, no arrival share)."""
    arrived = [f for f in by_arrival if len(f)]
    done = set().union(*(set(f["session_id"]) for f in arrived)) if arrived else set()
    rest = by_step_time[~by_step_time["session_id"].isin(done)].reindex(columns=ARRIVAL_COLUMNS)
    frames = [f for f in (rest, *arrived) if len(f)]
    if not frames:
        return pd.DataFrame(columns=ARRIVAL_COLUMNS)
    out = pd.concat(frames, ignore_index=True)
    out["is_straggler"] = out["is_straggler"].astype(bool)
    return out[ARRIVAL_COLUMNS]


def _nearest(rows: pd.DataFrame, column: str) -> int | None:
    """The rank of the first row with the largest ``column`` (a missing value counts as 0)."""
    rank = rows["rank"].iloc[int(rows[column].astype("float64").fillna(0.0).to_numpy().argmax())]
    return int(rank) if pd.notna(rank) else None


def straggler_calls(strag: pd.DataFrame) -> dict:
    """Per session of the stragglers table (``with_arrivals``): a ``StragglerCall`` (see module doc)."""
    out = {}
    for sid, rows in strag.groupby("session_id", sort=False, dropna=False):
        sid = sid if pd.notna(sid) else None
        none_flagged = not rows["is_straggler"].astype(bool).any()
        if rows["last_arrival_share"].notna().any():
            out[sid] = StragglerCall(sid, BY_ARRIVAL, _nearest(rows, "last_arrival_share") if none_flagged else None)
        else:
            near = _nearest(rows, "vs_fastest") if none_flagged and len(rows) > 1 else None
            out[sid] = StragglerCall(sid, BY_STEP_TIME, near)
    return out
