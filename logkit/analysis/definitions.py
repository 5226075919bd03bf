"""Every figure's definition, once: what the reports print under each table and the JSON carries.

Keys are the figures' names as the results and the JSON name them; thresholds come from
``thresholds.py``, so a definition states the number the code applies.
"""

from __future__ import annotations

from logkit.analysis import thresholds as _th
from logkit.analysis.thresholds import (
    ARRIVAL_MARGIN,
    CAUSE_SHARE,
    CI_LEVEL,
    FORECAST_COMM_ALLOWANCE,
    FORECAST_LEVEL,
    FORECAST_MAX_SPREAD,
    FORECAST_MIN_STEPS,
    FORECAST_MIN_UNCERTAINTY,
    FORECAST_WAIT_ALLOWANCE,
    MAX_BLOCKS,
    MIN_R2,
    N_BOOT,
    NEAR_PEAK,
    REACH,
    SLOW_FACTOR,
    STRAGGLER_ALPHA,
    STRAGGLER_NOISE,
    STRAGGLER_SCORE,
    STRAGGLER_SHARE,
    WARMUP_TOLERANCE,
)

SCALING: dict[str, str] = {
    "samples_per_second": "sum of total_batch_size / sum of step_time_s over rank 0's optimizer steps "
                          "(whole-job training throughput, set-up excluded); the run's totals (summary.json, "
                          "results.json) when the step lines are sampled; 'basis' says which",
    "steps_per_second": "optimizer steps / sum of step_time_s over rank 0's steps (or the run's totals, as for "
                        "samples_per_second)",
    "final_loss": "the last logged loss (by step); the run's final loss when the step lines are sampled",
    "total_batch_size": "the logged global batch (samples per optimizer step); derived as samples/s / steps/s "
                        "when only those are known",
    "speedup": "candidate samples/s / baseline samples/s (throughput ratio), on the steady state (warm-up "
               "left out) when both runs logged step times, else over the whole run; 'basis' says which",
    "scaling_efficiency": "speedup / (candidate ranks / baseline ranks), on the same basis as speedup",
    "regime": "strong: same global batch; weak: same per-rank batch; mixed: neither",
    "step_rate_ratio": "candidate steps/s / baseline steps/s, on the same basis as speedup",
    "group": "runs compared with each other: same model name, same sequence length and same named "
             "configuration where logged; each group has its own baseline (fewest ranks, then earliest start)",
    "kind": "training: a training run's logs; gpu_capture: nvidia-smi/gpustat capture, or GPU samples with no "
            "training steps (monitor_gpu); nccl_tests: an nccl-tests benchmark. Only training runs are compared",
    "whole_run_speedup": "candidate samples/s / baseline samples/s over every step (warm-up included), or from "
                         "the runs' totals",
    "warmup_steps": "leading steps before the first window of steps whose median step time is within "
                    f"max({WARMUP_TOLERANCE:.0%}, 3 robust SD) of the median of the run's second half (at most half "
                    "the run)",
    "steady_samples_per_second": "samples_per_second over the steps after warm-up",
    "steady_speedup": "candidate steady samples/s / baseline steady samples/s (warm-up excluded)",
    "steady_scaling_efficiency": "steady_speedup / (candidate ranks / baseline ranks)",
    "speedup_ci": f"{CI_LEVEL:.0%} block-bootstrap interval of steady_speedup ({N_BOOT} resamples of up to "
                  f"{MAX_BLOCKS} blocks of consecutive steps per run)",
    "samples_seen": "session_end samples_seen, else total_steps x total_batch_size",
    "serial_fraction": "Amdahl fit speedup(p) = 1 / (s + (1 - s) / p), p = ranks / baseline ranks, least "
                       "squares on 1/speedup - 1/p = s (1 - 1/p) over a group's headline speedups",
    "karp_flatt": "experimentally determined serial fraction e = (1/speedup - 1/p) / (1 - 1/p)",
    "predicted": "Amdahl speedup over the baseline at 2x and 4x the largest world size measured; none when a "
                 f"point is superlinear, the serial fraction comes out negative, or R² < {MIN_R2:g}",
    "r2": "coefficient of determination of the Amdahl fit on the speedups (baseline = 1 included)",
    "flags": "slowdown: speedup < 1; superlinear: speedup > rank ratio (headline speedup); only for more ranks "
             "than the baseline (runs with equal rank counts are compared, not judged for scaling)",
    "group_average": "per comparison group, over its single-rank (or multi-rank) runs compared: the arithmetic "
                     "mean of their whole-run steps/s and samples/s, and the mean avg_util over all their GPUs",
    "per_rank_batch": "the baseline's total_batch_size / its world_size (the batch each rank keeps in weak scaling)",
    "on_cpu": "the run says it had no GPU (gpu_count 0, or mode CPU / MULTI-CPU); unknown when it logs neither "
              "a GPU count nor such a mode",
}

COMMUNICATION: dict[str, str] = {
    "count": "communication records of that op on that rank",
    "total_bytes / mean_bytes": "sum / mean of size_bytes per op on the rank; MB = 10^6 bytes",
    "p50_ms / p95_ms": "median / 95th percentile of duration_ms",
    "algbw_mb_s": "median over records of bytes moved by one rank / duration (MB/s, SI)",
    "busbw_mb_s": "median over records of algbw x 2(n-1)/n (all-reduce, gradient_sync), (n-1)/n (all-gather, "
                  "reduce-scatter, all-to-all), 1 (broadcast, reduce); derived from algbw where not logged "
                  "(busbw_from), n = ranks in the collective",
    "sync_share_of_step_time": "over steps with both this op and a step time on the rank: sum of the op's "
                               "durations in each step (at most that step's time: buckets in flight together "
                               "overlap) / sum of those steps' step_time_s, so never above 100% of wall time; "
                               "gradient buckets overlap backward compute, so this is an upper bound of exposed "
                               "communication",
    "pct_of_peak": "busbw / the link's reference peak bus bandwidth x 100 (peaks.COMMUNICATION_PEAKS)",
    "latency_bound": "mean message smaller than alpha x peak (where the link's alpha-beta model "
                     "t(m) = alpha + m / peak reaches half of peak) and busbw below "
                     f"{NEAR_PEAK:.0%} of peak",
    "verdict": f"bandwidth-bound: busbw >= {NEAR_PEAK:.0%} of the link's peak; latency-bound: small messages "
               "(< alpha x peak) and below that; below peak: large messages yet below that (topology, PCIe, "
               "NCCL settings); no reference: no peak for this link (gloo, CPU, several hosts)",
    "phase": "the phases the op's records name (FSDP collectives: forward, backward), as the emitter logged them",
    "role": "what the op does in the run's strategy (DDP, FSDP, DeepSpeed ZeRO): kernels.strategy.op_role",
    "scope": "inter-node when the collective's ranks cannot all be on one host (the session spans several and "
             "the group is the world or larger than any host's ranks), intra-node when the session has one node, "
             "None where a sub-group's ranks are not known (kernels.fabric.scope_of), and for a group of one rank, "
             "whose collectives cross no link (link 'none', no peak)",
    "transport": "what the bytes travel over, strongest evidence first: the backend (gloo/TCP), NCCL's "
                 "environment, the network NCCL's INFO lines name, the channels' transports, the host's InfiniBand "
                 "devices, the GPU model's link (kernels.fabric.transport_of)",
    "peak_busbw_gb_s / peak_source": "the achievable (not line-rate) bus bandwidth of the row's link or network "
                                     "and where the figure comes from (kernels.peaks); none, and why, where the "
                                     "network is not known: never the GPUs' link for a collective across hosts",
    "summary_count": "the run's own count of the op (summary.json) where the log lines sample the operations",
    "busbw_at_max_size_gb_s": "nccl-tests: busbw (GB/s) at the largest message size of the sweep",
    "size_at_80pct_bytes": f"nccl-tests: the smallest message size at which busbw reaches {REACH:.0%} of the "
                           "sweep's maximum",
    "avg_busbw_gb_s": "nccl-tests' own '# Avg bus bandwidth': the mean busbw over every size of its table "
                      "(small sizes included, so far below the large-message figure)",
}

PERFORMANCE: dict[str, str] = {
    "step_p50_s / p95 / max": "median / 95th percentile / max of step_time_s over the rank's steps",
    "slow_steps": f"steps after the rank's warm-up with step_time_s > {SLOW_FACTOR:g} x the rank's median step time",
    "data_share": "sum of data_time_s / sum of step_time_s over the rank's steps that logged both",
    "rank samples_per_s": "the rank's samples / its time: sum over its timed steps of total_batch_size (a step "
                          "without one: its logged samples/s x step_time_s) / sum of their step_time_s",
    "vs_fastest": "the rank's median step time / the fastest rank's median step time",
    "score": "where the gradient sync was timed per step (step_phases): the rank's median lateness_s / the "
             "median step time; else vs_fastest - 1",
    "is_straggler": "one detector over a metric per rank and step (kernels/straggler.py): the rank's lateness_s "
                    "where the gradient sync was timed per step, else its step time. The straggler is the rank with "
                    f"the largest score when: score > {STRAGGLER_SCORE:g}; it was the step's worst (last arrival, or "
                    f"slowest rank, by more than {ARRIVAL_MARGIN:.0%} of the median step time) in >= "
                    f"{STRAGGLER_SHARE:.0%} of the steps every rank logged; p_value < {STRAGGLER_ALPHA:g}; and its "
                    "median lateness (or its median step time - the fastest rank's) exceeds "
                    f"{STRAGGLER_NOISE:g} x the robust standard deviation (1.4826 x MAD) across steps of the "
                    "per-step median step time. At most one per session",
    "p_value": "the chance that a fair draw, each of the n ranks the worst of a step with probability 1/n, makes "
               "the rank the worst in as many of the steps as it was (binomial tail), times n (Bonferroni: the "
               "candidate is picked among n ranks), at most 1",
    "avg_util / peak_util": "mean / max of utilization_pct over the GPU snapshots",
    "avg_memory_pct": "mean of memory used / memory total x 100 over the snapshots",
    "mfu": "achieved FLOP/s per GPU / the GPU's dense BF16 peak; FLOPs per token = 4 N + 2 N_trainable "
           "(forward 2N, activation gradients 2N, weight gradients 2 N_trainable: LoRA-aware), "
           "tokens/s of the whole job over steady steps, divided among world_size GPUs",
    "training_mfu": "mfu of the training runs only (a GPU capture or an nccl-tests benchmark has no model)",
    "straggler_basis": "stragglers judged by arrival at the gradient sync (last_arrival_share, score) where the "
                       "per-step phases were timed, else by step time (vs_fastest); with no straggler, the nearest "
                       "rank: the one last to the sync in the most steps, or the slowest",
}

BREAKDOWN: dict[str, str] = {
    "sync_s": "a rank's last gradient bucket's all-reduce in a step, launch to completion (device time on GPUs)",
    "data_s": "median over the synced steps of data_time_s: previous step end to this step's start",
    "compute_s": "median over the synced steps of the time from the step's start to its last gradient bucket "
                 "ready (forward and backward), less its forward wait",
    "forward wait": "a collective at the start of forward (DDP broadcasts module buffers) holds a rank that "
                    "started its step early until the last rank starts: per step, the rank's compute time - the "
                    "last starter's, clipped to [0, how much later the last rank started] (job clock), counted above "
                    f"{ARRIVAL_MARGIN:.0%} of the median step time",
    "comm_exposed_s": "median over the synced steps of the smallest sync_s among the ranks: the all-reduce after "
                      "backward, which no compute hides (the last rank to arrive waits for nobody)",
    "wait_s": "median over the synced steps of the rank's sync_s - the smallest (its wait at the gradient sync "
              "for the last rank to arrive) + its forward wait",
    "other_s": "median over the synced steps of step time - data - compute - wait - exposed sync: the optimizer and host "
               "work between the sync and the step's end",
    "lateness_s": "median over the synced steps of the larger of: the step's largest sync_s - the rank's (how "
                  "much later than the first rank it reached the sync) and the rank's step start - the earliest "
                  "(job clock)",
    "last_arrival_share": "share of the synced steps in which the rank had the largest lateness, by more than "
                          f"{ARRIVAL_MARGIN:.0%} of the median step time (the rank the others waited for); a "
                          "straggler (is_straggler) is last in a share a fair draw rarely gives (p_value)",
    "cause": "the straggler's phase (data: data_s, compute: compute_s, forward and backward, host: other_s) whose median exceeds the "
             f"other ranks' median by the most, when that excess is >= {CAUSE_SHARE:.0%} of its lateness; "
             "null otherwise",
    "synced steps": "steps every rank of the session synchronised and timed (step_phases records, written when "
                    "the DDP gradient sync is timed)",
}

HEALTH: dict[str, str] = {
    "nan_steps": "steps with a logged +-inf loss or grad_norm, a nan_detected event, or a nan_loss/nan_grad "
                 "anomaly",
    "divergence": "smoothed final loss above the smoothed minimum by > 25% of the run's drop (and > 1% of the "
                  "minimum), or the last K losses all rising (K = clip(n/10, 3, 100))",
    "loss_parity": "curves aligned by samples seen (step x total_batch_size), candidate interpolated onto the "
                   "baseline's points in the overlap; final_loss_diff = candidate - baseline",
}

FINDINGS: dict[str, str] = {
    "severity": "critical > error > warning > info; findings are listed in that order",
    "severity_counts": "the number of findings of each severity, every severity listed, the most severe first",
}

HANG: dict[str, str] = {
    "waiting_ranks": "hang: ranks whose last record (stall, error, session_end) says they were in a gradient sync, "
                     "ranks the watchdog saw time out in a collective, and ranks a Flight Recorder dump shows at "
                     "their process group's last collective; solo_work occurrence: every rank but the one that "
                     "worked alone",
    "culprit_ranks": "ranks that never reached the collective the others waited in: their last phase is before "
                     "it (streams), their last enqueued work is below the SeqNum the others timed out at "
                     "(watchdog), or their last collective in a process group is below the group's last (Flight "
                     "Recorder dumps)",
    "hang": "a finding when culprits are named (critical), or, naming none, when a stall record exists or a rank "
            "of a run that did not complete ends waiting in a sync (error)",
    "culprit_phases": "hang: {rank: phase} for each culprit in a phase outside the steps (eval, save, a name of the "
                      "code's own) when it hung, from its unended phase_begin record, a record's phase, or its stall "
                      "stack of the same step (saving or evaluation code); absent where no culprit was in one",
    "last_seen_phase": "nccl_timeout: {rank, phase} of the rank a console's save or evaluation line last saw (an "
                       "unprefixed line: rank 0, the process that prints) when it is not among the ranks that timed "
                       "out: the work it was doing alone while they waited",
}

# the ledger of where a session's hours went (issue 27; kernels/ledger.py)
LEDGER: dict[str, str] = {
    "ledger_wall_s": "the first process start of the session's ranks to the last session_end (job clock); a log of "
                     "another format: its train_runtime",
    "ledger_seconds": "the wall split by category, the mean over ranks of each rank's split of the session's span "
                      "(before a rank's own start: its start-up; after its own end: waiting for the ranks); the "
                      "categories add up to the wall; times the rank count they are rank-hours",
    "ledger_startup": "the process's start to its first step (imports, model load, quantisation, the first batch)",
    "ledger_rest": "what no record explains: after the last step not taken by a timed phase, stretches no step "
                   "record covers, and phases of other names",
}

# issue 27: the forecast and the counterfactual (kernels/forecast.py, kernels/counterfactual.py)
FORECAST: dict[str, str] = {
    "forecast": "from the runs of one group at two or more world sizes, in the regime measured (strong: the global "
                "batch kept, per-rank batch b(n) = G/n; weak: b kept): step(n) = data + compute (each per sample "
                "per rank x b(n), fitted over the runs) + host work (kept) + exposed gradient sync (measured at m "
                "ranks x f(n)/f(m), f the collective's bus factor: 2(n-1)/n for an all-reduce, the overlap measured "
                "kept) + waiting (measured x e(n)/e(m), e(n) the expected largest of n normal draws); samples_per_s "
                "= b(n) n / step(n); scaling_efficiency against the group's baseline",
    "forecast interval": f"{FORECAST_LEVEL:.0%}: step(n) +- {FORECAST_LEVEL:.0%}-quantile x sigma, sigma^2 = (the "
                         "largest relative standard deviation (SD / mean) of a measured run's steady steps x "
                         "step(n))^2 + the "
                         "components' fit uncertainties (spread of their estimates over the runs, at least "
                         f"{FORECAST_MIN_UNCERTAINTY:.0%}; gradient sync at least {FORECAST_COMM_ALLOWANCE:.0%} when "
                         f"one size measured it; waiting {FORECAST_WAIT_ALLOWANCE:.0%}) x each component, squared; "
                         "lo / hi = the samples/s at the step's upper / lower bound (the lower never below the lower bound "
                         "of data + compute + host work alone: no sync, no wait, its variation the largest robust spread: slow "
                         "outliers make no step faster)",
    "dominant": "the component with the largest share of the forecast step",
    "cpu ranks past the cores": "CPU runs: a forecast size whose ranks x torch threads (those of the run of "
                                "the most ranks: a 1-rank run's torch default, a thread per core, says nothing of "
                                "launched ranks) exceed the host's cores (system_info) is forecast with a core for "
                                "each rank; its note says they would share them",
    "no forecast": f"fewer than two world sizes, a regime neither strong nor weak, a run with fewer than "
                   f"{FORECAST_MIN_STEPS} steady steps (too short) or steps varying by more than "
                   f"{FORECAST_MAX_SPREAD:.0%} (1.4826 MAD / median: too noisy), a global batch that does not "
                   "split, or (GPU runs) a size past one node when no run measured the inter-node link",
    "counterfactual": "the group's headline run (most ranks) against its baseline: its samples (samples_seen, "
                      "else steps x global batch) at the baseline's rate and at its own, in hours; gpu_hours = "
                      "hours x ranks (rank-hours on CPU); cost = gpu_hours x --gpu-hour-price; each forecast size "
                      "at its forecast rate, with its gpu_hours / the run's (gpu_hours_ratio) and the run's hours / "
                      "its hours (speed_ratio)",
}

# issue 25: work one rank does alone while the others wait in the next collective (findings/solo_work.py)
SOLO_WORK: dict[str, str] = {
    "solo_work": f"a step whose last arrival kept every other rank waiting at its collectives, each above its own "
                 f"median wait, by more than {_th.SOLO_WORK_STEP_SHARE:.0%} of the median step, "
                 f"{_th.SOLO_WORK_NOISE:g} robust SD of the ranks' lateness and {_th.SOLO_WORK_MIN_S:g} s, when the "
                 f"last rank's own work before it explains {_th.SOLO_WORK_EXPLAINED:.0%} of that wait: its timed "
                 "phases after the step before (eval, save, ...) less the other ranks' time in the same phases, or "
                 "else its time between the steps above its median and not in a phase, less the median of the other "
                 "ranks' same time at that step (an unrecorded gap, at least "
                 f"{_th.SOLO_GAP_MIN_S:g} s)",
    "solo_rank": "solo_work: the rank that worked alone (one finding per such rank)",
    "occurrences": "solo_work: every step at which that rank worked alone, each with rank, step (of the collectives "
                   "waited in), after_step, what, ops, solo_s, waited_s, waited_max_s, waiting_ranks",
    "after_step": "solo_work occurrence: the step completed before the work alone (its phases carry it); None: "
                  "work before the first step",
    "what": "solo_work occurrence: the names of the timed phases that explain the wait; empty: an unrecorded gap",
    "ops": "solo_work occurrence: the collective the others waited in, the first of a step in the run's strategy "
           "(kernels.strategy.first_collective); nccl_timeout: the operations the timed-out ranks name",
    "solo_s": "solo_work occurrence: the seconds of work alone: its phases' time less the median of the other "
              "ranks' time in the same phases after the same step, or its unrecorded gap less the median of the "
              "other ranks' gaps at that step (each gap above the rank's median, less its phases)",
    "waited_s": "solo_work: at the finding's top, the sum over its occurrences of each occurrence's waited_s; in an "
                "occurrence, the least wait of the waiting ranks at that step, each less its own median wait "
                "(every other rank waited at least that)",
    "waited_max_s": "solo_work occurrence: the most any waiting rank waited at that step, less its own median wait",
}

DEFINITIONS: dict[str, str] = {**SCALING, **COMMUNICATION, **PERFORMANCE, **BREAKDOWN, **HEALTH, **FINDINGS, **HANG,
                               **LEDGER, **FORECAST, **SOLO_WORK}
