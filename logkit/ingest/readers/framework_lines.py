"""The lines fine-tuning frameworks and their launchers write into a console log, for the console reader:
each family's grammar in a module of its own (``hf_trainer_lines``: transformers' Trainer, run by
LLaMA-Factory, TRL, axolotl, unsloth; ``llamafactory``: its log format; ``unsloth_lines``;
``axolotl_lines``; ``deepspeed_lines``; ``accelerate_lines``; ``megatron_lines``; ``lightning_lines``;
``torchrun_lines``: torchrun's elastic agent),
the facts they state gathered in one ``stated_facts.Facts`` and written to meta at the file's end.

A traceback says who ran the process too: a frame in a framework's or launcher's own code (``frame``:
LLaMA-Factory's ``launcher.py``, ``accelerate/commands/launch.py``, ``torch/distributed/run.py``, Megatron's
``training.py``) names it; a library the code only calls (transformers' models, torch) names nobody.
The processes a framework's start-up lines announce (their global ranks) are kept for the reader to make
``dist_init`` events of (``take_joined``).

A line of a known framework that carries nothing logkit keeps is recognised all the same (it is no "not
understood" diagnostic), and so are the dumps that span lines (a model's config ``{ ... }``, a
``TrainingArguments( ... )``, DeepSpeed's JSON): a dump runs to the line that closes it at its first column,
or to ``MAX_DUMP_LINES``, or to a line that opens with a log prefix (a dump cut short).
"""

from __future__ import annotations

import re

from logkit.ingest.readers import (
    accelerate_lines,
    axolotl_lines,
    deepspeed_lines,
    lightning_lines,
    megatron_lines,
    printed_args,
    slurm_lines,
    torchrun_lines,
    unsloth_lines,
)
from logkit.ingest.readers.console_blocks import log_dict_text
from logkit.ingest.readers.hf_trainer_lines import HfTrainer
from logkit.ingest.readers.llamafactory import peel
from logkit.ingest.readers.stated_facts import Facts
from logkit.schema.meta import SessionMeta

MAX_DUMP_LINES = 5000
# a command a person ran, pasted with its shell prompt or alone: the tool says the framework
_COMMAND = re.compile(r"^(?:\S*[$#] ?)?(?P<tool>llamafactory-cli|axolotl|accelerate|deepspeed|torchrun|swift)"
                      r" (?:train|launch|env|sft|pt|rlhf|preprocess|--\w+|\S+\.py)\b")
_TOOLS = {"llamafactory-cli": "llamafactory", "axolotl": "axolotl", "accelerate": "accelerate",
          "deepspeed": "deepspeed", "torchrun": "torchrun", "swift": "ms-swift"}
# the keys a Trainer's printed log dict carries only under one framework (the dict itself is console_blocks')
# (ms-swift's own progress key first: its dicts carry TRL's keys where it runs TRL's trainers)
_DICT_KEYS = (("'global_step/max_steps'", "ms-swift"), ("'memory/max_mem_active(gib)'", "axolotl"),
              ("'mean_token_accuracy'", "trl"), ("'rewards/", "trl"), ("'logps/", "trl"), ("'completion_length'", "trl"),
              ("'loss'", "transformers"), ("'train_runtime'", "transformers"))
# a dotted module name (``python -m axolotl.cli.train``, as torchrun's ChildFailedError names its entry point)
_MODULE = re.compile(r"^(?!.*\.py$)[A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+$")
# a traceback's frame (``  File "/path/x.py", line 9, in f``) in a framework's or launcher's own code, by its path
_FRAME = re.compile(r'^\s*File "(?P<path>[^"]+)", line \d+')
_FRAME_OWNERS = (
    (re.compile(r"/(?:llamafactory|llmtuner)/"), "llamafactory"), (re.compile(r"/axolotl/"), "axolotl"),
    (re.compile(r"/unsloth(?:_zoo)?/"), "unsloth"), (re.compile(r"/trl/trainer/"), "trl"),
    (re.compile(r"/swift/(?:cli|llm|trainers|pipelines|megatron)/"), "ms-swift"), (re.compile(r"/megatron/"), "megatron"),
    (re.compile(r"/(?:pytorch_lightning|lightning/pytorch|lightning/fabric|lightning_fabric)/"), "lightning"),
    (re.compile(r"/accelerate/(?:commands|test_utils/scripts)/|/bin/accelerate(?:-launch)?$"), "accelerate"),
    (re.compile(r"/deepspeed/launcher/|/bin/deepspeed$"), "deepspeed"),
    (re.compile(r"/transformers/trainer\.py$"), "transformers"),
    (re.compile(r"/torch/distributed/(?:run|launch)\.py$|/torch/distributed/elastic/|/bin/torchrun$"), "torchrun"))
# a frame in a data-parallel wrapper's own code says how the model was wrapped (derived: the code ran), with
# the ZeRO stage where the file is a stage's (FSDP2 lives in fsdp/_fully_shard/, torch 2.6+, or
# _composable/fsdp/ before, and logs as torch.distributed.fsdp.fully_shard; every other file of torch/distributed/fsdp/ is FSDP1's)
_FRAME_STRATEGY = (
    (re.compile(r"/torch/distributed/(?:fsdp/_?fully_shard(?:/|\.py$)|_composable/fsdp/)"), "fsdp2", None,
     "FSDP2 (fully_shard)"),
    (re.compile(r"/torch/distributed/fsdp/"), "fsdp1", None, "FSDP1 (FullyShardedDataParallel)"),
    (re.compile(r"/deepspeed/runtime/zero/(?:stage3|partition_parameters|parameter_offload|"
                r"partitioned_param_coordinator)\.py$"), "deepspeed", 3, "DeepSpeed ZeRO-3"),
    (re.compile(r"/deepspeed/runtime/zero/stage_1_and_2\.py$"), "deepspeed", None, "DeepSpeed ZeRO-1/2"),
    (re.compile(r"/deepspeed/runtime/engine\.py$"), "deepspeed", None, "the DeepSpeed engine"),
    (re.compile(r"/torch/nn/parallel/distributed\.py$"), "ddp", None, "DistributedDataParallel"))
# vLLM's parallel_state.init_distributed_environment (copied by xDiT, SGLang), logged by every process at DEBUG
# (after vLLM's own prefix, "DEBUG 02-19 15:14:55 [parallel_state.py:179] ", where the reader leaves it on)
_DIST_ENV = re.compile(r"(?:^|\] )world_size=(?P<world>\d+) rank=(?P<rank>\d+) local_rank=-?\d+ distributed_init_method=\S+"
                       r" backend=(?P<backend>\w+)\s*$")
# Python's warnings.showwarning line: "<path>.py:<line>: <Category>Warning: <message>"
_WARNED = re.compile(r"^\s*(?P<path>(?:[A-Za-z]:)?[^:\s]+\.py):\d+: (?:[A-Z]\w*)?Warning: ")
# FSDP1's warning when its process group holds one rank (torch/distributed/fsdp/_init_utils.py)
_CLAMPED = re.compile(r"FSDP is switching to use `NO_SHARD` instead of ShardingStrategy\.(?P<was>\w+) since the world size is"
                      r" (?P<n>\d+)")
# LLaMA-Factory's parser warns so when the Trainer runs distributed (ParallelMode.DISTRIBUTED, also under
# DeepSpeed: so the strategy is inferred, and a line stating DeepSpeed or FSDP wins)
_LORA_DDP = re.compile(r"`ddp_find_unused_parameters` needs to be set as False for LoRA in DDP training")
# ms-swift's logger: "[INFO:swift] ..."
_SWIFT_LOG = re.compile(r"^\[(?:DEBUG|INFO|WARNING|ERROR):swift\] ")
_LOGGED = re.compile(r"^\[(?:\d{4}-\d\d-\d\d|[A-Z]+\|)|^\d{4}-\d\d-\d\d[ T]\d\d:|^\d\d/\d\d/\d{4} ")


class FrameworkLines:
    """The framework lines of one file (``label``: how its lines are cited)."""

    def __init__(self, label: str) -> None:
        self.facts = Facts(label)
        self.trainer = HfTrainer(self.facts)
        self.accelerate = accelerate_lines.Accelerate(self.facts)
        self.slurm = slurm_lines.SlurmLines(self.facts)
        self.dump: tuple[str, str, int] | None = None  # (closing line, whose, lines so far)
        self.joined: list[tuple[int, int]] = []  # (line, global rank) of processes a start-up line announced

    def peel(self, number: int, text: str) -> tuple[str, str, str] | None:
        """(level, time stamp, message) of a line in LLaMA-Factory's (or transformers' explicit) log format."""
        found = peel(text)
        if found is None:
            return None
        framework, level, stamp, message = found
        self.facts.saw(framework, number)
        return level, stamp, message

    def in_dump(self, number: int, text: str) -> bool:
        """Whether ``text`` belongs to an open dump (the line that closes it included)."""
        if self.dump is None:
            return False
        closing, whose, count = self.dump
        if count >= MAX_DUMP_LINES or _LOGGED.match(text):
            self.dump = None
            return False
        self.dump = (closing, whose, count + 1)
        if whose == "deepspeed":
            deepspeed_lines.json_line(self.facts, number, text)
        if text.rstrip() == closing or text.startswith(closing) and not text[:1].isspace():
            self.dump = None
        return True

    def line(self, number: int, text: str) -> tuple[bool, int | None]:
        """(whether ``text``, a message without its log prefix, is a framework's, the rank it names)."""
        if self.in_dump(number, text):
            return True, None
        if (logged := log_dict_text(text)) is not None:  # a printed log dict: whose keys (read as rows elsewhere)
            keys = logged.replace('"', "'")  # the JSON form's keys, quoted as the Python form's
            for key, framework in _DICT_KEYS:
                if key in keys:
                    self.facts.saw(framework, number)
                    break
            return False, None
        said = self._bracketed(number, text) if text[:1] == "[" else None
        if said is None:
            said = self._launch_or_library(number, text)
        if said is not None:
            return said
        found = megatron_lines.line(self.facts, number, text)
        if found:
            self._open(found, "megatron")
            return True, None
        if self.accelerate.line(number, text):
            return True, None
        found = self.trainer.line(number, text)
        if found:
            self._open(found, "transformers")
            return True, None
        return False, None

    def _bracketed(self, number: int, text: str) -> tuple[bool, int | None] | None:
        """A line opening with ``[``: axolotl's logger, ms-swift's; None when neither."""
        used, rank = axolotl_lines.line(self.facts, number, text)
        if used:
            return True, rank
        if _SWIFT_LOG.match(text) is not None:
            self.facts.saw("ms-swift", number)
            return True, None
        return None

    def _launch_or_library(self, number: int, text: str) -> tuple[bool, int | None] | None:
        """DeepSpeed's, a launcher command's, unsloth's, Lightning's, LLaMA-Factory's DDP warning and vLLM's
        distributed set-up lines; None when none of them."""
        found = deepspeed_lines.line(self.facts, number, text)
        if found:
            self._open(found, "deepspeed")
            return True, None
        if (c := _COMMAND.match(text)) is not None:
            self.facts.saw(_TOOLS[c["tool"]], number)
            printed_args.line(self.facts, number, text)  # its flags state facts too
            return True, None
        if printed_args.line(self.facts, number, text):
            return True, None
        if unsloth_lines.line(self.facts, number, text):
            return True, None
        if self.slurm.line(number, text):
            return True, None
        if torchrun_lines.line(self.facts, number, text):
            return True, None
        used, rank = lightning_lines.line(self.facts, number, text)
        if used:
            if rank is not None:
                self.joined.append((number, rank))
            return True, rank
        if "LoRA in DDP" in text and _LORA_DDP.search(text) is not None:
            self.facts.saw("llamafactory", number)
            self.facts.infer("strategy", "ddp", "LLaMA-Factory: LoRA in DDP training", number)
            return False, None  # noted; a warning all the same (its event)
        if "Warning: " in text and (w := _WARNED.match(text)) is not None:
            # Python's warnings.warn line names the file that warned: a wrapper's own warning (FSDP's
            # "switching to use NO_SHARD") says the wrapper ran; any other warning is left to the reader
            if not self._wrapper_code(number, w["path"].replace("\\", "/"), "a warning"):
                return None
            if (c := _CLAMPED.search(text)) is not None and c["was"] != "HYBRID_SHARD":
                # FSDP1's process group is the whole job's unless a group is passed (HYBRID_SHARD's
                # "world size" is its shard group's: not the job's)
                self.facts.state("world_size", int(c["n"]), f"FSDP: switching to NO_SHARD since the world size is {c['n']}",
                                 number)
            return True, None
        if "distributed_init_method=" in text and (d := _DIST_ENV.search(text)) is not None:
            self.facts.state("backend", d["backend"], f"backend={d['backend']} (init_distributed_environment)", number)
            self.facts.rank_seen(int(d["rank"]), f"rank={d['rank']} (init_distributed_environment)", number)
            self.joined.append((number, int(d["rank"])))
            return True, int(d["rank"])
        return None

    def frame(self, number: int, text: str) -> None:
        """A traceback's frame line: the framework or launcher whose code it is in, if any."""
        if 'File "' not in text or (m := _FRAME.match(text)) is None:
            return
        path = m["path"].replace("\\", "/")
        self._wrapper_code(number, path, "a traceback frame")
        self.code(number, path)

    def logger(self, number: int, name: str | None) -> None:
        """A log record's logger name (``torch.distributed.fsdp._debug_utils``): the wrapper whose module
        logged it, if any (its module's path read as a frame's)."""
        if name and name.startswith(("torch.", "deepspeed.")):
            self._wrapper_code(number, "/" + name.replace(".", "/") + ".py", f"a record of logger {name}")

    def _wrapper_code(self, number: int, path: str, what: str) -> bool:
        """Whether ``path`` is code of a data-parallel wrapper (the strategy and ZeRO stage derived: it ran)."""
        for pattern, strategy, stage, words in _FRAME_STRATEGY:
            if pattern.search(path) is not None:
                where = f"{what} in {words}'s code ({path.rsplit('/', 1)[-1]})"
                self.facts.derive("strategy", strategy, where, number)
                if stage is not None:
                    self.facts.derive("zero_stage", stage, where, number)
                return True
        return False

    def code(self, number: int, path: str) -> None:
        """A path of code that ran (a frame's file, the script a ChildFailedError names as FAILED): the
        framework or launcher it belongs to, if any. A module run with ``-m`` is named dotted
        (``axolotl.cli.train FAILED``): read as the path of its file."""
        path = path.replace("\\", "/")
        if _MODULE.match(path) is not None:
            path = "/" + path.replace(".", "/") + ".py"
        for pattern, framework in _FRAME_OWNERS:
            if pattern.search(path) is not None:
                self.facts.saw(framework, number)
                return

    def launcher(self, name: str, number: int) -> None:
        """A launcher's own report (torchrun's ChildFailedError block, its agent's exit line)."""
        self.facts.saw(name, number)

    def take_joined(self) -> list[tuple[int, int]]:
        """The processes announced since the last call, (line, global rank) each."""
        joined, self.joined = self.joined, []
        return joined

    def _open(self, found, whose: str) -> None:
        if isinstance(found, str):
            self.dump = (found, whose, 0)

    def write(self, meta: SessionMeta) -> None:
        self.slurm.finish()
        self.facts.write(meta)

    def megatron_iteration(self, number: int, it: dict, meta: SessionMeta) -> None:
        """What Megatron's iteration line says of the run: Megatron wrote it, its global batch (the last line's:
        a batch ramp-up ends at the run's), how far the run got (``iteration N/ M``)."""
        self.facts.saw("megatron", number)
        if it.get("total_batch_size"):
            self.facts.restate("total_batch_size", it["total_batch_size"],
                               f"global batch size: {it['total_batch_size']} (Megatron's iteration line)", number)
        meta.progress = {"step": it["step"], "total": it["max_steps"], "line": number}
