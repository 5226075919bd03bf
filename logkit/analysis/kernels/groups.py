"""Which sessions are training runs, and which runs may be compared with which.

A comparison of throughput means something only between runs of the same model on the same
data shape: a tiny CPU model against a 7B model on GPUs gives a "speedup" of 0.10x that says
nothing about scaling. So sessions are grouped, and each group has its own baseline.

Definitions (``definitions.SCALING``: kind, group):

- kind: ``gpu_capture`` (nvidia-smi / gpustat captures, monitor_gpu samples), ``nccl_tests`` (an nccl-tests
  benchmark), else ``training`` (a training run's logs, complete or not). Which formats are captures
  and benchmarks, their declarations say (``role``, ``ingest.readers.formats``). Only training runs
  enter the single- vs multi-process comparison.
- group: runs with the same model name (case-insensitive), the same sequence length and the
  same named configuration where they log one. A run that does not log its sequence length
  (or configuration) joins the run(s) of its model that do when they agree on one value; when
  they disagree it stays apart. Runs that log no model name are grouped together (and the
  group says the model is not logged).
"""

from __future__ import annotations

from logkit.ingest.readers.formats import Role, declared
from logkit.schema.vocab import SessionKind

SEQ_KEYS = ("seq_len", "max_seq_length", "max_seq_len", "sequence_length", "max_length", "block_size",
            "context_length")


def session_kind(session) -> SessionKind:
    """``training``, ``gpu_capture`` or ``nccl_tests`` (see module doc)."""
    meta = session.meta
    roles = {declared(name).role for name in meta.formats or []}
    if Role.BENCHMARK in roles or meta.nccl_tests:
        return SessionKind.NCCL_TESTS
    if roles == {Role.GPU_CAPTURE}:  # files of GPU captures alone (their formats' declarations say so)
        return SessionKind.GPU_CAPTURE
    if (session.steps.empty and len(session.gpu) > 0 and meta.status is None
            and not meta.total_steps):
        return SessionKind.GPU_CAPTURE  # GPU samples and nothing of a run: monitor_gpu's output
    return SessionKind.TRAINING


def model_name(session) -> str | None:
    """The model the run trained, as logged (session_start, summary.json, results.json)."""
    value = session.meta.model
    return value.strip() if isinstance(value, str) and value.strip() else None


def _config(session) -> dict:
    cfg = session.meta.config
    return cfg if isinstance(cfg, dict) else {}


def seq_len(session) -> int | None:
    """The sequence length the run logged (meta's seq_len, else its config's), or None."""
    config = _config(session)
    for value in (session.meta.seq_len, *(config.get(key) for key in SEQ_KEYS)):
        if isinstance(value, (int, float)) and not isinstance(value, bool) and value > 0:
            return int(value)
    return None


def config_name(session) -> str | None:
    """A named configuration (a results.json's ``"config": "small"``, or the name a run folder's
    results.json gives our session), or None."""
    for cfg in (session.meta.config, session.meta.config_name):
        if isinstance(cfg, str) and cfg.strip():
            return cfg.strip()
    return None


def _settle(members: list[int], values: dict[int, object]) -> dict[int, object]:
    """Runs without a value take the one value the others agree on; else they keep None."""
    known = {values[i] for i in members if values[i] is not None}
    if len(known) == 1:
        (only,) = known
        return {i: only if values[i] is None else values[i] for i in members}
    return {i: values[i] for i in members}


def group_sessions(sessions: list) -> list[dict]:
    """Training runs in comparison groups, in the order of their first session:
    [{"key": {model, seq_len, config}, "label": str, "members": [index, ...]}]. Non-training
    sessions are in no group."""
    training = [i for i, s in enumerate(sessions) if session_kind(s) == SessionKind.TRAINING]
    by_model: dict[str | None, list[int]] = {}
    for i in training:
        name = model_name(sessions[i])
        by_model.setdefault(name.lower() if name else None, []).append(i)
    groups: dict[tuple, dict] = {}
    for model_key, members in by_model.items():
        seqs = _settle(members, {i: seq_len(sessions[i]) for i in members})
        cfgs = _settle(members, {i: config_name(sessions[i]) for i in members})
        for i in members:
            key = (model_key, seqs[i], cfgs[i])
            if key not in groups:
                name = model_name(sessions[i])
                label = name if name else "model not logged"
                if seqs[i] is not None:
                    label += f", seq len {seqs[i]}"
                if cfgs[i] is not None:
                    label += f", config {cfgs[i]}"
                groups[key] = {"key": {"model": name, "seq_len": seqs[i], "config": cfgs[i]}, "label": label,
                               "members": []}
            groups[key]["members"].append(i)
    return sorted(groups.values(), key=lambda g: g["members"][0])
