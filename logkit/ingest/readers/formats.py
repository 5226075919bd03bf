"""Every format logkit reads, declared once: its name (a ``FileFormat`` word), its reader, how a file of
it is recognised, what its files are to a session (``Role``), and what it says about ranks, the world
size and the run's totals. ``FORMATS`` holds the declarations; what the rest of logkit asks of a format
is derived from them: ``readers.READERS``, ``readers.sniff``'s order of telltales, ``ingest.discover``'s
sessions (a session joined by name, run folders, dumps gathered, companions), ``ingest.meta``'s ranks and
world size, ``analysis.kernels.groups``' session kinds and ``analysis.kernels.headline``'s run totals.
Code names a format by its word (``FileFormat.NCCL_TESTS``) or asks its declaration (``declared(name)``),
never spells it (``tests/unit/ingest/test_format_declarations.py`` scans for it).

A new format: its reader module, its word here and its declaration in ``FORMATS`` (nothing more in the
code: docs/ARCHITECTURE.md, "A new log format to read").

This module is light (no pandas, no pyarrow, no reader imported): discovering a folder reads it.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from logkit.schema.files import ERRORS_LOG_RE, LOGKIT_TEXT_RE, RANK_JSONL_RE, RESULTS_JSON, SUMMARY_JSON_RE
from logkit.schema.lines import ERRORS_LINE
from logkit.schema.vocab import Word

__all__ = ["FileFormat", "Role", "Format", "Reader", "FORMATS", "READERS", "TEXT_SUFFIXES", "declared",
           "by_priority", "session_named", "with_role", "last_resort"]


class FileFormat(Word):
    """The formats logkit reads: a file's format, as ``sniff`` names it, ``SourceFile.format`` and
    ``ReadResult.format`` carry it and ``meta.formats`` lists it."""

    LOGKIT_JSONL = "logkit_jsonl", "our rank streams (``<id>_rank<N>.jsonl``), read by the JSONL engines"
    LOGKIT_SUMMARY = "logkit_summary", "our ``<id>_summary.json``, rank 0's account of the session"
    LOGKIT_TEXT = "logkit_text", "our text logs (``<id>_{main,multigpu,performance}.log``)"
    LOGKIT_ERRORS = "logkit_errors", "our logger's own failures (``<id>_errors.log``)"
    RESULTS_JSON = "results_json", "a pipeline's ``results.json``: what a run folder says of its run"
    TRAINER_STATE = "trainer_state", "transformers' ``trainer_state.json`` (its ``log_history``)"
    LEGACY_SUMMARY = "legacy_summary", "an earlier logger's nested ``<id>_summary.json``"
    VERBOSE_JSONL = "verbose_jsonl", "an earlier logger's single-stream verbose JSONL"
    FLIGHT_RECORDER = "flight_recorder", "PyTorch Flight Recorder dumps (pickle or JSON)"
    NVIDIA_SMI_CSV = "nvidia_smi_csv", "``nvidia-smi --query-gpu=... --format=csv``"
    NVIDIA_SMI_DMON = "nvidia_smi_dmon", "``nvidia-smi dmon``"
    NVIDIA_SMI_TABLE = "nvidia_smi_table", "the plain ``nvidia-smi`` table, alone or in ``watch nvidia-smi`` frames"
    NVIDIA_SMI_QUERY = "nvidia_smi_query", "``nvidia-smi -q``'s full query report (``==NVSMI LOG==``)"
    NCCL_TESTS = "nccl_tests", "nccl-tests' output (``all_reduce_perf`` ...)"
    GPUSTAT = "gpustat", "``gpustat`` / ``gpustat -i N``"
    CONSOLE = "console", "a console capture (torchrun, mpirun, accelerate, a training script's stdout)"
    LLAMAFACTORY_LOG = "llamafactory_log", "LLaMA-Factory's ``trainer_log.jsonl`` (one object per logging step)"
    TRAINER_RESULTS = "trainer_results", ("transformers' ``all_results.json`` / ``train_results.json`` / "
                                          "``eval_results.json`` (the run's metrics at its end)")
    MODEL_CARD = "model_card", "the model card (``README.md``) transformers' Trainer writes: its hyperparameter list"
    DEEPSPEED_CONFIG = "deepspeed_json", "a DeepSpeed config (``ds_config.json``, any name: its ``zero_optimization``)"
    MS_SWIFT_LOG = "ms_swift_log", "ms-swift's ``logging.jsonl`` (one object per logging step, ``global_step/max_steps``)"
    MS_SWIFT_ARGS = "ms_swift_args", "ms-swift's ``args.json`` (its arguments: ``global_world_size``, the batch sizes)"
    NCCL_INSPECTOR = "nccl_inspector", ("NCCL Inspector's per-collective JSON lines (``<host>-pid<pid>.log``, one file "
                                        "per process)")


class Role(Word):
    """What the files of a format are to a session."""

    OURS = "ours", "our own files: a session of ours (streams, summary.json, text logs)"
    TRAINING = "training", "a training run's log: its session is a training run, compared with others"
    GPU_CAPTURE = "gpu_capture", "GPU samples, nothing of a run: a session of them alone is no training run"
    BENCHMARK = "benchmark", "a communication benchmark (nccl-tests): its session is a benchmark, not a run"
    RUN_DOCUMENT = "run_document", "a document a run writes at its end: read for the run's meta and totals"


class Reader:
    """A reader, ``reader(path, rank=None) -> ReadResult``, its module imported on its first call."""

    def __init__(self, module: str, name: str) -> None:
        self.module, self.name, self.__name__ = module, name, name

    def __call__(self, path, rank=None):
        return getattr(importlib.import_module(self.module), self.name)(path, rank=rank)

    def __repr__(self) -> str:
        return f"<reader {self.module}.{self.name}>"


@dataclass(frozen=True)
class Format:
    """One format, as the rest of logkit asks of it.

    Reading: ``reader`` (None: read by the session reader itself, our streams and summary.json).
    Recognising a file (``readers.sniff``, formats tried in ``priority`` order, lower first): ``names``,
    a file name that says the format by itself; else ``suffixes`` (".gz" looked through) and
    ``telltale``: a ``re.Pattern`` is a line searched in the first 64 KiB of a text file (not binary;
    a file without suffix given by name is tried as text too), a function is given sniff's ``Probe``
    (name, base, suffix, head, raw) and decides; ``fallback``: a file of its suffixes given by name
    (or lying in a rank folder) is of this format without a telltale, the last resort.
    A format with ``session_names`` and a ``telltale`` but no ``suffixes`` (our errors log) is told by its
    name, and the telltale confirms it (``sniff.named_as``): a name alone can be another tool's.
    Sessions (``ingest.discover``): ``role``; ``session_names`` (else ``names``): a name whose
    ``session_id`` group says which session the file belongs to; ``joins_found``: it joins a session
    its other files make, never makes one; ``source_kind``: the session's kind when it is one of its
    files; ``run_document``: the file name that makes its folder a run folder (a run's documents are
    read in declaration order); ``session_key``: the key of such a document naming the session of
    ours the run folder belongs to; ``companion_meta``: as a companion of our session, its meta is
    read; ``gathers``: several of its files in one folder are one session (the ranks' dumps of a job).
    Meta (``ingest.meta``): ``assumed_rank``: its rows carry rank 0 by convention, not a rank the file
    names; ``world_size_from``: where a world size it gives comes from, unless its reader says;
    ``echoes_streams``: it says in text what our streams say, as the run goes (not read where the
    session has streams; its times tell a run still written). Analysis (``kernels.headline``):
    ``totals``: the document the run's own totals are credited to."""

    name: str
    role: Role
    reader: Callable[..., Any] | None = None
    names: re.Pattern | None = None
    suffixes: tuple[str, ...] = ()
    telltale: re.Pattern | Callable[[Any], bool] | None = None
    priority: int = 50
    fallback: bool = False
    session_names: re.Pattern | None = None
    joins_found: bool = False
    source_kind: str | None = None
    run_document: str | None = None
    session_key: str | None = None
    companion_meta: bool = False
    gathers: bool = False
    assumed_rank: bool = False
    world_size_from: str | None = None
    echoes_streams: bool = False
    totals: str | None = None

    @property
    def session_file(self) -> re.Pattern | None:
        """The pattern of its file names that holds their session's id (``session_id``), if any."""
        pattern = self.session_names or self.names
        return pattern if pattern is not None and "session_id" in pattern.groupindex else None


# --- how files are recognised ------------------------------------------------------------------------
TEXT_SUFFIXES = (".log", ".txt", ".out", ".err", ".csv")
# nvidia-smi -q's banner, or its "Attached GPUs" line where a paste starts below the banner
_SMI_QUERY = re.compile(r"^[ \t>]*=+\s*NVSMI LOG\s*=+\s*$|^Attached GPUs\s+:\s*\d+\s*$", re.M)
_GPUSTAT = re.compile(r"^\[\d+\] [^|]+\|\s*(?:\d+|\?\?)\s*(?:°|')C,", re.M)
# dmon's header, also indented or pasted as a markdown quote (``> \\# gpu pwr ...``)
_DMON = re.compile(r"^[ \t]*(?:>[ \t]*)?\\?#\s*(?:Date\s+Time\s+)?gpu\s+(?:pwr|sm|fb|mclk)\b", re.M)
_CSV = re.compile(r"^[ \t>]*(?:timestamp|index|name|uuid|pci\.bus_id|gpu_name|gpu_uuid|gpu_bus_id)(?:\s*\[[^\]]*\])?"
                  r"\s*,\s*[\w.]+", re.M)
# a query's row without its header (noheader): a comma-separated cell only nvidia-smi writes so (a bus id, a GPU
# UUID, MiB), with a comma beside it; each form is linear in the line's length (no nested repetition)
_SMI_CELL = r"(?:[0-9A-Fa-f]{8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f]|GPU-[0-9a-fA-F]{8}-[0-9a-fA-F-]{27}|\d+ MiB)"
_CSV_ROW = re.compile(rf"^[ \t>]*{_SMI_CELL}[ \t]*,|,[ \t]*{_SMI_CELL}[ \t]*(?:,|$)", re.M)
# the boxed table's header line (any driver: ``Driver Version`` or, 610+, ``KMD Version``), or a watch header
_SMI_TABLE = re.compile(r"^[ \t>]*\|\s*NVIDIA-SMI \S+\s+(?:Driver|KMD) Version:|^[ \t>]*Every\s+[\d.]+s:\s+nvidia-smi\b", re.M)
# nccl-tests' own lines, also behind mpirun's prefix, indented, quoted, or with the '#' markdown ate
_NCCL_TESTS = re.compile(r"^[ \t>]*(?:\[\d+,\d+\]<std\w+>:)?[ \t]*#?[ \t]*(?:nThread \d+ nGpus \d+|size\s+count\s+type\b"
                         r"|Avg bus bandwidth\s*:|Out of bounds values\s*:|Rank\s+\d+(?: Group\s+\d+)? Pid\s+\d+ on\s+\S+ device\s+\d+)"
                         # or its result rows alone (readers.nccl_tests.ROW: 13 columns, a redop word)
                         r"|^[ \t>]*(?:\[\d+,\d+\]<std\w+>:)?[ \t]*\d+\s+\d+\s+[a-z]\w*\s+"
                         r"(?:sum|prod|max|min|avg|none|premulsum|mulsum)\s+-?\d+(?:\s+(?:[\d.]+|N/A)){3}"
                         r"\s+(?:\d+|N/A)(?:\s+(?:[\d.]+|N/A)){3}\s+(?:\d+|N/A)[ \t]*$", re.M)
# NCCL's debug header, defined once here (discovery imports this module, and no reader): "host:pid:tid [dev] ",
# the source file:line a WARN names, then the level, "NCCL INFO" (NCCL 2.0-2.2: "INFO", without the word NCCL).
# Every pattern that looks for an NCCL record (the NCCL reader's, the prefix rules', the line layer's, nccl-tests')
# is built from these fragments.
NCCL_AFTER_HOST_NAMED = r":(?P<pid>\d+):(?P<tid>\d+) \[(?P<dev>\d+)\] (?:(?P<where>\S+:\d+) )?"
NCCL_AFTER_HOST = re.sub(r"\(\?P<\w+>", "(?:", NCCL_AFTER_HOST_NAMED)  # what follows the host
NCCL_HEADER = r"[^\s:]+" + NCCL_AFTER_HOST
NCCL_RECORD_START = NCCL_HEADER + r"(?:NCCL )?(?:INFO|WARN) "
# Enough to call a text file a console capture when found discovering a folder.
_CONSOLE = re.compile(r"NCCL (?:INFO|WARN)|Traceback \(most recent|\[(?:rank|default)\d+\]:|^GPU\d+:|Watchdog caught"
                      r"|CUDA out of memory|ChildFailedError|(?:\{|^)(?:'|\x22)(?:loss|eval_loss|train_runtime|train_loss)(?:'|\x22): |\d+%\|.*\|\s*\d+/\d+|torch\.distributed"
                      r"|^\[\d+,\d+\]<std(?:out|err)>:|NaN \w+ DETECTED|\bStep \[\d+/\d+\]|Train Epoch: \d+ \[\d+/\d+ \("
                      r"|mismatch between collectives|ProcessGroupNCCL|NCCL error|NCCL version|ncclCommInit"
                      r"|closing signal SIG|failed \(exitcode: -?\d+\)|exits with return code|died from signal"
                      r"|OutOfMemoryError|c10d|what\(\):|Process group watchdog|iteration\s+\d+/\s*\d+ \|"
                      # the fine-tuning frameworks' and launchers' banners (a log of them alone is a run's)
                      r"|Unsloth - 2x faster|==\(\(====\)\)==|WORLD INFO DICT|dist_world_size=|DeepSpeedEngine configuration"
                      r"|DeepSpeed info: version|Distributed environment: |\[axolotl[\w.]*:\d+\] \[PID:|compute_environment: "
                      r"|^\[(?:INFO|WARNING|ERROR)\|[^\]]+\] (?:\S+ ){1,2}>>|\*{5} (?:Running training|train metrics) \*{5}"
                      r"|Process rank: -?\d+"
                      r"|`--num_processes` was set|zero_optimization_stage|\[launch\.py:\d+:main\]"
                      r"|using world size: \d+, data-parallel[- ]size|GLOBAL_RANK: \d+, MEMBER: \d+/\d+"
                      r"|All (?:DDP|distributed) processes registered"
                      # NCCL 2.0-2.2's debug header, its level without the word NCCL (readers.nccl)
                      r"|^" + NCCL_HEADER + r"(?:INFO|WARN) "
                      # torchrun's elastic agent (glog headers name its source; its worker group's dump)
                      r"|\btorch/distributed/elastic/|\bgroup_world_size=\d+[ \t]*$"
                      # a warning FSDP's own code issues ("switching to use NO_SHARD ..."): FSDP ran (framework_lines)
                      r"|\btorch/distributed/(?:_composable/)?fsdp/[\w/]+\.py:\d+: [A-Z]\w*Warning: "
                      # DeepSpeed's flops profiler summary and multi-node runner; GPT-NeoX's world size line
                      r"|DeepSpeed Flops Profiler|^world size:[ \t]{2,}\d+[ \t]*$|Running on the following workers: "
                      r"|configure_distributed_args\(\) using world size"
                      # Slurm's launcher speaking ("srun: error: ...", "srun: lua: Submitted job"), a job's node list in
                      # its environment, llm.c's multi-GPU set-up line (readers.slurm_lines)
                      r"|^srun: |\bSLURM_(?:JOB_)?NODELIST=|ProcessID:\d+, NumProcess::\d+"
                      # a process saying its rank as it joins (fairseq / metaseq; the vision codebases' init_distributed_mode)
                      r"|[Ii]nitialized [Hh]ost \S+ as [Rr]ank \d+|distributed init \(rank \d+\)"
                      # torchrun's ChildFailedError block pasted from its rule on (its exception line not in the file)
                      r"|^\S+ FAILED[ \t]*\r?\n-{20,}"
                      # or from its middle: the "Root Cause" line, an entry's exit field in torch's padded layout
                      r"|^[ \t]*Root Cause \(first observed failure\):|^[ \t]+exitcode  : -?\d+ \(pid: \d+\)"
                      # verl's trainer record ("step:2 - global_seqlen/min:538646.000 - ...")
                      r"|\bstep:\d+ - [\w/@.-]+:[-\d]"
                      # a framework's own step line: a counter and a training loss on one line (iteration_lines)
                      r"|\b(?:[Ss]tep|[Ii]ter(?:ation)?):?[ \t]*\d+(?:[ \t]*/[ \t]*\d+)?(?:[ \t]+\d{1,3}%)?[ \t]*[|:,].*?"
                      r"\b(?:lm_|train_|reduced_train_)?loss[ \t]*[:=]?[ \t]*-?\d"
                      # or as key=value fields ("step=1070 loss=2.5004 lr=...")
                      r"|\b(?:[Ss]tep|[Ii]ter(?:ation)?)=\d+[ \t].*?\bloss=-?\d", re.M)
# NCCL Inspector's objects (inspector_json.cc: compact JSON, "header" first, then "metadata", then the op)
_INSPECTOR = re.compile(r'^\{"header":\{"id":"[^"]*".*"(?:coll|p2p)_perf":\{"(?:coll|p2p)":', re.M)


def _nccl_inspector(probe) -> bool:
    """Inspector's objects; a cheap look for its first key before the pattern."""
    head = probe.head
    return '{"header":{"id":' in head and _INSPECTOR.search(head) is not None
# a Flight Recorder dump: a pickle (protocol 2+) or JSON holding these keys near its start
_FR_KEYS = (b"collective_seq_id", b"pg_config", b"pg_status")


def _flight_recorder(probe) -> bool:
    head = probe.raw
    opens = head[:1] == b"\x80" and head[1:2] in (b"\x02", b"\x03", b"\x04", b"\x05") or head.lstrip()[:1] == b"{"
    return opens and b"entries" in head and any(k in head for k in _FR_KEYS)


_ERRORS_LINE = re.compile(ERRORS_LINE.pattern.pattern, re.M)


def _our_errors(probe) -> bool:
    """Our errors log's lines, or nothing yet (asked of a file named so: a user's "..._socket_errors.log" holding
    another tool's output is that tool's log)."""
    head = probe.head
    return not head.strip() or _ERRORS_LINE.search(head) is not None


def _smi_csv(probe) -> bool:
    """A ``--query-gpu`` capture: its header, or (without one) rows of comma-separated cells only
    nvidia-smi writes so, in a file that holds nothing of a run."""
    head = probe.head
    if _CSV.search(head) is not None:
        return True
    if _sampler_csv(head):
        return True
    return _CSV_ROW.search(head) is not None and _CONSOLE.search(head) is None


def _sampler_csv(head: str) -> bool:
    """A training script's own GPU sampler CSV: its first line a header of GPU metric names
    (``elapsed_sec,gpu_util_pct,mem_used_mb,...``) and a row of numbers under it."""
    from logkit.ingest.readers.gpu_sampler_columns import sampler_header

    lines = [x for x in head.splitlines()[:3] if x.strip()]
    if len(lines) < 2 or "," not in lines[0] or not re.match(r"\s*[-\d.]+\s*,", lines[1]):
        return False
    return sampler_header([c.strip() for c in lines[0].split(",")]) is not None


def _smi_table(probe) -> bool:
    """The boxed nvidia-smi table, and nothing of a run: a training log that prints the table at its
    start stays a console capture."""
    head = probe.head
    return _SMI_TABLE.search(head) is not None and _CONSOLE.search(head) is None


def _trainer_state(probe) -> bool:
    return '"log_history"' in probe.head or probe.base == "trainer_state.json"


def _legacy_summary(probe) -> bool:
    head = probe.head
    return '"training_metrics"' in head or '"gpu_snapshots"' in head or '"communication_logs"' in head


def _our_summary(probe) -> bool:
    return probe.base.endswith("_summary.json")


def _results_json(probe) -> bool:
    if probe.base == "results.json":
        return True
    head = probe.head
    duration, gpus, mode = (f'"{RESULTS_JSON[n].raw[0]}"' for n in ("duration_s", "gpu_count", "mode"))
    return duration in head and (gpus in head or mode in head)


def _deepspeed_config(probe) -> bool:
    """A JSON object that configures DeepSpeed's ZeRO (every DeepSpeed config a fine-tune passes names it)."""
    head = probe.head[:8192]
    return head.lstrip()[:1] == "{" and '"zero_optimization"' in head


def _model_card(probe) -> bool:
    """A Markdown file with the Trainer's hyperparameter list (``Trainer.create_model_card``)."""
    return "The following hyperparameters were used during training:" in probe.head


def _llamafactory_log(probe) -> bool:
    head = probe.head[:4096]
    return '"current_steps"' in head and '"total_steps"' in head


def _ms_swift_log(probe) -> bool:
    """ms-swift's progress key, or (2.x) its integer step beside its speed key."""
    head = probe.head[:4096]
    return '"global_step/max_steps"' in head or ('"train_speed(iter/s)"' in head and '"global_step": ' in head)


def _ms_swift_args(probe) -> bool:
    """ms-swift's arguments: the world size it computed beside its own training keys (2.x: ``sft_type``)."""
    head = probe.head
    return head.lstrip()[:1] == "{" and '"global_world_size"' in head and (
        '"train_type"' in head or '"sft_type"' in head or '"rlhf_type"' in head)


def _verbose_jsonl(probe) -> bool:
    return '"type"' in probe.head[:4096]


# --- the declarations -------------------------------------------------------------------------------
# The reader modules are named in full (the cache's code key follows the names quoted here as imports).
# Declaration order is the order a run folder's documents are read in and their totals are credited.
FORMATS: dict[str, Format] = {f.name: f for f in (
    Format(FileFormat.LOGKIT_JSONL, Role.OURS, names=RANK_JSONL_RE, priority=0),
    Format(FileFormat.LOGKIT_SUMMARY, Role.OURS, suffixes=(".json",), telltale=_our_summary, priority=22,
           session_names=SUMMARY_JSON_RE),
    Format(FileFormat.LOGKIT_TEXT, Role.OURS, Reader("logkit.ingest.readers.logkit_text", "read_logkit_text"),
           names=LOGKIT_TEXT_RE, priority=1, world_size_from="our text logs (World size / Processes)",
           echoes_streams=True),
    # its name alone is no proof (a user's "..._socket_errors.log" is another tool's log): its lines say it is ours
    Format(FileFormat.LOGKIT_ERRORS, Role.OURS,
           Reader("logkit.ingest.readers.logkit_errors", "read_logkit_errors"), session_names=ERRORS_LOG_RE,
           telltale=_our_errors, joins_found=True),
    Format(FileFormat.RESULTS_JSON, Role.RUN_DOCUMENT,
           Reader("logkit.ingest.readers.json_docs", "read_results_json"), suffixes=(".json",),
           telltale=_results_json, priority=23, run_document="results.json", session_key="logkit_session",
           companion_meta=True, assumed_rank=True, world_size_from="results.json", totals="results.json"),
    Format(FileFormat.TRAINER_STATE, Role.RUN_DOCUMENT,
           Reader("logkit.ingest.readers.json_docs", "read_trainer_state"), suffixes=(".json",),
           telltale=_trainer_state, priority=20, run_document="trainer_state.json", assumed_rank=True,
           totals="trainer_state.json"),
    Format(FileFormat.LEGACY_SUMMARY, Role.RUN_DOCUMENT,
           Reader("logkit.ingest.readers.json_docs", "read_legacy_summary"), suffixes=(".json",),
           telltale=_legacy_summary, priority=21, session_names=SUMMARY_JSON_RE, source_kind="legacy",
           assumed_rank=True, world_size_from="an earlier logger's summary (gpu_count)",
           totals="summary.json (first version)"),
    Format(FileFormat.TRAINER_RESULTS, Role.RUN_DOCUMENT,
           Reader("logkit.ingest.readers.trainer_results", "read_trainer_results"),
           names=re.compile(r"^(?:all|train|eval|predict)_results\.json$"), run_document="all_results.json",
           assumed_rank=True, totals="all_results.json"),
    Format(FileFormat.DEEPSPEED_CONFIG, Role.RUN_DOCUMENT,
           Reader("logkit.ingest.readers.deepspeed_config", "read_deepspeed_config"), suffixes=(".json",),
           telltale=_deepspeed_config, priority=24),
    Format(FileFormat.MODEL_CARD, Role.RUN_DOCUMENT, Reader("logkit.ingest.readers.model_card", "read_model_card"),
           suffixes=(".md",), telltale=_model_card, priority=25),
    Format(FileFormat.LLAMAFACTORY_LOG, Role.TRAINING,
           Reader("logkit.ingest.readers.llamafactory", "read_trainer_log"), names=re.compile(r"^trainer_log\.jsonl$"),
           suffixes=(".jsonl",), telltale=_llamafactory_log, priority=29, run_document="trainer_log.jsonl",
           assumed_rank=True),
    Format(FileFormat.MS_SWIFT_LOG, Role.TRAINING, Reader("logkit.ingest.readers.ms_swift", "read_logging_jsonl"),
           suffixes=(".jsonl",), telltale=_ms_swift_log, priority=28,
           run_document="logging.jsonl", assumed_rank=True),
    Format(FileFormat.MS_SWIFT_ARGS, Role.RUN_DOCUMENT, Reader("logkit.ingest.readers.ms_swift", "read_args_json"),
           suffixes=(".json",), telltale=_ms_swift_args, priority=19, run_document="args.json"),
    Format(FileFormat.VERBOSE_JSONL, Role.TRAINING,
           Reader("logkit.ingest.readers.verbose_jsonl", "read_verbose_jsonl"), suffixes=(".jsonl",),
           telltale=_verbose_jsonl, priority=30, fallback=True, world_size_from="verbose JSONL"),
    Format(FileFormat.FLIGHT_RECORDER, Role.TRAINING,
           Reader("logkit.ingest.readers.flight_recorder", "read_flight_recorder"),
           suffixes=("", ".pkl", ".pickle", ".json"), telltale=_flight_recorder, priority=10, gathers=True),
    Format(FileFormat.NCCL_INSPECTOR, Role.TRAINING,
           Reader("logkit.ingest.readers.nccl_inspector", "read_nccl_inspector"), suffixes=(".log", ".jsonl"),
           telltale=_nccl_inspector, priority=12, gathers=True),
    Format(FileFormat.NVIDIA_SMI_CSV, Role.GPU_CAPTURE,
           Reader("logkit.ingest.readers.nvidia_smi", "read_nvidia_smi_csv"), suffixes=TEXT_SUFFIXES,
           telltale=_smi_csv, priority=40),
    Format(FileFormat.NVIDIA_SMI_DMON, Role.GPU_CAPTURE,
           Reader("logkit.ingest.readers.nvidia_smi", "read_nvidia_smi_dmon"), suffixes=TEXT_SUFFIXES,
           telltale=_DMON, priority=41),
    Format(FileFormat.NVIDIA_SMI_TABLE, Role.GPU_CAPTURE,
           Reader("logkit.ingest.readers.nvidia_smi_table", "read_nvidia_smi_table"), suffixes=TEXT_SUFFIXES,
           telltale=_smi_table, priority=44),
    Format(FileFormat.NVIDIA_SMI_QUERY, Role.GPU_CAPTURE,
           Reader("logkit.ingest.readers.nvidia_smi_query", "read_nvidia_smi_query"), suffixes=TEXT_SUFFIXES,
           telltale=_SMI_QUERY, priority=45),
    Format(FileFormat.NCCL_TESTS, Role.BENCHMARK,
           Reader("logkit.ingest.readers.nccl_tests", "read_nccl_tests"), suffixes=TEXT_SUFFIXES,
           telltale=_NCCL_TESTS, priority=42),
    Format(FileFormat.GPUSTAT, Role.GPU_CAPTURE, Reader("logkit.ingest.readers.gpustat", "read_gpustat"),
           suffixes=TEXT_SUFFIXES, telltale=_GPUSTAT, priority=43),
    Format(FileFormat.CONSOLE, Role.TRAINING, Reader("logkit.ingest.readers.console", "read_console"),
           suffixes=(".log", ".txt", ".out", ".err"), telltale=_CONSOLE, priority=90, fallback=True),
)}


# --- what the rest asks (derived at each call: a declaration added at run time counts) ------------------
def declared(name: str) -> Format:
    """The declaration of format ``name``; a name nobody declared (a test's, a stale entry's) says nothing
    of itself: a format with no reader, no telltale and no facts, whose files count as a run's."""
    return FORMATS.get(name) or Format(name, Role.TRAINING)


_DERIVED: dict = {}  # what sniffing and discovery ask for every file, made once per set of declarations


def _derived() -> dict:
    now = tuple(FORMATS.values())
    if _DERIVED.get("of") != now:  # a declaration added, replaced or removed (equal ones behave alike)
        order = sorted(now, key=lambda f: f.priority)
        _DERIVED.update(of=now, order=order, named=[(f, f.session_file) for f in order if f.session_file])
    return _DERIVED


def by_priority() -> list[Format]:
    """The declarations in the order files are tried against them (``priority``, then declaration order)."""
    return _derived()["order"]


def session_named() -> list[tuple[Format, re.Pattern]]:
    """The formats whose file names hold their session's id, with that pattern, in ``priority`` order."""
    return _derived()["named"]


def with_role(role: Role) -> frozenset[str]:
    """The formats whose files play ``role``."""
    return frozenset(name for name, f in FORMATS.items() if f.role is role)


def last_resort() -> Format:
    """The format a file given by name is read as when nothing recognises it: of the formats that take a
    file without its telltale (``fallback``), the one tried last (a console capture)."""
    return max((f for f in FORMATS.values() if f.fallback), key=lambda f: f.priority)


class _Readers(Mapping):
    """Format name -> reader, for every declared format that has a reader of its own."""

    def __getitem__(self, name: str) -> Callable[..., Any]:
        f = FORMATS.get(name)
        if f is None or f.reader is None:
            raise KeyError(name)
        return f.reader

    def __iter__(self) -> Iterator[str]:
        return (name for name, f in FORMATS.items() if f.reader is not None)

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __repr__(self) -> str:
        return f"READERS({', '.join(self)})"


READERS: Mapping[str, Callable[..., Any]] = _Readers()
