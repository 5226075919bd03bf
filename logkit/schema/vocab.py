"""The words logkit's values are made of, each vocabulary declared once: a run's status and mode
(with the rule that says whether it ran on CPUs), the kinds of event the readers of other formats
put in the events frame, and the words of the analysis' results (what a session is, the regime and
basis of a comparison, the axis of a loss curve, what a scaling flag says).

A member is the string it stands for (``Word``): it compares, hashes, formats and is written (JSON,
Arrow, pandas) as that string, so code names the word and what it writes does not change; a value
read from a file is looked up with ``Status("completed")`` (a ``ValueError`` for a word not
declared). Each member says what it means (``.meaning``).

    >>> Status.COMPLETED == "completed", f"{Status.COMPLETED}", Status("completed") is Status.COMPLETED
    (True, 'completed', True)
    >>> on_cpu("MULTI-CPU", None), on_cpu(None, 0), on_cpu("CPU", 2), on_cpu(None, None)
    (True, True, False, None)
"""

from __future__ import annotations

import enum

__all__ = ["Word", "Status", "ENDED", "Mode", "CPU_MODES", "on_cpu", "EventKind", "LineSubkind", "SessionKind", "Regime", "Basis",
           "ComparisonBasis", "LossAxis", "FlagKind", "DivergenceKind", "AlertKind", "AlertState", "LedgerCategory"]


class Word(str, enum.Enum):
    """A word of a closed vocabulary: the string it stands for, with what it means."""

    def __new__(cls, value: str, meaning: str = ""):
        word = str.__new__(cls, value)
        word._value_ = value
        word.meaning = meaning
        return word

    __str__ = str.__str__
    __format__ = str.__format__

    @classmethod
    def words(cls) -> frozenset[str]:
        """Every word of the vocabulary, as plain strings."""
        return frozenset(member.value for member in cls)


class Status(Word):
    """How a run ended, or where it stands: session_end's ``status`` (the first three, the only ones
    the emitter writes), what ingest concludes without one, and a rank's state in the live view."""

    COMPLETED = "completed", "the training loop finished"
    FAILED = "failed", "an exception ended the run (or a rank exited before its end)"
    INTERRUPTED = "interrupted", "Ctrl-C or a signal ended the run"
    INCOMPLETE = "incomplete", "no session_end: the streams were cut off (a guess summary.json's status replaces)"
    IN_PROGRESS = "in progress", "no session_end, and the run's files were written recently: it is still running"
    NO_RECORD = ("stopped before its first record", "the run's files hold no record and are no longer written: "
                 "killed or failed before the logger's first flush")
    RUNNING = "running", "live view: a rank that has not ended"
    LOST = "lost", "live view: a rank silent since the others ended"


ENDED: tuple[Status, ...] = (Status.COMPLETED, Status.FAILED, Status.INTERRUPTED)


class Mode(Word):
    """session_start's ``mode``: where the run ran."""

    SINGLE_GPU = "SINGLE-GPU", "one process on one GPU"
    MULTI_GPU = "MULTI-GPU", "several GPUs (one process each, or one process with several)"
    CPU = "CPU", "one process, no GPU"
    MULTI_CPU = "MULTI-CPU", "several processes, no GPU"


CPU_MODES: frozenset[Mode] = frozenset({Mode.CPU, Mode.MULTI_CPU})


def on_cpu(mode, gpu_count) -> bool | None:
    """The one rule of a CPU run: False when the run counts a GPU, True when it counts none or its
    mode (any case) is a CPU mode, None when it says neither."""
    if (gpu_count or 0) > 0:
        return False
    if gpu_count == 0 or str(mode or "").upper() in CPU_MODES:
        return True
    return None


class EventKind(Word):
    """The ``kind`` of an events row that no JSONL record type of ours names: what the readers of
    other formats (console captures, NCCL, torch, Flight Recorder, the logger's errors log) and the
    stream checks emit. Every other events row's kind is its record's type (``EventType``)."""

    NCCL_TIMEOUT = "nccl_timeout", "the NCCL watchdog timed a collective out (sequence number, op, ranks)"
    WATCHDOG_WORK = "watchdog_work", "the watchdog names the work item a rank stopped at (last enqueued, completed)"
    WATCHDOG_HANG = "watchdog_hang", "the NCCL watchdog itself hung and terminated the process"
    COLLECTIVE_MISMATCH = "collective_mismatch", "ranks ran different collectives (or arguments) at one sequence"
    CUDA_OOM = "cuda_oom", "CUDA out of memory (requested, capacity, free)"
    NCCL_ERROR = "nccl_error", "an NCCL call failed (the error, the NCCL version)"
    NCCL_WARN = "nccl_warn", "an NCCL WARN line (transport or network set-up)"
    NCCL_INIT = "nccl_init", "a communicator NCCL set up (host, rank, nranks, network)"
    DIST_INIT = "dist_init", ("a process sets up torch.distributed, as a framework's start-up line announces it "
                              "(Lightning's GLOBAL_RANK, vLLM's world_size=N rank=R): its rank")
    CHILD_FAILED = "child_failed", "a launcher reports a worker that exited (exit code, signal, root cause)"
    FAILURE_CAUSE = "failure_cause", ("why a process failed, as a line says it (``cause``: FailureCause; ``message``: "
                                      "the line; ``rank`` where known)")
    RANK_JOINED = "rank_joined", ("a process said which rank it is as it joined the run (``rank``; ``host`` where the "
                                  "line names one)")
    RENDEZVOUS_TIMEOUT = "rendezvous_timeout", "the rendezvous store could not be reached in time"
    ADDRESS_IN_USE = "address_in_use", "the rendezvous port was already in use"
    LOGGER_ERROR = "logger_error", "a line of the logger's own errors log: a problem of the logger, not the run"
    FLIGHT_RECORDER = "flight_recorder", "a Flight Recorder dump's last collective of a rank and process group"
    LAST_PHASE = "last_phase", ("the line a console's process printed as it began saving a checkpoint or evaluating "
                                "(``phase``: save or eval), the last before the watchdog's timeouts with no training "
                                "step after it: it was still at that work when the others' collective timed out")
    RECORD_CHECK = "record_check", "a stream check repaired or set aside a record (``subkind``: which check)"
    TRAINING_START = "training_start", "verbose JSONL (an earlier logger's): the record that starts its session"
    WARNING = "warning", "a warning line of a log"
    ERROR = "error", "an error line of a log (the kind of our ``error`` record too: ``EventType.ERROR``)"


class FailureCause(Word):
    """The ``cause`` of a ``failure_cause`` event: what a line says made a process fail."""

    FILE_NOT_FOUND = "file_not_found", "the launched script cannot be opened (python: can't open file ...)"
    MODULE_NOT_FOUND = "module_not_found", "an import failed: No module named ..."
    IMPORT_ERROR = "import_error", "an import failed (ImportError: a name or a shared library)"
    CUDA_OOM = "cuda_oom", "CUDA out of memory"
    CUDA_ERROR = "cuda_error", "a CUDA error (an illegal memory access, a device-side assert, ...)"
    NCCL_ERROR = "nccl_error", "an NCCL call failed (unhandled system error, internal error, remote error, ...)"
    SIGNAL = "signal", "the process was ended by a signal (SIGKILL, SIGSEGV, ...)"
    EXCEPTION = "exception", "another exception ended a traceback"


class LineSubkind(Word):
    """The ``subkind`` of a warning or error line's event, where a reader knows more of it."""

    SIGTERM_SENT = "sigterm_sent", "a launcher sent SIGTERM to a worker: tearing the job down after a failure"
    TRACEBACK_CUT = "traceback_cut", "a traceback the log ends in, cut before its exception line"


class SessionKind(Word):
    """What a session is (``SessionSummary.kind``): only training runs are compared."""

    TRAINING = "training", "a training run's logs, complete or not"
    GPU_CAPTURE = "gpu_capture", "GPU samples and nothing of a run (nvidia-smi, gpustat, monitor_gpu)"
    NCCL_TESTS = "nccl_tests", "an nccl-tests benchmark"


class Regime(Word):
    """How the global batch of a comparison's candidate relates to its baseline's."""

    STRONG = "strong", "the same global batch"
    WEAK = "weak", "the same per-rank batch (total_batch_size / world_size)"
    MIXED = "mixed", "neither"
    UNKNOWN = "unknown", "a batch size is not logged"


class Basis(Word):
    """What a session's headline throughput rests on (``SessionSummary.basis``)."""

    STEPS = "steps", "rank 0's timed step rows cover the run"
    RUN_TOTALS = "run totals", "the run's own summary (no step times, or step lines that are sampled)"
    SAMPLED_STEPS = "sampled steps", "sampled step lines and no run totals: an estimate from the lines"


class ComparisonBasis(Word):
    """Which figures a comparison's headline is (``Comparison.basis``)."""

    STEADY_STATE = "steady state", "both runs logged step times: warm-up left out"
    WHOLE_RUN = "whole run", "every logged step, or the runs' totals"


class LossAxis(Word):
    """What a loss curve's x is: loss parity's ``aligned_by`` and ``Health.basis``, the curves' axis."""

    SAMPLES_SEEN = "samples seen", "step x global batch"
    STEPS = "steps", "the optimizer step (a batch size is missing)"
    STEP = "step", "the curves' axis when it is the optimizer step"


class FlagKind(Word):
    """What a scaling flag says (``Flag.kind``)."""

    SLOWDOWN = "slowdown", "more ranks, less throughput"
    SUPERLINEAR = "superlinear", "speedup above the rank ratio"


class DivergenceKind(Word):
    """How a loss diverges (``Divergence.kind``)."""

    RISING_TAIL = "rising_tail", "the last losses rise monotonically"
    ABOVE_MINIMUM = "above_minimum", "the smoothed loss ends well above its minimum"


class AlertKind(Word):
    """What a live alert says (``LiveAlert.kind``, ``analyze_logs --follow``)."""

    STALL = "stall", "no rank has finished a step for the stall limit: one rank holds the others"
    SLOWDOWN = "slowdown", "the recent steps are at least 20% slower than the window's earlier ones"
    NONFINITE = "nonfinite", "a rank logged a NaN or infinite loss or gradient"
    STRAGGLER = "straggler", "the window's stragglers table names a rank it did not name before"


class AlertState(Word):
    """Where a live alert stands (``LiveAlert.state``)."""

    RAISED = "raised", "its condition started: said once"
    CLEARED = "cleared", "its condition ended (or its session did): said once"


# --- the ledger of where a session's hours went (issue 27) ---------------------------------------
class LedgerCategory(Word):
    """Where a session's wall-clock went (``LedgerRow.seconds``' keys, in the order the ledger adds them up)."""

    STARTUP = "startup", "the process's start to its first step (imports, model load, quantisation, the first batch)"
    DATA_WAIT = "data_wait", "between steps, waiting for the next batch (the step record's data time)"
    COMPUTE = "compute", "the steps' own work: forward, backward, optimizer (less the two below)"
    EXPOSED_COMMUNICATION = "exposed_communication", "the gradient sync not hidden behind backward"
    WAITING_FOR_RANKS = "waiting_for_ranks", "at the sync for the last rank; or after its own end, for the last rank's"
    EVALUATION = "evaluation", "evaluations during the run"
    CHECKPOINT_SAVING = "checkpoint_saving", "checkpoints written during the run"
    LOGGING = "logging", "the logger's own time on the training thread"
    REST = "rest", "what no record explains"
