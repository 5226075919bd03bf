"""One session's headline figures: throughput, step rate, final loss, global batch, and what they rest on.

Definitions (``definitions.SCALING``):

- ``samples_per_second``: sum(total_batch_size) / sum(step_time_s) over rank 0's optimizer
  steps: training throughput of the whole job, all ranks together, excluding set-up time.
  When the step lines are sampled (fewer logged steps than the run did: a log interval > 1,
  text-only logs) and the run's own totals are known (summary.json, results.json), the
  totals are used instead; ``basis`` says which (``steps``, ``run totals``, ``sampled steps``).
- ``steps_per_second``: number of optimizer steps / sum(step_time_s) over the same rows (or the
  run's total, as above).
- ``final_loss``: the last logged loss (by step), or the run's final loss when the step lines
  are sampled or no loss was logged.
- ``total_batch_size``: the most common logged global batch (step lines); else the run's; else
  the most common of the performance lines (``Performance | ... | Total batch size: N``);
  else derived as samples/s / steps/s when both are known (``total_batch_size_from`` says so).
  A step row without a batch size counts the session's; without that either, the batch its
  own samples/s and step time imply (a text log's ``Metrics: step_duration, samples_per_second``).
"""

from __future__ import annotations

import pandas as pd

from logkit.analysis.kernels.fabric import host_rows
from logkit.analysis.kernels.groups import session_kind
from logkit.analysis.kernels.strategy import strategy_words
from logkit.analysis.kernels.throughput import throughput
from logkit.analysis.results import SessionSummary
from logkit.ingest.readers.formats import FORMATS
from logkit.schema.meta import Key, SessionMeta
from logkit.schema.values import per_second, to_float, to_int
from logkit.schema.vocab import Basis


def run_totals(session) -> dict:
    """The run's own totals, as the run wrote them at its end: {source, total_steps, final_loss,
    steps_per_second, samples_per_second, total_batch_size} (None where not written)."""
    meta = session.meta
    doc = meta.summary if isinstance(meta.summary, dict) else {}
    formats = set(meta.formats or [])

    def pick(key: Key):  # summary.json's value of the key's name, else meta's; one its domain refuses is unknown
        value = doc.get(key.name)
        value = value if value is not None else getattr(meta, key.name)
        return None if key.why_not(value) else value

    # a run's documents credited in the order of their declarations (results.json, trainer_state.json, ...)
    document = next((f.totals for f in FORMATS.values() if f.totals is not None
                     and (f.name in formats or meta.duration_from == f.totals)), None)
    if doc:
        source = "summary.json"
    elif document is not None:
        source = document
    elif meta.duration_from == "session_end":
        source = "session_end"
    else:
        source = "the run's logged totals"
    return {"source": source, "total_steps": to_int(pick(SessionMeta.total_steps)),
            "final_loss": to_float(pick(SessionMeta.final_loss), finite=True),
            "steps_per_second": to_float(pick(SessionMeta.steps_per_second), finite=True),
            "samples_per_second": to_float(pick(SessionMeta.samples_per_second), finite=True),
            "total_batch_size": to_int(pick(SessionMeta.total_batch_size))}


def samples_seen(session, summary: SessionSummary) -> float | None:
    """Samples the run processed: session_end's samples_seen, else total_steps x total_batch_size."""
    seen = to_float(session.meta.samples_seen, finite=True)
    if seen:
        return seen
    if summary.total_steps and summary.total_batch_size:
        return float(summary.total_steps * summary.total_batch_size)
    return None


def _logged_steps(steps) -> int:
    if steps.empty:
        return 0
    numbered = steps["step"].dropna()
    return int(numbered.nunique()) if len(numbered) == len(steps) else len(steps)


def _last_loss(steps) -> tuple[float | None, int | None]:
    """The last logged finite loss (by step; in log order where steps are not numbered) and its step."""
    rows = steps[steps["loss"].notna()] if not steps.empty else steps
    if rows.empty:
        return None, None
    if rows["step"].notna().all():
        rows = rows.sort_values("step", kind="stable")
    last = rows.iloc[-1]
    return float(last["loss"]), to_int(last["step"])


def _derive_batch(samples_per_second, steps_per_second) -> int | None:
    ratio = per_second(samples_per_second, steps_per_second)  # samples per step
    if ratio is None or ratio < 0.5:
        return None
    return max(1, int(round(ratio)))


def _from_rows(timed: pd.DataFrame, batch: int | None) -> dict:
    b = timed["total_batch_size"].astype("Float64")
    b = b.fillna(batch) if batch is not None else b
    b = b.fillna(timed["samples_per_s"].astype("Float64") * timed["step_time_s"].astype("Float64"))
    return {"steps_per_second": per_second(len(timed), float(timed["step_time_s"].sum())),
            "samples_per_second": throughput(b, timed["step_time_s"].to_numpy())}


def _most_common(values: pd.Series) -> int | None:
    """The most common batch of the rows (the smallest of ties); one that is no count is unknown."""
    common = values.astype("Float64").dropna().mode()
    batch = to_int(common.min()) if len(common) else None
    return None if SessionMeta.total_batch_size.why_not(batch) else batch


def _batch(session, timed: pd.DataFrame, run: dict) -> tuple[int | None, str | None]:
    """The global batch and where it comes from (see module doc)."""
    batch = _most_common(timed["total_batch_size"]) if not timed.empty else None
    batch = batch or run["total_batch_size"]
    if batch:
        return batch, "logged"
    stated = to_int(session.meta.total_batch_size)
    if stated is not None:  # the run's meta: its provenance says how it was known
        return stated, (session.meta.total_batch_size_from or "logged") if stated else "logged"
    batch = _most_common(session.perf["total_batch_size"]) if not session.perf.empty else None
    return (batch, "performance lines") if batch else (None, None)  # a batch of 0 samples is none logged


def _from_totals(out: dict, run: dict, sampled: bool, logged: int, timed: pd.DataFrame) -> None:
    """Figures from the run's own totals (no step times, or sampled step lines), or estimated from
    sampled lines when the run wrote no totals. (Timed steps that are not sampled never come
    here: ``session_summary`` takes them first.)"""
    out["steps_per_second"], out["samples_per_second"] = run["steps_per_second"], run["samples_per_second"]
    if out["samples_per_second"] is None and out["total_steps"] and out["total_batch_size"]:
        out["samples_per_second"] = per_second(out["total_steps"] * out["total_batch_size"], out["duration_s"])
    if out["steps_per_second"] is None:
        out["steps_per_second"] = per_second(out["total_steps"], out["duration_s"])
    have_run = out["samples_per_second"] is not None or out["steps_per_second"] is not None
    if sampled and not have_run and not timed.empty:
        out.update(_from_rows(timed, out["total_batch_size"]), basis=Basis.SAMPLED_STEPS,
                   basis_detail=f"{len(timed)} sampled step line(s) of {run['total_steps']} steps: sum of batch "
                                "sizes / sum of their step times (an estimate)")
    elif have_run:
        why = (f"the step lines are sampled: {logged} of {run['total_steps']} steps logged" if sampled
               else "no step times logged")
        out.update(basis=Basis.RUN_TOTALS, basis_detail=f"run totals from {run['source']} ({why})")


def _final_loss(out: dict, run: dict, sampled: bool, steps: pd.DataFrame) -> None:
    last_loss, last_step = _last_loss(steps)
    if sampled and run["final_loss"] is not None:
        out["final_loss"], out["final_loss_from"] = run["final_loss"], f"{run['source']}; the step lines are sampled"
    elif last_loss is not None:
        out["final_loss"] = last_loss
        out["final_loss_from"] = f"last logged loss, step {last_step}" if last_step is not None else "last logged loss"
    elif run["final_loss"] is not None:
        out["final_loss"], out["final_loss_from"] = run["final_loss"], run["source"]


def session_summary(session, others=()) -> SessionSummary:
    """Headline figures of one session (see module doc).

    ``basis``: ``steps`` (rank 0's timed step rows cover the run), ``run totals`` (the run's own
    summary: no step times, or step lines that are sampled), ``sampled steps`` (sampled step lines
    and no run totals: the figures estimate the run from the lines), or None (nothing logged);
    ``basis_detail`` says it in a sentence. ``logged_steps``: step rows of rank 0.
    """
    meta = session.meta
    steps = session.main_rank_steps()
    timed = session.timed_steps(main_rank=True)
    run = run_totals(session)
    logged = _logged_steps(steps)
    max_step = to_int(steps["step"].max()) if steps["step"].notna().any() else None
    sampled = bool(logged) and run["total_steps"] is not None and logged < run["total_steps"]
    rank = to_int(steps["rank"].min()) if steps["rank"].notna().any() else 0
    batch, batch_from = _batch(session, timed, run)
    out = {"total_batch_size": batch, "total_batch_size_from": batch_from,
           "duration_s": to_float(meta.duration_s, finite=True), "basis": None, "basis_detail": None,
           "final_loss": None, "final_loss_from": None, "steps_per_second": None, "samples_per_second": None}
    if not timed.empty and not sampled:
        out.update(_from_rows(timed, batch), basis=Basis.STEPS, total_steps=max_step if max_step is not None
                   else run["total_steps"],
                   basis_detail=f"rank {rank}'s {len(timed)} timed step(s): sum of batch sizes / sum of step times")
    else:
        out["total_steps"] = run["total_steps"] if run["total_steps"] is not None else max_step
        _from_totals(out, run, sampled, logged, timed)
    if out["total_batch_size"] is None:
        derived = _derive_batch(out["samples_per_second"], out["steps_per_second"])
        if derived is not None:
            out["total_batch_size"], out["total_batch_size_from"] = derived, "derived: samples/s / steps/s"
    _final_loss(out, run, sampled, steps)
    return SessionSummary(
        session_id=meta.session_id, mode=meta.mode, world_size=to_int(meta.world_size),
        gpu_count=to_int(meta.gpu_count), logged_steps=logged, kind=session_kind(session),
        status=meta.status, status_detail=meta.status_detail, model=meta.model,
        start_time=meta.start_time,
        duration_from=meta.duration_from, **out, **{**run_facts(meta), **placement(session, others)})


def placement(session, others=()) -> dict:
    """The session's hosts (``fabric.host_rows``: each with its ranks, local ranks and GPUs), the node
    count where the meta states none but hosts are named, and each host's clock offset to rank 0's."""
    meta, hosts = session.meta, host_rows(session, others)
    out: dict = {"hosts": hosts or None}
    if meta.nodes is None and hosts:
        out["nodes"], out["nodes_from"] = len(hosts), "inferred (lower bound): the hosts the logs name"
    clocks = meta.clock_offsets if isinstance(meta.clock_offsets, dict) else {}
    out["clock_offsets"] = tuple({"host": h, "offset_s": c.get("offset_s"), "uncertainty_s": c.get("uncertainty_s")}
                                 for h, c in sorted(clocks.items()) if isinstance(c, dict)) or None
    return out


def run_facts(meta) -> dict:
    """The run's facts as its meta holds them (each with its ``_from`` and ``facts_source``), for the
    session's summary: the hosts and NICs as names."""
    nics = [f"{n['name']}:{n['port']}/{n['link']}" if n.get("port") is not None else str(n.get("name"))
            for n in meta.nics or [] if isinstance(n, dict)]
    return {"world_size_from": meta.world_size_from, "gpu_count_from": meta.gpu_count_from,
            "nodes": to_int(meta.nodes), "nodes_from": meta.nodes_from, "hosts_from": meta.hosts_from,
            "network": meta.network, "network_from": meta.network_from, "network_fallback": meta.network_fallback,
            "nics": tuple(nics) or None, "nccl_version": meta.nccl_version, "transports": meta.transports or None,
            "framework": meta.framework, "strategy": meta.strategy, "strategy_from": meta.strategy_from,
            "zero_stage": to_int(meta.zero_stage), "facts_source": meta.facts_source or None,
            "strategy_words": strategy_words(meta.strategy, meta.strategy_facts, to_int(meta.zero_stage)),
            "timing_source": meta.timing_source, "timing_note": meta.timing_note}
