"""What gets logged, how often: the verbosity levels, the settings and their environment
variables, resolved once into one ``LogSettings``."""

from __future__ import annotations

import os
from dataclasses import dataclass, fields, replace

# what an on/off environment variable may say
_SWITCH = {"0": False, "false": False, "no": False, "off": False, "1": True, "true": True, "yes": True, "on": True}
LEVELS = {"DEBUG": 10, "INFO": 20, "WARNING": 30, "WARN": 30, "ERROR": 40, "CRITICAL": 50}


@dataclass(frozen=True)
class LogSettings:
    """Every knob of the emitter. Defaults come from the verbosity level.

    log_interval_steps: a step line in main.log every N steps (the final step always).
    performance_log_steps: a ``performance`` record over the last N steps; 0: only one, at
        session end, over the whole run (``low``: a final statistic, not a periodic record).
    gpu_snapshot_interval: seconds between two closes of the resource sampler's interval
        (0: no sampler, hence no resource findings either).
    snapshot_records: write each interval as a ``gpu_snapshot`` record (mean/min/max of host
        and GPU metrics; ``devices: []`` without a GPU). Off at ``low``, where the sampler still
        runs for the findings (memory high, GPU utilization low, ...) and the summary.
    resource_usage_steps: attach ``resource_usage`` to every Nth step record (0: never): the
        sampler's latest reading (at most ``min(2 s, interval / 5)`` old), a point value; the
        mean/min/max over each interval are in the ``gpu_snapshot`` records.
    step_records_every: write a ``training_step_complete`` every N steps.
    communication_records: one ``communication`` record per bucket (else summary totals only).
    detailed_communication_logs: the ``Communication`` line per sync in multigpu.log.
    comm_log_interval: that line every N steps.
    trends: attach ``trends`` (loss, step time, memory) to step records.
    loss_tensors: the Trainer callback keeps each training micro-batch's loss tensor (a forward hook on the
        model, by reference: no sync) so a NaN/Inf report shows which micro-batch's loss it was. Off at
        ``low``: no hook on the model's forward; a non-finite logged loss is still reported, as logged.
    grad_check: read every gradient before each optimizer step for NaN/Inf (a pass over the
        gradients and one device sync per step: on for ``ultra``, opt-in otherwise). Without it
        a non-finite loss or grad norm still gives the report, from the parameters.
    layer_grad_norms: per-layer gradient norms in step records (``ultra``), read just before
        the optimizer step (after clipping: what the optimizer uses).
    trainer_logs: every trainer log as a ``trainer_log`` record (``ultra``).
    batch_records: a ``batch_complete`` record per micro-batch (``ultra``).
    system_state: the sampler also reads disk and network I/O and host temperatures, so every
        step's ``resource_usage`` carries them (``ultra``: the complete system state).
    main_level / multigpu_level: lowest level written to main.log / multigpu.log
        (``TRAINING_LOG_LEVEL`` / ``MULTIGPU_LOG_LEVEL``; DEBUG in multigpu.log logs every sync).
    stall_factor / stall_min_s: a ``stall`` record (the step, phase and Python stack of the
        training thread) when no step has ended for max(stall_factor x the median step,
        stall_min_s) seconds; ``stall_min_s=0`` turns the stall watch off.
    end_verdict: when a session completes, rank 0 runs the analysis of its folder in a separate
        process (``analyze_logs FOLDER --verdict``, at most ``end_verdict_timeout_s`` seconds) and
        prints the verdict, with the commands that show more, and appends it to summary.txt
        (``trainer_hooks.end_verdict``). ``LOGKIT_END_VERDICT=0`` turns it off, ``=1`` on.
    """

    verbosity: str = "high"
    log_interval_steps: int = 1
    performance_log_steps: int = 10
    gpu_snapshot_interval: float = 10.0
    snapshot_records: bool = True
    resource_usage_steps: int = 1
    step_records_every: int = 1
    communication_records: bool = True
    detailed_communication_logs: bool = True
    comm_log_interval: int = 10
    trends: bool = True
    loss_tensors: bool = True
    grad_check: bool = False
    layer_grad_norms: bool = False
    trainer_logs: bool = False
    batch_records: bool = False
    system_state: bool = False
    stop_on_nan: bool = False
    main_level: str = "INFO"
    multigpu_level: str = "INFO"
    # findings
    memory_high_pct: float = 90.0
    gpu_memory_high_pct: float = 95.0
    gpu_util_low_pct: float = 50.0
    slow_step_factor: float = 3.0
    loss_spike_factor: float = 3.0
    nan_dump_max_bytes: int = 64 * 1024 * 1024
    stall_factor: float = 10.0
    stall_min_s: float = 60.0
    # the verdict at the end
    end_verdict: bool = True
    end_verdict_timeout_s: float = 30.0


VERBOSITY_LEVELS: dict[str, dict] = {
    # milestones only: start/end, epochs, saves, final statistics (one performance record at
    # the end), progress every 50 steps; findings (warnings) are still written
    "low": dict(log_interval_steps=50, performance_log_steps=0, gpu_snapshot_interval=60.0, snapshot_records=False,
                resource_usage_steps=0, step_records_every=50, communication_records=False,
                detailed_communication_logs=False, trends=False, loss_tensors=False),
    # resource usage every 5 steps, performance records, basic trends
    "medium": dict(log_interval_steps=10, performance_log_steps=50, gpu_snapshot_interval=30.0,
                   resource_usage_steps=5, comm_log_interval=50),
    # every step, resource usage each step, trends, warnings, detailed timing (default)
    "high": dict(),
    # everything: batch-level records, every trainer log, per-layer gradient norms, and the
    # complete system state (disk/network I/O, host temperatures) in every step's resource usage
    "ultra": dict(gpu_snapshot_interval=5.0, comm_log_interval=1, grad_check=True, layer_grad_norms=True,
                  trainer_logs=True, batch_records=True, system_state=True),
}


def resolve_settings(verbosity: str = "high", env: dict | None = None, **overrides) -> LogSettings:
    """Verbosity defaults, then the environment, then explicit arguments (None = not given)."""
    if verbosity not in VERBOSITY_LEVELS:
        raise ValueError(f"verbosity must be one of {', '.join(VERBOSITY_LEVELS)}; got {verbosity!r}")
    env = os.environ if env is None else env
    settings = replace(LogSettings(), verbosity=verbosity, **VERBOSITY_LEVELS[verbosity])
    for var, name in (("TRAINING_LOG_LEVEL", "main_level"), ("MULTIGPU_LOG_LEVEL", "multigpu_level")):
        level = str(env.get(var, "")).upper()
        if level in LEVELS:
            settings = replace(settings, **{name: level})
    switch = str(env.get("LOGKIT_END_VERDICT", "")).strip().lower()
    if switch in _SWITCH:
        settings = replace(settings, end_verdict=_SWITCH[switch])
    if settings.multigpu_level == "DEBUG":
        settings = replace(settings, comm_log_interval=1)
    known = {f.name for f in fields(LogSettings)}
    unknown = set(overrides) - known
    if unknown:
        raise TypeError(f"unknown logging settings: {', '.join(sorted(unknown))}")
    given = {k: v for k, v in overrides.items() if v is not None}
    return replace(settings, **given)
