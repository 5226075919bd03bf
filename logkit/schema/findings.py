"""Findings: their severities, and every kind a finding can have, declared once.

``FindingKind`` holds them all: the kinds the emitter's checks write as the ``kind`` of an
``anomaly`` or ``resource_warning`` record (``EMITTER_KINDS``, with the title and severity
``analyze_logs --diagnose`` gives them), the non-finite kinds (``NONFINITE_KINDS``), the notes the
emitter writes about itself (``EMITTER_NOTES``), and the kinds of the analysis' findings (from what
the logs say, from the figures, from the live view). A member is the string a finding carries as
its ``kind`` (``vocab.Word``). ``Severity`` is ordered: ``Severity.CRITICAL > Severity.ERROR >
Severity.WARNING > Severity.INFO``.

    >>> sorted([Severity.INFO, Severity.CRITICAL, Severity.WARNING], reverse=True)[0].value
    'critical'
    >>> Severity.parse("high") is Severity.ERROR, FindingKind.SLOW_STEP.severity.value
    (True, 'warning')
    >>> FindingKind("nccl_timeout") is FindingKind.NCCL_TIMEOUT, FindingKind.NCCL_TIMEOUT == "nccl_timeout"
    (True, True)
"""

from __future__ import annotations

import enum

from logkit.schema.vocab import EventKind, FlagKind, Word

__all__ = ["Severity", "SEVERITIES", "FindingKind", "EMITTER_KINDS", "NONFINITE_KINDS", "EMITTER_NOTES",
           "SCALING_FLAG_KINDS"]


class Severity(enum.Enum):
    """How bad a finding is; ordered (a worse severity compares greater)."""

    CRITICAL = "critical"
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"

    @property
    def rank(self) -> int:
        """0 for critical ... 3 for info: the order findings are listed in."""
        return _ORDER.index(self)

    def __lt__(self, other: Severity) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank > other.rank

    def __le__(self, other: Severity) -> bool:
        return self == other or self < other

    def __gt__(self, other: Severity) -> bool:
        if not isinstance(other, Severity):
            return NotImplemented
        return self.rank < other.rank

    def __ge__(self, other: Severity) -> bool:
        return self == other or self > other

    @classmethod
    def parse(cls, text) -> Severity:
        """A severity from its name (any case; high/medium/low read as error/warning/info)."""
        if isinstance(text, Severity):
            return text
        name = str(text or "").strip().lower()
        return cls(_ALIASES.get(name, name))


_ORDER = (Severity.CRITICAL, Severity.ERROR, Severity.WARNING, Severity.INFO)
_ALIASES = {"high": "error", "medium": "warning", "low": "info"}
SEVERITIES: tuple[str, ...] = tuple(s.value for s in _ORDER)




class FindingKind(Word):
    """A kind of finding: the string its findings carry (``kind``), how ``--diagnose`` titles it, its
    severity where the kind fixes one (None: the finding sets it from what it found), and what it
    means for the run (for a problem a log line names: what to do)."""

    def __new__(cls, value: str, title: str, severity: Severity | None, meaning: str):
        kind = str.__new__(cls, value)
        kind._value_ = value
        kind.title, kind.severity, kind.meaning = title, severity, meaning
        return kind

    # --- the emitter's checks: the kind of an anomaly / resource_warning record -----------------
    SLOW_STEP = ("slow_step", "Slow steps reported by the run", Severity.WARNING,
                 "steps far slower than the run's recent median (the emitter's check)")
    GPU_UTIL_LOW = ("gpu_util_low", "Low GPU utilization reported by the run", Severity.WARNING,
                    "a GPU's utilization fell below the threshold: input pipeline, small batch, or waiting on other "
                    "ranks")
    MEMORY_HIGH = ("memory_high", "Host memory high", Severity.WARNING,
                   "host memory above the threshold: swapping or the OOM killer are next")
    GPU_MEMORY_HIGH = ("gpu_memory_high", "GPU memory high", Severity.WARNING,
                       "GPU memory above the threshold: an out-of-memory error is close (fragmentation, a longer "
                       "batch)")
    LOSS_SPIKE = "loss_spike", "Loss spikes", Severity.WARNING, "losses far above the recent median"
    GRAD_EXPLODE = ("grad_explode", "Exploding gradients", Severity.WARNING,
                    "a layer's gradient norm jumped above 10x its recent median while carrying at least its share of "
                    "the step's gradient: harmless once; when it repeats or the loss follows, lower the learning "
                    "rate, clip gradients, check the data")
    GRAD_VANISH = ("grad_vanish", "Vanishing gradients", Severity.WARNING,
                   "gradient norms below the threshold: layers stop learning")
    # --- non-finite values: the kind of an anomaly / nan_detected record (the NaN finding counts them)
    NAN_LOSS = "nan_loss", "NaN/Inf", Severity.ERROR, "the logged loss is NaN"
    NAN_GRAD = "nan_grad", "NaN/Inf", Severity.ERROR, "a gradient holds NaN"
    NAN_GRAD_NORM = "nan_grad_norm", "NaN/Inf", Severity.ERROR, "the gradient norm is NaN"
    INF_LOSS = "inf_loss", "NaN/Inf", Severity.ERROR, "the logged loss is infinite"
    INF_GRAD = "inf_grad", "NaN/Inf", Severity.ERROR, "a gradient holds Inf"
    INF_GRAD_NORM = "inf_grad_norm", "NaN/Inf", Severity.ERROR, "the gradient norm is infinite"
    NAN = ("nan", "NaN/Inf", Severity.ERROR, "non-finite loss, gradients or tensors (a record of either kind, or "
           "a text log's NaN report); the finding counts every point")
    # --- notes the emitter writes about itself (resource_warning / error kinds), not findings of the run
    SAMPLING_DEGRADED = ("sampling_degraded", "Sampling degraded", None,
                         "the resource sampler lost a source (NVML, psutil) or fell behind")
    COMM_TIMINGS_DROPPED = ("comm_timings_dropped", "Communication timings dropped", None,
                            "gradient-sync timings the logger could not keep up with were dropped")
    COMM_NOT_TIMED = ("comm_not_timed", "Communication not timed", None,
                      "the gradient sync could not be timed (no DDP model, or its hook could not be installed)")
    EXIT_BEFORE_END = ("exit_before_end", "Session not ended", Severity.ERROR,
                       "the process exited without ending its session (the logger ended it as failed)")
    # --- from what the logs say (analysis.findings.log_findings; the live view) ------------------
    NCCL_TIMEOUT = (EventKind.NCCL_TIMEOUT.value, "NCCL communication timeout", Severity.CRITICAL,
                    "a collective did not finish in time: a rank crashed, hung or took another code path, or the "
                    "network stalled; check every rank's last lines, NCCL_DEBUG=INFO output and the timeout setting")
    COLLECTIVE_MISMATCH = (EventKind.COLLECTIVE_MISMATCH.value, "Collective mismatch", Severity.CRITICAL,
                           "ranks called different collectives: diverging code paths")
    CUDA_OOM = (EventKind.CUDA_OOM.value, "Out of memory", Severity.CRITICAL,
                "lower the per-device batch, enable gradient checkpointing, or shard optimizer state")
    CHILD_FAILED = (EventKind.CHILD_FAILED.value, "Child processes failed", Severity.ERROR,
                    "worker processes exited with an error: the first failure is the root cause")
    KILLED_BY_SIGNAL = ("killed_by_signal", "Processes killed by a signal", Severity.CRITICAL,
                        "a signal whose cause the log cannot show (SIGKILL, SIGSEGV, SIGBUS): look at the host")
    WATCHDOG_HANG = (EventKind.WATCHDOG_HANG.value, "NCCL watchdog hang", Severity.CRITICAL,
                     "the NCCL watchdog itself hung: a collective never completed and could not be aborted")
    NCCL_ERROR = (EventKind.NCCL_ERROR.value, "NCCL error", Severity.CRITICAL,
                  "an NCCL call failed: a peer died, a system call failed, or the ranks disagree")
    DISTRIBUTED_INIT_FAILED = ("distributed_init_failed", "Distributed initialisation failed", Severity.CRITICAL,
                               "the ranks could not form a process group: MASTER_ADDR/MASTER_PORT, firewall, or a "
                               "rank that never started")
    NETWORK_ERROR = ("network_error", "Network errors between ranks", Severity.ERROR,
                     "a peer went away or the network between hosts failed")
    GRAD_CLIPPED = ("grad_clipped", "Gradient norm above max_grad_norm", Severity.INFO,
                    "the gradients were clipped; frequent clipping with a rising norm precedes divergence")
    NCCL_WARN = (EventKind.NCCL_WARN.value, "NCCL warnings", Severity.WARNING,
                 "NCCL reported warnings (transport or network set-up)")
    LOGGER_ERROR = (EventKind.LOGGER_ERROR.value, "Problems of the logger itself", Severity.WARNING,
                    "the logger could not do all it was asked: records may be missing")
    RECORD_CHECK = (EventKind.RECORD_CHECK.value, "Records repaired or set aside", Severity.WARNING,
                    "the stream checks repaired records or left them out of every figure")
    ERROR = (EventKind.ERROR.value, "Error", Severity.ERROR,
             "error lines that name no known problem, or an error record of the run")
    WARNING_LINES = ("warning_lines", "Other warning lines", Severity.INFO, "warning lines that name no known problem")
    RUN_NOTES = ("run_notes", "Other notes from the run's own checks", Severity.INFO,
                 "anomaly / resource_warning records of a kind without a finding of its own")
    STALL = ("stall", "Stalled", Severity.WARNING,
             "live view: no step ended for longer than the stall limit (where the training thread was)")
    NAN_DETECTED = ("nan_detected", "NaN/Inf", Severity.ERROR,
                    "live view: a nan_detected record that names no kind")
    # --- from the figures (analysis.findings.diagnose, hang) -------------------------------------
    STATUS = "status", "Run status", None, "the run failed, was interrupted or cut off, or is still running"
    NO_RECORDS = ("no_records", "Run stopped before writing its first record", Severity.WARNING,
                  "killed or failed before the logger's first flush, or hung in its start")
    HANG = ("hang", "Hang", None, "ranks stopped in a collective; who never reached it (critical when named)")
    # --- sharded runs (issue 25): a failure read as what the sharded step was doing ---------------
    UNEVEN_MEMORY = ("uneven_memory", "GPU memory uneven across ranks", Severity.WARNING,
                     "one rank's CUDA allocator peak is gigabytes above the others': an extra CUDA context or tensors "
                     "on GPU 0 (a missing set_device, torch.load without map_location), or work rank 0 does alone")
    SOLO_WORK = ("solo_work", "Work one rank does alone while the others wait", Severity.WARNING,
                 "a rank evaluated, saved a checkpoint or spent time between its steps while every other rank "
                 "waited for it in the next collective; longer than the process group's timeout, it ends the run "
                 "with a watchdog timeout: do it on every rank or behind a barrier, or raise the timeout")
    SHARDED_FAILURE = ("sharded_failure", "Failure in a sharded step", Severity.CRITICAL,
                       "a collective of a sharded run (FSDP, DeepSpeed ZeRO) timed out, or memory ran out inside a "
                       "sharded step: what that collective does there, and in which phase, on which ranks")
    DIVERGENCE = "divergence", "Loss diverging", Severity.WARNING, "the smoothed loss rose well above its minimum"
    LOW_GPU_UTIL = ("low_gpu_util", "Low GPU utilization", Severity.WARNING,
                    "a GPU's average utilization is below the threshold: input pipeline, small batch, or waiting")
    CONFIG_DEVICE_MAP_AUTO = ("config_device_map_auto", "One process, several GPUs, one busy", Severity.WARNING,
                              "device_map=\"auto\" splits the model across GPUs, which take turns: not data "
                              "parallelism")
    NO_PROCESS_GROUP = ("no_process_group", "Processes that formed no process group", Severity.ERROR,
                        "a launcher started several processes but they never formed a process group (no "
                        "init_process_group, or accelerate fell back to one process): each trained alone on all "
                        "the data, as separate runs")
    STRAGGLER = "straggler", "Straggler", Severity.WARNING, "a rank holds the others back"
    SLOW_STEPS = ("slow_steps", "Slow steps", None,
                  "steps far above their rank's median (a warning above a share of the steps, else info)")
    DATA_WAIT_IN_TOKEN_GATHER = ("data_wait_in_token_gather", "Data time includes waiting for the slowest rank's "
                                 "data", Severity.WARNING,
                                 "transformers' token count gathered across ranks makes every rank wait for the "
                                 "slowest loader")
    COMMUNICATION_BOUND = ("communication_bound", "Communication-bound", Severity.WARNING,
                           "the gradient sync takes a large share of step time")
    LATENCY_BOUND = ("latency_bound", "Collectives are latency-bound", Severity.INFO,
                     "messages too small to reach the link's bandwidth")
    BELOW_LINK_PEAK = ("below_link_peak", "Collectives below the link's peak", Severity.WARNING,
                       "bus bandwidth well below the reference link's peak")
    # --- multi-node (issue 26): the network between hosts, and their clocks -----------------------
    FABRIC = ("fabric", "Network between nodes", None,
              "what the collectives that cross hosts travel over, how fast against what that link gives, and "
              "the share of each step they take")
    P2P_DISABLED = ("p2p_disabled", "Peer-to-peer disabled between GPUs", Severity.WARNING,
                    "NCCL_P2P_DISABLE=1: GPUs of one host exchange data through host memory, not NVLink or PCIe "
                    "peer-to-peer: unset it unless a driver bug needs it")
    HOST_SLOWER_SYNC = ("host_slower_sync", "One node's ranks slower to sync", Severity.WARNING,
                        "the ranks of one host reach a lower bus bandwidth in the collectives that cross hosts "
                        "than another host's: its NIC, cable, switch port or PCIe placement")
    CLOCK_SKEW = ("clock_skew", "Hosts' clocks differ", Severity.INFO,
                  "a host's monotonic clock differs from rank 0's host's by more than the measurement's "
                  "uncertainty: its times are put on rank 0's clock by the offset measured at start")
    UNPARSED_LINES = ("unparsed_lines", "Lines not understood", Severity.INFO,
                      "lines that matched no grammar or were torn (kept in the diagnostics)")
    SCALING_SLOWDOWN = ("scaling_slowdown", "Slowdown", Severity.WARNING,
                        "more ranks gave less throughput than the baseline")
    SCALING_SUPERLINEAR = ("scaling_superlinear", "Superlinear", Severity.WARNING,
                           "speedup above the rank ratio: the baseline was held back")
    LOW_SCALING_EFFICIENCY = ("low_scaling_efficiency", "Low scaling efficiency", Severity.WARNING,
                              "scaling efficiency below the threshold")
    CONFIG_STEPS_NOT_RESCALED = ("config_steps_not_rescaled", "Runs saw different numbers of samples",
                                 Severity.WARNING, "the step count was not rescaled with the number of GPUs (or was "
                                 "divided although the batch is global)")
    CONFIG_BATCH_MISMATCH = ("config_batch_mismatch", "Batch sizes not comparable", Severity.WARNING,
                             "the global batch is neither the baseline's nor its per-device batch x ranks")


EMITTER_KINDS: dict[str, FindingKind] = {k.value: k for k in (
    FindingKind.SLOW_STEP, FindingKind.GPU_UTIL_LOW, FindingKind.MEMORY_HIGH, FindingKind.GPU_MEMORY_HIGH,
    FindingKind.LOSS_SPIKE, FindingKind.GRAD_EXPLODE, FindingKind.GRAD_VANISH)}
NONFINITE_KINDS: frozenset[FindingKind] = frozenset({
    FindingKind.NAN_LOSS, FindingKind.NAN_GRAD, FindingKind.NAN_GRAD_NORM, FindingKind.INF_LOSS, FindingKind.INF_GRAD,
    FindingKind.INF_GRAD_NORM, FindingKind.NAN})
EMITTER_NOTES: frozenset[FindingKind] = frozenset({
    FindingKind.SAMPLING_DEGRADED, FindingKind.COMM_TIMINGS_DROPPED, FindingKind.COMM_NOT_TIMED,
    FindingKind.EXIT_BEFORE_END})
# The finding of each kind of scaling flag.
SCALING_FLAG_KINDS: dict[FlagKind, FindingKind] = {FlagKind.SLOWDOWN: FindingKind.SCALING_SLOWDOWN,
                                                   FlagKind.SUPERLINEAR: FindingKind.SCALING_SUPERLINEAR}
