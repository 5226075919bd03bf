"""The forecast: from the runs of one comparison group at two or more world sizes, samples/s, step time
and scaling efficiency at the sizes asked, in the regime measured, with an 80% interval.

Definitions (``definitions.FORECAST``):

- a measured point: a session of the group with a steady step time (``throughput.steady_state``):
  ``step_s`` = its steady mean step (steady time / steady steps, the figure its throughput rests on),
  split by the step breakdown where the phases were timed (the ranks' mean of each component's
  median, scaled to sum to ``step_s``): data, compute (forward and backward), exposed
  communication, waiting for the last rank, other (optimizer and host work). A single-rank run has
  no sync: data (its steady steps' median data time) and the rest, which is compute and host work.
- per-rank batch ``b(n)``: strong regime (the global batch ``G`` kept) G / n; weak (the per-rank
  batch kept) the measured one. Compute and data per rank are proportional to it:
  ``compute(n) = k_c b(n)``, ``data(n) = k_d b(n)``, ``k`` the mean over the points of
  component / b (host work, a full replica's optimizer on every rank, stays: ``other(n)`` = its
  mean over the multi-rank points; a single-rank point's compute is its rest less that).
- exposed communication ``comm(n) = t_x f(n)``: ``f`` the bus factor of the sync's collective
  (``schema.collectives``: 2(n-1)/n for an all-reduce, (n-1)/n for a reduce-scatter), ``t_x`` the
  mean over the multi-rank points of exposed / f(m): the bytes per step are the same at every size
  (a data-parallel gradient), so this is bytes / the exposed bus bandwidth, the overlap measured
  kept (``busbw_gb_s`` = bytes x f(m) / exposed, in the basis).
- waiting ``wait(n) = s_w e(n)``: the expected wait of a rank for the last of ``n`` is the spread of
  their arrival times times ``e(n)``, the expected largest of n standard normal draws (e(1) = 0,
  e(2) = 1/sqrt(pi)); ``s_w`` = the mean over multi-rank points of wait / e(m).
- without timed phases at any multi-rank point, a single-rank point gives ``k`` (data and compute
  together) and a multi-rank point's rest (its step less k b(m)) is communication and waiting, not
  told apart, scaled by f(n).
- ``step(n)`` = the sum; ``samples_per_s`` = b(n) n / step(n); ``scaling_efficiency`` = (samples_per_s
  / the baseline's measured samples/s) / (n / the baseline's ranks).
- 80% interval: step(n) +- z sigma (z = 1.2816), sigma^2 = (s_step step(n))^2 + sum over components of
  (u_c x component)^2; ``s_step`` the largest relative standard deviation of a point's steady step
  times (the variation one more run meets; two runs cannot measure the variation between runs),
  ``u`` a component's fit uncertainty: the relative standard deviation of its estimates over the
  points (``FORECAST_MIN_UNCERTAINTY`` at least), communication at least ``FORECAST_COMM_ALLOWANCE``
  when one multi-rank size measured it, and at least (its latency-bound value - its forecast) / z,
  the latency-bound value being the measured sync x (n-1)/(m-1) (a sync of small messages grows
  with the ring's 2(n-1) hops, not with the bus factor; two runs cannot tell which it is), waiting
  ``FORECAST_WAIT_ALLOWANCE``.
  samples/s ``lo`` / ``hi`` = b(n) n / the step's upper / lower bound; the lower bound is never below
  the lower bound of data + compute + host work alone (a step with no sync and no wait at all), whose
  variation is the largest robust spread of a point (slow outliers widen the SD, they make no step faster:
  with the SD a run with one stalled step would give a lower bound near zero, an unbounded ``hi``).
- ``dominant``: the component with the largest share of step(n).
- no forecast (``samples_per_s`` null, the basis says why): fewer than two world sizes, a regime
  neither strong nor weak, a point with fewer than ``FORECAST_MIN_STEPS`` steady steps (too short)
  or a relative step spread above ``FORECAST_MAX_SPREAD`` (too noisy), a global batch that does not
  split over n ranks (strong), or a size past one node (GPU runs: the most GPUs a host's samples show,
  at least the most ranks a run started on a node; without samples ``FORECAST_NODE_GPUS``, assumed)
  when no measured run crossed nodes.
- CPU runs: a size whose ranks x torch threads exceed the host's cores (``system_info``) is forecast as if
  each rank had its own, and its note says they would share them (the contention is not modelled).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from logkit.analysis.kernels.communication import SYNC_OPS
from logkit.analysis.kernels.throughput import steady_state
from logkit.analysis.thresholds import (
    FORECAST_COMM_ALLOWANCE,
    FORECAST_LEVEL,
    FORECAST_MAX_SPREAD,
    FORECAST_MIN_STEPS,
    FORECAST_MIN_UNCERTAINTY,
    FORECAST_NODE_GPUS,
    FORECAST_WAIT_ALLOWANCE,
)
from logkit.schema.collectives import bus_factor_rule
from logkit.schema.vocab import Regime, on_cpu

FORECAST_COLUMNS = ["group", "world_size", "samples_per_s", "lo", "hi", "scaling_efficiency", "dominant", "basis",
                    "regime", "step_s", "step_lo_s", "step_hi_s", "data_s", "compute_s", "comm_s", "wait_s", "other_s",
                    "dominant_share", "comm_share", "global_batch", "measured_sizes", "note"]
COMPONENTS = ("data", "compute", "comm", "wait", "other")
WORDS = {"data": "data loading", "compute": "forward and backward", "comm": "gradient sync",
         "wait": "waiting for the last rank", "other": "optimizer and host work"}


def expected_max_normal(n: int) -> float:
    """E[max of n standard normal draws]: 0 for n = 1, 1/sqrt(pi) for 2 (numerical integral of
    x n phi(x) Phi(x)^(n-1))."""
    if n <= 1:
        return 0.0
    x = np.linspace(-9.0, 9.0, 18001)
    phi = np.exp(-x * x / 2) / math.sqrt(2 * math.pi)
    cdf = 0.5 * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))
    y = x * n * phi * cdf ** (n - 1)
    return float(np.sum((y[1:] + y[:-1]) / 2 * np.diff(x)))


def z_of(level: float) -> float:
    """The standard normal quantile of (1 + level) / 2 (1.2816 for 80%), by bisection on erf."""
    lo, hi = 0.0, 10.0
    for _ in range(100):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if 0.5 * (1 + math.erf(mid / math.sqrt(2))) < (1 + level) / 2 else (lo, mid)
    return (lo + hi) / 2


@dataclass(frozen=True)
class Point:
    """One measured session: its ranks, per-rank batch, steady mean step and its components (seconds;
    None where not measured), the relative spread of its steps and how many steady steps it had."""

    session_id: str
    world_size: int
    per_rank_batch: float
    step_s: float
    spread: float
    steps: int
    data_s: float | None = None
    compute_s: float | None = None  # forward and backward; with ``other_s`` None: the step's rest
    comm_s: float | None = None
    wait_s: float | None = None
    other_s: float | None = None
    sync_bytes: float | None = None  # gradient bytes per step, where the comm records give them
    variation: float | None = None  # relative standard deviation of its steady steps (None: ``spread``)

    @property
    def timed(self) -> bool:
        """Its phases were timed (a multi-rank breakdown)."""
        return self.comm_s is not None


@dataclass(frozen=True)
class Model:
    """The fitted model of one group (see module doc): per-sample compute and data per rank, host work,
    the exposed communication per unit of bus factor, the spread behind the wait, and their
    uncertainties (relative)."""

    regime: str
    global_batch: float | None  # strong: kept; weak: None
    per_rank_batch: float | None  # weak: kept; strong: None
    k_compute: float
    k_data: float
    other_s: float
    comm_unit_s: float  # exposed comm / f(m)
    wait_unit_s: float  # wait / e(m)
    spread: float  # the relative step-time variation the interval carries
    op: str = "gradient_sync"
    comm_at: int = 2  # the largest multi-rank size the sync was measured at
    u: dict = field(default_factory=dict)  # component -> relative uncertainty
    timed: bool = True  # False: comm holds communication and waiting, not told apart
    fast_spread: float | None = None  # the largest robust spread of a point: the floor's variation (None: spread)

    def batch(self, n: int) -> float:
        """The per-rank batch at n ranks."""
        return self.global_batch / n if self.regime == Regime.STRONG else self.per_rank_batch

    def components(self, n: int) -> dict[str, float]:
        """Seconds of each component of a step at n ranks."""
        factor = bus_factor_rule(self.op) or bus_factor_rule("allreduce")
        b = self.batch(n)
        return {"data": self.k_data * b, "compute": self.k_compute * b, "comm": self.comm_unit_s * float(factor(n)),
                "wait": self.wait_unit_s * expected_max_normal(n), "other": self.other_s}

    def latency_bound_comm(self, n: int) -> float:
        """The exposed sync at n ranks if it were all per-hop latency: the measured one x (n-1)/(m-1)."""
        factor = bus_factor_rule(self.op) or bus_factor_rule("allreduce")
        m = self.comm_at
        return self.comm_unit_s * float(factor(m)) * (n - 1) / (m - 1) if m > 1 else 0.0

    def predict(self, n: int, level: float = FORECAST_LEVEL) -> dict:
        """step_s, its interval, samples/s and its interval, and the components at n ranks."""
        parts = self.components(n)
        step = sum(parts.values())
        z = z_of(level)
        sd = {k: self.u.get(k, 0.0) * v for k, v in parts.items()}
        # a latency-bound sync grows with the ring's 2(n-1) hops, not the bus factor: the interval reaches it
        sd["comm"] = max(sd["comm"], (self.latency_bound_comm(n) - parts["comm"]) / z)
        var = (self.spread * step) ** 2 + sum(v ** 2 for v in sd.values())
        half = z * math.sqrt(var)
        samples = self.batch(n) * n
        # the step is never shorter than its work with no sync and no wait at all, at that work's own lower
        # bound (a wide interval's floor, where the sync's uncertainty exceeds the step); that bound varies by
        # the robust spread: slow outliers (a host's hiccup) widen the steps' SD but make no step faster
        work = parts["data"] + parts["compute"] + parts["other"]
        fast = self.spread if self.fast_spread is None else self.fast_spread
        floor = work - z * math.sqrt((fast * work) ** 2 + sum(sd[k] ** 2 for k in ("data", "compute", "other")))
        lo_step, hi_step = max(step - half, floor, 1e-12), step + half
        return {"step_s": step, "step_lo_s": lo_step, "step_hi_s": hi_step, "samples_per_s": samples / step,
                "lo": samples / hi_step, "hi": samples / lo_step, "global_batch": samples, **parts}


def _rel_sd(values: list[float]) -> float:
    """Relative sample standard deviation (0 for fewer than two values or a zero mean)."""
    if len(values) < 2:
        return 0.0
    mean = float(np.mean(values))
    return float(np.std(values, ddof=1) / abs(mean)) if mean else 0.0


def fit(points: list[Point], regime: str, op: str = "gradient_sync") -> Model:
    """The model of ``points`` (two world sizes at least; see module doc)."""
    factor = bus_factor_rule(op) or bus_factor_rule("allreduce")
    multi = [p for p in points if p.world_size > 1]
    timed = [p for p in multi if p.timed]
    other = float(np.mean([p.other_s for p in timed])) if timed else 0.0
    k_c, k_d, comm_units, wait_units = [], [], [], []
    for p in points:
        if p.world_size == 1:
            k_d.append((p.data_s or 0.0) / p.per_rank_batch)
            k_c.append(max(p.compute_s - other, 0.0) / p.per_rank_batch)
        elif p.timed:
            k_d.append(p.data_s / p.per_rank_batch)
            k_c.append(p.compute_s / p.per_rank_batch)
            comm_units.append(p.comm_s / float(factor(p.world_size)))
            m = expected_max_normal(p.world_size)
            wait_units.append(p.wait_s / m)
    if not timed:  # a single-rank run gives the per-sample work; the multi-rank rest is comm and waiting
        for p in multi:
            rest = p.step_s - (np.mean(k_c) + np.mean(k_d)) * p.per_rank_batch
            comm_units.append(max(rest, 0.0) / float(factor(p.world_size)))
    first = points[0]
    u = {"compute": max(_rel_sd(k_c), FORECAST_MIN_UNCERTAINTY), "data": max(_rel_sd(k_d), FORECAST_MIN_UNCERTAINTY),
         "comm": max(_rel_sd(comm_units), FORECAST_COMM_ALLOWANCE if len(comm_units) < 2 else 0.0,
                     FORECAST_MIN_UNCERTAINTY),
         "wait": FORECAST_WAIT_ALLOWANCE, "other": max(_rel_sd([p.other_s for p in timed]), FORECAST_MIN_UNCERTAINTY)}
    return Model(regime=regime,
                 global_batch=first.per_rank_batch * first.world_size if regime == Regime.STRONG else None,
                 per_rank_batch=first.per_rank_batch if regime == Regime.WEAK else None,
                 k_compute=float(np.mean(k_c)) if k_c else 0.0, k_data=float(np.mean(k_d)) if k_d else 0.0,
                 other_s=other, comm_unit_s=float(np.mean(comm_units)) if comm_units else 0.0,
                 wait_unit_s=float(np.mean(wait_units)) if wait_units else 0.0,
                 spread=max(p.spread if p.variation is None else p.variation for p in points), op=op, u=u,
                 timed=bool(timed), comm_at=max((p.world_size for p in multi), default=2),
                 fast_spread=max(p.spread for p in points))


def robust_spread(times: np.ndarray) -> float:
    """1.4826 x MAD / median of ``times`` (relative; 0 for a zero median)."""
    med = float(np.median(times))
    return float(1.4826 * np.median(np.abs(times - med)) / med) if med > 0 else 0.0


def _sync_op(comm: pd.DataFrame) -> str:
    """The collective of the gradient sync the comm table shows (an all-reduce when it shows none)."""
    ops = set(comm["op"].astype(str).str.lower()) if len(comm) else set()
    return next((op for op in SYNC_OPS if op in ops), "gradient_sync")


def _sync_bytes(comm: pd.DataFrame) -> float | None:
    """Gradient bytes a step on the lowest rank: its sync ops' bytes / the steps they were matched to."""
    rows = comm[comm["op"].astype(str).str.lower().isin(SYNC_OPS)] if len(comm) else comm
    if rows.empty:
        return None
    rank = rows["rank"].min()
    mine = rows[rows["rank"] == rank] if pd.notna(rank) else rows
    steps = pd.to_numeric(mine["matched_steps"], errors="coerce").max()
    total = pd.to_numeric(mine["total_bytes"], errors="coerce").sum()
    return float(total / steps) if steps and steps > 0 and total > 0 else None


def measured_point(session, summary, breakdown: pd.DataFrame, comm: pd.DataFrame) -> tuple[Point | None, str | None]:
    """The measured point of ``session`` (its ``SessionSummary``, its rows of the step breakdown and of the
    communication table), or None and why not."""
    n = summary.world_size or 1
    if not summary.total_batch_size:
        return None, f"session {summary.session_id} logs no batch size"
    state = steady_state(session, summary.total_batch_size)
    if state.time is None or state.steady_steps < FORECAST_MIN_STEPS:
        return None, (f"too short: session {summary.session_id} has {state.steady_steps} steady steps "
                      f"(at least {FORECAST_MIN_STEPS} are needed)")
    step = float(state.time.mean())
    spread = robust_spread(state.time)
    if spread > FORECAST_MAX_SPREAD:
        return None, (f"too noisy: the steady steps of session {summary.session_id} vary by {spread:.0%} "
                      f"(robust SD over the median; above {FORECAST_MAX_SPREAD:.0%})")
    prb = summary.total_batch_size / n
    variation = float(np.std(state.time, ddof=1) / step) if len(state.time) > 1 and step > 0 else 0.0
    base = {"session_id": summary.session_id, "world_size": n, "per_rank_batch": prb, "step_s": step,
            "spread": spread, "steps": state.steady_steps, "sync_bytes": _sync_bytes(comm), "variation": variation}
    if len(breakdown):
        cols = ["data_s", "compute_s", "comm_exposed_s", "wait_s", "other_s"]
        means = breakdown[cols].astype("float64").fillna(0.0).mean()
        total = float(means.sum())
        scale = step / total if total > 0 else 1.0
        return Point(**base, data_s=means["data_s"] * scale, compute_s=means["compute_s"] * scale,
                     comm_s=means["comm_exposed_s"] * scale, wait_s=means["wait_s"] * scale,
                     other_s=means["other_s"] * scale), None
    if n == 1:
        rows = session.timed_steps(main_rank=True)
        data = pd.to_numeric(rows["data_time_s"], errors="coerce").iloc[state.warmup_steps:].median()
        data = float(data) if pd.notna(data) else 0.0
        return Point(**base, data_s=data, compute_s=max(step - data, 0.0)), None
    return Point(**base), None


def group_regime(comparisons) -> tuple[str | None, str | None]:
    """The regime of a group's comparisons: strong or weak when every one says so; else None and why."""
    regimes = {c.regime for c in comparisons}
    if regimes == {Regime.STRONG} or regimes == {Regime.WEAK}:
        return regimes.pop(), None
    if not regimes:
        return None, "no comparison in the group"
    said = (f"the comparisons' regimes differ ({', '.join(sorted(map(str, regimes)))})" if len(regimes) > 1
            else f"the regime is {regimes.pop()}")
    return None, f"{said}: a forecast needs the global batch kept (strong) or the per-rank batch kept (weak)"


def node_capacity(sessions) -> tuple[int | None, bool]:
    """(GPUs a node holds, whether that is assumed) for GPU runs; (None, False) for CPU runs (no node limit
    here). The most GPUs one host's samples show (nvidia-smi and the sampler list every GPU of the host),
    at least the most ranks a run started on one node (launchers' local ranks, nproc_per_node: what ran,
    a lower bound of what the node holds); without samples, ``FORECAST_NODE_GPUS`` (assumed) at least."""
    if all(on_cpu(s.meta.mode, s.meta.gpu_count) for s in sessions):
        return None, False
    launched = max([v for s in sessions for v in (s.meta.local_ranks, s.meta.nproc_per_node)
                    if isinstance(v, int) and v > 0] + [1])
    sampled = 0
    for s in sessions:
        gpu = s.gpu
        if len(gpu) and "gpu" in gpu.columns:
            hosts = gpu["host"].astype(str) if "host" in gpu.columns else pd.Series("", index=gpu.index)
            sampled = max(sampled, int(gpu.assign(host=hosts).groupby("host")["gpu"].nunique().max()))
    if sampled:
        return max(sampled, launched), False
    return max(FORECAST_NODE_GPUS, launched), True


def cpu_cores(sessions) -> tuple[int, int] | None:
    """(the host's cores, torch threads a rank) for CPU runs whose ``system_info`` states the cores (the fewest
    any run saw); the threads: those of the run of the most ranks that logged them (a 1-rank run started with
    plain python has torch's default, a thread per core, which says nothing of how a launcher sets up ranks;
    among runs of that size the most), 1 when not logged. None for GPU runs or without the cores."""
    if not all(on_cpu(s.meta.mode, s.meta.gpu_count) for s in sessions):
        return None
    infos = [(s.meta.world_size or 1, s.meta.system_info) for s in sessions if isinstance(s.meta.system_info, dict)]
    cores = [i["cpu_count"] for _, i in infos if isinstance(i.get("cpu_count"), int) and i["cpu_count"] > 0]
    threads = [(n, i["torch_threads"]) for n, i in infos
               if isinstance(i.get("torch_threads"), int) and i["torch_threads"] > 0]
    return (min(cores), max(threads, default=(1, 1))[1]) if cores else None


def _refused(label: str, n: int, reason: str, regime=None, measured: str = "") -> dict:
    return {"group": label, "world_size": n, "samples_per_s": None, "lo": None, "hi": None, "scaling_efficiency": None,
            "dominant": None, "basis": f"no forecast: {reason}", "regime": regime, "measured_sizes": measured,
            "note": reason}


def _basis(model: Model, points: list[Point]) -> str:
    sizes = ", ".join(str(s) for s in sorted({p.world_size for p in points}))
    batch = (f"global batch {model.global_batch:g} kept" if model.regime == Regime.STRONG
             else f"per-rank batch {model.per_rank_batch:g} kept")
    factor = bus_factor_rule(model.op) or bus_factor_rule("allreduce")
    parts = [f"fit on {sizes} ranks ({model.regime}: {batch})",
             f"per rank and sample {model.k_compute * 1e3:.3g} ms compute, {model.k_data * 1e3:.3g} ms data"]
    if model.timed:
        parts.append(f"host work {model.other_s * 1e3:.3g} ms a step")
    m = max(p.world_size for p in points)
    sync = model.comm_unit_s * float(factor(m))
    with_bytes = [p for p in points if p.sync_bytes and p.world_size == m and p.comm_s]
    bw = (f", {with_bytes[0].sync_bytes / 1e6:.3g} MB a step at "
          f"{with_bytes[0].sync_bytes * float(factor(m)) / with_bytes[0].comm_s / 1e9:.3g} GB/s exposed busbw"
          if with_bytes else "")
    what = "gradient sync exposed" if model.timed else "communication and waiting (phases not timed)"
    parts.append(f"{what} {sync * 1e3:.3g} ms at {m} ranks{bw}, x bus factor f(n)/f({m})")
    if model.timed and model.wait_unit_s:
        parts.append(f"waiting {model.wait_unit_s * expected_max_normal(m) * 1e3:.3g} ms at {m} x e(n)/e({m})")
    parts.append(f"{FORECAST_LEVEL:.0%} interval: step spread {model.spread:.1%}, fit "
                 + ", ".join(f"{k} {v:.0%}" for k, v in model.u.items() if v))
    return "; ".join(parts)


def _row(label: str, n: int, model: Model, points: list[Point], base_rate: float | None, base_n: int) -> dict:
    pred = model.predict(n)
    parts = {k: pred[k] for k in COMPONENTS}
    dominant = max(parts, key=parts.get)
    share = parts[dominant] / pred["step_s"]
    comm_share = parts["comm"] / pred["step_s"]
    words = dict(WORDS, comm=WORDS["comm"] if model.timed else "communication and waiting")
    note = f"at {n} ranks, {words[dominant]} becomes {share:.0%} of a step"
    if dominant != "comm" and parts["comm"] > 0:
        note += f"; {words['comm']} {comm_share:.0%}"
    eff = pred["samples_per_s"] / base_rate / (n / base_n) if base_rate else None
    return {"group": label, "world_size": n, "samples_per_s": pred["samples_per_s"], "lo": pred["lo"],
            "hi": pred["hi"], "scaling_efficiency": eff, "dominant": dominant, "basis": _basis(model, points),
            "regime": str(model.regime), "step_s": pred["step_s"], "step_lo_s": pred["step_lo_s"],
            "step_hi_s": pred["step_hi_s"], **{f"{k}_s": parts[k] for k in COMPONENTS},
            "dominant_share": share, "comm_share": comm_share, "global_batch": pred["global_batch"],
            "measured_sizes": ", ".join(str(s) for s in sorted({p.world_size for p in points})), "note": note}


def _group_rows(label, members, by_id, summaries, comparisons, breakdown, comm, sizes) -> list[dict]:
    """The forecast rows of one group (see module doc)."""
    runs = [summaries[sid] for sid in members if summaries[sid].samples_per_second is not None]
    measured_sizes = sorted({r.world_size or 1 for r in runs})
    largest = max(measured_sizes) if measured_sizes else 1
    wanted = list(sizes) if sizes else [2 * largest, 4 * largest]
    shown = ", ".join(map(str, measured_sizes))
    if len(measured_sizes) < 2:
        if not sizes:
            return []
        why = f"one world size measured ({shown or 'none'}): a forecast needs runs at two sizes"
        return [_refused(label, n, why, measured=shown) for n in wanted]
    regime, why = group_regime(comparisons)
    if regime is None:
        return [_refused(label, n, why, measured=shown) for n in wanted]
    points, op = [], "gradient_sync"
    for r in runs:
        sid = r.session_id
        bd = breakdown[breakdown["session_id"] == sid] if len(breakdown) else breakdown
        cm = comm[comm["session_id"] == sid] if len(comm) else comm
        point, why = measured_point(by_id[sid], r, bd, cm)
        if point is None:
            return [_refused(label, n, why, regime, shown) for n in wanted]
        points.append(point)
        if len(cm):
            op = _sync_op(cm)
    if not any(p.timed for p in points) and not any(p.world_size == 1 for p in points):
        why = ("no phases timed and no single-rank run: compute and communication cannot be told apart "
               "(log with trainer_hooks for the step breakdown)")
        return [_refused(label, n, why, regime, shown) for n in wanted]
    model = fit(points, regime, op)
    base = min(runs, key=lambda r: r.world_size or 1)
    base_rate = base.steady_samples_per_second or base.samples_per_second
    capacity, assumed = node_capacity([by_id[p.session_id] for p in points])
    crossed = any((by_id[p.session_id].meta.nodes or 1) > 1 for p in points)
    host = cpu_cores([by_id[p.session_id] for p in points])
    rows = []
    for n in wanted:
        if regime == Regime.STRONG and model.global_batch / n < 1:
            rows.append(_refused(label, n, f"the global batch of {model.global_batch:g} does not split over {n} ranks",
                                 regime, shown))
        elif capacity is not None and n > capacity and not crossed:
            node = f"{capacity} GPUs a node" + (" (assumed: the logs do not say)" if assumed else "")
            rows.append(_refused(label, n, f"the forecast stops at one node: {n} ranks cross a node boundary ({node}) "
                                           "and no run measured the inter-node link", regime, shown))
        else:
            rows.append(_row(label, n, model, points, base_rate, base.world_size or 1))
            if host and n * host[1] > host[0]:  # CPU ranks that would share cores: outside the model, said
                cores, threads = host
                rows[-1]["note"] += (f"; {n} CPU ranks x {threads} thread{'s' if threads > 1 else ''} need {n * threads} "
                                     f"cores, the host has {cores}: they would share them, and the forecast gives each "
                                     "its own")
    return rows


def forecast_table(sessions: list, scaling, breakdown: pd.DataFrame, comm: pd.DataFrame,
                   sizes: tuple[int, ...] | None = None) -> pd.DataFrame:
    """``FORECAST_COLUMNS`` per group with runs at two or more world sizes (any group, when ``sizes`` is
    given) and size asked (default: 2x and 4x the largest measured)."""
    by_id = {s.session_id: s for s in sessions}
    summaries = {s.session_id: s for s in scaling.sessions}
    rows = []
    for g in scaling.groups:
        members = [sid for sid in g.members if sid in by_id and sid in summaries]
        comparisons = [c for c in scaling.comparisons if c.group == g.label]
        rows += _group_rows(g.label, members, by_id, summaries, comparisons, breakdown, comm, sizes)
    return pd.DataFrame(rows, columns=FORECAST_COLUMNS) if rows else pd.DataFrame(columns=FORECAST_COLUMNS)
