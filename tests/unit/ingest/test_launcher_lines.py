"""Which framework or launcher wrote a console log, and the facts its start-up lines state: Lightning's
process lines, Megatron-LM's world-size line, ms-swift's log dicts and logger, torchrun's reports,
the framework a traceback's frames are in, a ``transformers env`` report, vLLM's
``init_distributed_environment`` line. Read from real excerpts (tests/data/frameworks/README.md cites
each) and variations of them the code was not written against.

Expected values are read off the files here (a regex over the file's own text) or written beside the
test with the line they come from; never from logkit's output.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import logkit
from logkit.ingest.readers.base import UNMATCHED
from logkit.ingest.readers.sniff import sniff
from tests.support.launch import REPO

DATA = REPO / "tests" / "data" / "frameworks"


def text_of(name: str) -> str:
    return (DATA / name).read_text(encoding="utf-8")


def load_text(tmp_path: Path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text, encoding="utf-8")
    return logkit.load_session(path)


def ranks_of(s, kind: str) -> set[int]:
    rows = s.events[s.events["kind"] == kind]
    return {int(r) for r in rows["rank"].dropna()}


def unmatched(s) -> list[str]:
    return list(s.diagnostics.loc[s.diagnostics["reason"] == UNMATCHED, "text"])


# --- PyTorch Lightning --------------------------------------------------------------------------------------
LIGHTNING = "lightning_nnue_352_initializing_distributed_4.log"


def _lightning_facts(s, text: str) -> None:
    ranks = {int(r) for r in re.findall(r"GLOBAL_RANK: (\d+), MEMBER", text)}
    worlds = {int(w) for w in re.findall(r"MEMBER: \d+/(\d+)", text)}
    assert ranks == {0, 1, 2, 3} and worlds == {4}  # read by eye: ranks 0-3 of 4
    assert s.meta.framework == "lightning"
    assert s.meta.world_size == 4 and s.meta.world_size_from.startswith("stated:")
    assert ranks_of(s, "dist_init") == ranks  # one event per process line, the script's "DDP rank" lines aside
    assert s.meta.backend == re.search(r"distributed_backend=(\w+)", text)[1] == "nccl"
    assert s.meta.strategy == "ddp" and s.meta.strategy_from.startswith("inferred:")


def test_lightning_2x_lines_state_world_size_backend_and_each_process():
    s = logkit.load_session(DATA / LIGHTNING)
    _lightning_facts(s, text_of(LIGHTNING))
    assert not any("GLOBAL_RANK" in t or "registered" in t for t in unmatched(s))


def test_lightning_1x_wording_reads_the_same(tmp_path):
    # Lightning 1.x's words for the same lines (pytorch_lightning/utilities/distributed.py, its DDP plugin)
    text = text_of(LIGHTNING).replace("Initializing distributed:", "initializing ddp:").replace(
        "All distributed processes registered. Starting with", "All DDP processes registered. Starting ddp with")
    _lightning_facts(load_text(tmp_path, "lightning_1x.log", text), text)


def test_a_stated_strategy_wins_over_lightnings_inferred_ddp(tmp_path):
    # DeepSpeed's strategy also prints Lightning's process lines: DeepSpeed's own banner says which
    text = "[2023-05-01 10:00:00,000] [INFO] [logging.py:96:log_dist] [Rank 0] DeepSpeed info: version=0.9.1\n" + text_of(LIGHTNING)
    s = load_text(tmp_path, "lightning_deepspeed.log", text)
    assert s.meta.strategy == "deepspeed" and s.meta.framework == "lightning"


def test_lightning_lines_alone_are_a_console_log_in_a_folder(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    lines = [t for t in text_of(LIGHTNING).splitlines() if "GLOBAL_RANK" in t or "registered" in t]
    (folder / "train.log").write_text("\n".join(lines) + "\n", encoding="utf-8")
    assert sniff(folder / "train.log") == "console"
    (found,) = logkit.load_sessions(folder)
    assert found.meta.framework == "lightning" and found.meta.world_size == 4


# --- Megatron-LM --------------------------------------------------------------------------------------------
MEGATRON = "megatron_511_old_world_size_line.log"


def test_megatron_old_wording_states_world_and_data_parallel_sizes():
    s = logkit.load_session(DATA / MEGATRON)
    world, dp = map(int, re.search(r"using world size: (\d+), data-parallel-size: (\d+)", text_of(MEGATRON)).groups())
    assert (world, dp) == (1, 1)  # line 1, read by eye
    assert s.meta.framework == "megatron"
    assert s.meta.world_size == world and s.meta.world_size_from.startswith("stated:")
    assert s.meta.data_parallel_size == dp
    assert unmatched(s) == []  # the start-up lines and the arguments dump are Megatron's
    assert sniff(DATA / MEGATRON) == "console"


@pytest.mark.parametrize("line, world, dp", [
    # https://github.com/NVIDIA/Megatron-LM/pull/1552, its description: the line as fixed there
    ("using world size: 16, data-parallel size: 16, context-parallel size: 1, hierarchical context-parallel sizes: None, "
     "tensor-model-parallel size: 1, encoder-tensor-model-parallel size: 0, pipeline-model-parallel size: 1, "
     "encoder-pipeline-model-parallel size: 0", 16, 16),
    # the same, as a multi-node job's tensor and pipeline split leaves 2 data-parallel ranks of 16
    ("using world size: 16, data-parallel size: 2, context-parallel size: 1, tensor-model-parallel size: 4, "
     "pipeline-model-parallel size: 2", 16, 2),
])
def test_megatron_current_wording(tmp_path, line, world, dp):
    s = load_text(tmp_path, "megatron.log", line + "\n")
    assert (s.meta.framework, s.meta.world_size, s.meta.data_parallel_size) == ("megatron", world, dp)


# --- ms-swift -----------------------------------------------------------------------------------------------
def test_ms_swift_log_dicts_give_their_step_and_progress():
    name = "ms_swift_4146_dpo_log_dicts.log"
    s = logkit.load_session(DATA / name)
    said = [tuple(map(int, m)) for m in re.findall(r"'global_step/max_steps': '(\d+)/(\d+)'", text_of(name))]
    losses = [float(x) for x in re.findall(r"\{'loss': ([\d.]+)", text_of(name))]
    assert said == [(56, 176), (57, 176)] and losses == [0.23179118, 0.21862793]  # read by eye
    assert list(s.steps["step"]) == [56, 57] and list(s.steps["loss"]) == losses
    assert s.meta.progress == {"step": 57, "total": 176, "line": 2}
    assert s.meta.framework == "ms-swift"  # its DPO dicts carry TRL's keys too: ms-swift ran TRL's trainer


def test_ms_swift_logger_and_frames_name_it():
    s = logkit.load_session(DATA / "ms_swift_4366_swift_logger_rank_traceback.log")
    assert s.meta.framework == "ms-swift"
    assert (s.meta.progress["step"], s.meta.progress["total"]) == (3099, 9297)  # line 1's bar


def test_swift_frames_alone_name_it(tmp_path):
    frames = [t for t in text_of("ms_swift_4366_swift_logger_rank_traceback.log").splitlines() if "[rank7]" in t]
    assert load_text(tmp_path, "swift.log", "\n".join(frames) + "\n").meta.framework == "ms-swift"


# --- torchrun -----------------------------------------------------------------------------------------------
def test_torchrun_childfailederror_block_names_torchrun():
    name = "torchrun_pla_18_childfailed_three_ranks.log"
    s = logkit.load_session(DATA / name)
    assert s.meta.framework == "torchrun"
    failed = s.events[s.events["kind"] == "child_failed"]
    assert {int(r) for r in failed["rank"]} == {int(r) for r in re.findall(r"rank +: (\d+)", text_of(name))} == {1, 2, 3}


def test_torchrun_block_alone_and_frames_alone_name_torchrun(tmp_path):
    lines = text_of("torchrun_pla_18_childfailed_three_ranks.log").splitlines()
    block = lines[lines.index("torch.distributed.elastic.multiprocessing.errors.ChildFailedError:"):]
    assert load_text(tmp_path, "block.log", "\n".join(block) + "\n").meta.framework == "torchrun"
    frames = lines[:6]  # torch/distributed/run.py and launcher/api.py
    assert load_text(tmp_path, "frames.log", "\n".join(frames) + "\n").meta.framework == "torchrun"


def test_torchrun_agent_line_names_torchrun():
    s = logkit.load_session(DATA / "torchrun_vicuna_113_agent_line_then_launcher_frames.log")
    assert s.meta.framework == "torchrun"
    (ev,) = s.events[s.events["kind"] == "child_failed"].to_dict("records")
    assert (ev["local_rank"], ev["pid"], ev["exitcode"]) == (0, 1622990, 1)  # line 1, read by eye


def test_a_library_the_code_only_calls_names_nobody(tmp_path):
    # a traceback through transformers' model code and torch: no framework ran the process by these lines
    text = ("Traceback (most recent call last):\n"
            '  File "/home/u/train.py", line 40, in <module>\n'
            "    model = AutoModelForCausalLM.from_pretrained(path)\n"
            '  File "/opt/conda/lib/python3.10/site-packages/transformers/modeling_utils.py", line 3550, in from_pretrained\n'
            "    model = cls(config, *model_args, **model_kwargs)\n"
            '  File "/opt/conda/lib/python3.10/site-packages/torch/nn/modules/module.py", line 1160, in to\n'
            "    return self._apply(convert)\n"
            "RuntimeError: CUDA error: out of memory\n")
    assert load_text(tmp_path, "plain.log", text).meta.framework is None


def test_the_launcher_frame_of_accelerate_beats_torchruns(tmp_path):
    # accelerate launch runs torchrun's code: its own frame says who was run (the agent's line says torchrun)
    lines = text_of("torchrun_vicuna_113_agent_line_then_launcher_frames.log").splitlines()
    text = "\n".join(lines[:2] + ['  File "/opt/conda/bin/accelerate", line 8, in <module>', "    sys.exit(main())"]
                     + lines[4:]) + "\n"
    assert load_text(tmp_path, "accelerate.log", text).meta.framework == "accelerate"


# --- transformers env ---------------------------------------------------------------------------------------
def test_a_transformers_env_report_is_transformers_with_accelerates_config(tmp_path):
    # transformers/commands/env.py: "- `transformers` version: ...", then accelerate's config as its items;
    # the accelerate env report of issue 1473, headed as transformers' report
    body = text_of("accelerate_env_1473.txt").split("- `Accelerate` version: 0.18.0\n", 1)[1]
    body = body.replace("- `Accelerate` default config:", "- Accelerate config:")
    s = load_text(tmp_path, "env.txt", "- `transformers` version: 4.30.2\n" + body)
    assert s.meta.framework == "transformers"
    assert (s.meta.strategy, s.meta.world_size, s.meta.nodes) == ("ddp", 2, 1)  # MULTI_GPU, 2 processes, 1 machine
    assert logkit.load_session(DATA / "accelerate_env_1473.txt").meta.framework == "accelerate"


# --- vLLM's init_distributed_environment ------------------------------------------------------------------------
def test_vllm_init_line_gives_the_rank_and_backend():
    name = "vllm_hami_261_init_distributed_environment.log"
    s = logkit.load_session(DATA / name)
    assert ranks_of(s, "dist_init") == {1}  # lines 1-2: rank=1 (said twice, at DEBUG and INFO)
    assert s.meta.backend == "nccl" and s.meta.world_size == 2


# --- LLaMA-Factory's LoRA-in-DDP warning ---------------------------------------------------------------------
LF_RUN = "llamafactory_deepseek_2gpu_running_log.txt"


def test_llamafactorys_lora_ddp_warning_infers_ddp_and_stays_a_warning():
    s = logkit.load_session(DATA / LF_RUN)
    line = next(n for n, t in enumerate(text_of(LF_RUN).splitlines(), 1) if "for LoRA in DDP training" in t)
    assert line == 1  # read by eye
    assert s.meta.strategy == "ddp" and s.meta.strategy_from.startswith("inferred:")
    assert s.meta.facts_source["strategy"] == f"{LF_RUN}:{line}"
    warnings = s.events[s.events["kind"] == "warning"]
    assert f"{LF_RUN}:{line}" in set(warnings["source"])  # the warning is kept as one


def test_llamafactorys_warning_under_deepspeed_leaves_the_stated_strategy(tmp_path):
    # the warning is logged under DeepSpeed too (ParallelMode.DISTRIBUTED): DeepSpeed's banner states the strategy
    text = text_of(LF_RUN) + "[2024-11-26 22:08:00,000] [INFO] [logging.py:128:log_dist] [Rank 0] DeepSpeed info: version=0.15.4\n"
    assert load_text(tmp_path, "running_log.txt", text).meta.strategy == "deepspeed"
