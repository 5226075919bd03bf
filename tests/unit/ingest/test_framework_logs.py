"""The fine-tuning frameworks' own logs (LLaMA-Factory, unsloth, axolotl, DeepSpeed's launcher and engine,
accelerate, transformers' Trainer) read from real excerpts (tests/data/frameworks/README.md cites each),
and variations of them the code was not written against.

Expected values are read off the files here, by the test (a regex or json over the file's own text), or
written beside the test with the line they come from; never from logkit's output.
"""

from __future__ import annotations

import ast
import json
import re
from datetime import timedelta
from pathlib import Path

import logkit
from logkit.ingest.readers.base import UNMATCHED
from tests.support.launch import REPO

DATA = REPO / "tests" / "data" / "frameworks"


def load(name: str):
    return logkit.load_session(DATA / name)


def unmatched(s) -> list[str]:
    return list(s.diagnostics.loc[s.diagnostics["reason"] == UNMATCHED, "text"])


def line_of(path: Path, needle: str) -> int:
    """The number of the first line of ``path`` holding ``needle`` (as a reader counts: from 1)."""
    for number, text in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if needle in text:
            return number
    raise AssertionError(f"{needle!r} not in {path}")


def stated_int(path: Path, pattern: str) -> int:
    return int(re.search(pattern, path.read_text(encoding="utf-8"))[1].replace(",", ""))


# --- LLaMA-Factory ------------------------------------------------------------------------------------------
def test_llamafactory_output_dir_states_its_batch_and_runtime_and_derives_its_world_size():
    folder = DATA / "llamafactory_qwen3_lora"
    log = folder / "running_log.txt"
    s = load("llamafactory_qwen3_lora")
    results = json.loads((folder / "train_results.json").read_text())
    total = stated_int(log, r"Total train batch size \(w\. parallel, distributed & accumulation\) = (\d+)")
    per = stated_int(log, r"Instantaneous batch size per device = (\d+)")
    acc = stated_int(log, r"Gradient Accumulation steps = (\d+)")
    assert (total, per, acc) == (112, 2, 8)  # running_log.txt, read by eye
    assert s.meta.framework == "llamafactory"
    # the stated total, never one divided out of two rounded rates (14.427 / 0.128 = 112.7)
    assert s.meta.total_batch_size == total and s.meta.total_batch_size_from.startswith("stated:")
    assert s.meta.world_size == total // (per * acc) == 7
    assert s.meta.world_size_from.startswith("derived:")
    line = line_of(log, "Total train batch size")
    assert s.meta.facts_source["total_batch_size"] == f"running_log.txt:{line}"
    assert s.meta.duration_s == results["train_runtime"] and s.meta.train_loss == results["train_loss"]
    assert s.meta.max_steps == stated_int(log, r"Total optimization steps = ([\d,]+)")
    assert s.meta.num_examples == stated_int(log, r"Num examples = ([\d,]+)")
    assert s.meta.gpu_count is None  # no line says how many GPUs each process drove
    assert s.steps.empty and s.meta.final_loss is None  # logging_steps 996 > 768 steps: no loss was logged
    assert s.meta.total_steps == json.loads((folder / "trainer_log.jsonl").read_text())["current_steps"]
    assert unmatched(s) == []  # the config dumps, the Trainer's and LLaMA-Factory's lines: all recognised


def test_llamafactory_trainer_log_steps_are_its_losses():
    path = DATA / "llamafactory_mistral_translator" / "trainer_log.jsonl"
    entries = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    logged = [e for e in entries if "loss" in e]
    s = load("llamafactory_mistral_translator")
    assert list(s.steps["step"]) == [e["current_steps"] for e in logged]  # the entry without a loss is progress
    assert list(s.steps["loss"]) == [e["loss"] for e in logged]
    assert list(s.steps["learning_rate"]) == [e["learning_rate"] for e in logged]  # before 0.9: learning_rate
    h, m, sec = map(int, logged[-1]["elapsed_time"].split(":"))
    assert s.steps["time_s"].iloc[-1] == timedelta(hours=h, minutes=m, seconds=sec).total_seconds()
    assert s.meta.final_loss == logged[-1]["loss"] == 0.1333
    assert s.meta.total_steps == s.meta.max_steps == entries[-1]["total_steps"] == 8660
    results = json.loads((path.parent / "all_results.json").read_text())
    assert s.meta.duration_s == results["train_runtime"] and s.meta.duration_from.startswith("stated:")


def test_a_prediction_runs_trainer_log_is_progress_not_steps(tmp_path):
    # the shape LLaMA-Factory's on_prediction_step writes (every fifth step, no loss, no epoch)
    (tmp_path / "trainer_log.jsonl").write_text(
        '{"current_steps": 5, "total_steps": 250, "percentage": 2.0, "elapsed_time": "0:00:19", '
        '"remaining_time": "0:16:09"}\n{"current_steps": 10, "total_steps": 250, "percentage": 4.0, '
        '"elapsed_time": "0:00:29", "remaining_time": "0:11:55"}\n')
    s = logkit.load_session(tmp_path)
    assert s.steps.empty and s.meta.total_steps is None
    assert (s.meta.progress["step"], s.meta.progress["total"]) == (10, 250)


def test_llamafactory_running_log_of_two_ranks():
    path = DATA / "llamafactory_deepseek_2gpu_running_log.txt"
    text = path.read_text(encoding="utf-8")
    s = load(path.name)
    ranks = [int(r) for r in re.findall(r"Process rank: (\d+), device", text)]
    assert ranks == [0, 1]
    assert s.meta.world_size == 128 // (1 * 64) == 2 and s.meta.world_size_from.startswith("derived:")
    # n_gpu is each process's: the run's count is derived from it and the world size, never taken alone
    assert s.meta.gpu_count == 2 and s.meta.gpu_count_from.startswith("derived:")
    losses = [float(x) for x in re.findall(r"\{'loss': ([\d.]+),", text)]
    assert list(s.steps["loss"]) == losses and losses[-1] == 0.0067
    assert s.meta.framework == "llamafactory"
    assert unmatched(s) == []


# --- unsloth -----------------------------------------------------------------------------------------------
def test_unsloth_banner_now_and_before():
    new, old = load("unsloth_3066_banner.log"), load("unsloth_224_old_banner.log")
    assert (new.meta.framework, old.meta.framework) == ("unsloth", "unsloth")
    # issue 3066: Data Parallel GPUs = 1, Total batch size (16 x 2 x 1) = 32, Total steps = 196
    assert (new.meta.world_size, new.meta.total_batch_size, new.meta.max_steps) == (1, 32, 196)
    assert new.meta.num_examples == 6261 and new.meta.per_device_batch_size == 16
    assert new.meta.world_size_from.startswith("stated:") and new.meta.facts_source["world_size"].endswith(":4")
    # issue 224 (2024): Num GPUs = 8 was args.world_size; Total batch size = 64 | Total steps = 99,486
    assert (old.meta.world_size, old.meta.total_batch_size, old.meta.max_steps) == (8, 64, 99486)
    # the line says "Num GPUs = 8": the GPU count stated (unsloth ran one GPU per process then)
    assert old.meta.gpu_count == 8 and old.meta.gpu_count_from.startswith("stated")


def test_unsloth_banner_with_model_parallel_devices(tmp_path):
    """A variation: 4 data-parallel ranks, each spreading the model over 2 GPUs ('Num GPUs used')."""
    text = (DATA / "unsloth_3066_banner.log").read_text(encoding="utf-8")
    text = text.replace("Num GPUs used = 1", "Num GPUs used = 2").replace("Data Parallel GPUs = 1", "Data Parallel "
                        "GPUs = 4").replace("Total batch size (16 x 2 x 1) = 32", "Total batch size (16 x 2 x 4) = 128")
    (tmp_path / "train.log").write_text(text, encoding="utf-8")
    s = logkit.load_session(tmp_path / "train.log")
    assert (s.meta.world_size, s.meta.total_batch_size, s.meta.gpu_count) == (4, 128, 8)
    assert s.meta.gpu_count_from.startswith("derived:")


# --- DeepSpeed ---------------------------------------------------------------------------------------------
def test_deepspeed_launcher_lines_alone_make_a_session():
    path = DATA / "deepspeed_launcher_37505.log"
    s = load(path.name)
    assert s.meta.framework == "deepspeed"
    assert s.meta.world_size == stated_int(path, r"dist_world_size=(\d+)") == 2
    assert s.meta.world_size_from.startswith("stated:") and "dist_world_size" in s.meta.world_size_from
    assert s.meta.facts_source["world_size"] == f"{path.name}:{line_of(path, 'dist_world_size=')}"
    assert (s.meta.nodes, s.meta.gpu_count) == (1, 2)  # WORLD INFO DICT: {'localhost': [0, 1]}
    assert unmatched(s) == []


def test_deepspeed_launcher_on_two_hosts(tmp_path):
    """A variation in the launcher's words (deepspeed/launcher/launch.py): two hosts of 12 GPUs."""
    hosts = "{'x4502c1s0b0n0': [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11], 'x4502c1s3b0n0': [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11]}"
    lines = [f"[2024-01-23 06:10:08,419] [INFO] [launch.py:145:main] WORLD INFO DICT: {hosts}",
             "[2024-01-23 06:10:08,419] [INFO] [launch.py:151:main] nnodes=2, num_local_procs=12, node_rank=0"]
    (tmp_path / "job.log").write_text("\n".join(lines) + "\n")
    s = logkit.load_session(tmp_path / "job.log")
    assert (s.meta.nodes, s.meta.gpu_count, s.meta.world_size) == (2, 24, 24)
    assert s.meta.world_size_from.startswith("derived:")  # nnodes x num_local_procs: no dist_world_size line
    assert s.meta.hosts == ["x4502c1s0b0n0", "x4502c1s3b0n0"]


def test_deepspeed_configuration_zero3():
    path = DATA / "deepspeed_zero3_accelerate_910.log"
    s = load(path.name)
    assert s.meta.zero_stage == 3 and s.meta.strategy == "deepspeed"
    assert s.meta.total_batch_size == stated_int(path, r'"train_batch_size": (\d+)') == 64
    assert s.meta.per_device_batch_size == 32
    assert s.meta.world_size == 2 and s.meta.world_size_from.startswith("derived:")  # 64 / (32 x 1)
    # the Trainer's block behind a "[time][__main__][INFO] -" prefix
    assert (s.meta.max_steps, s.meta.num_examples) == (438, 9327)


# --- accelerate ----------------------------------------------------------------------------------------------
def test_accelerate_state_and_env():
    state, env = load("accelerate_state_makelongvideo_3.log"), load("accelerate_env_1473.txt")
    assert (state.meta.world_size, state.meta.strategy, state.meta.backend) == (8, "ddp", "nccl")
    assert state.meta.mixed_precision == "fp16" and state.meta.framework == "accelerate"
    assert unmatched(state) == []
    assert (env.meta.world_size, env.meta.nodes, env.meta.strategy) == (2, 1, "ddp")
    assert env.meta.world_size_from.startswith("stated:")
    assert unmatched(env) == []  # "$ accelerate env", the command pasted with its prompt, included


def test_accelerate_env_of_an_fsdp_job_on_two_machines(tmp_path):
    """A variation: the same list for FSDP on 2 x 8 GPUs, with its ZeRO-less fsdp_config."""
    text = (DATA / "accelerate_env_1473.txt").read_text().replace("distributed_type: MULTI_GPU", "distributed_type: FSDP")
    text = text.replace("num_processes: 2", "num_processes: 16").replace("num_machines: 1", "num_machines: 2")
    (tmp_path / "env.txt").write_text(text)
    s = logkit.load_session(tmp_path / "env.txt")
    assert (s.meta.world_size, s.meta.nodes, s.meta.strategy) == (16, 2, "fsdp")


# --- axolotl -------------------------------------------------------------------------------------------------
def test_axolotl_lines():
    s = load("axolotl_1571_total_num_steps.log")
    assert s.meta.framework == "axolotl" and s.meta.max_steps == 10116
    assert unmatched(s) == []
    launched = load("axolotl_2724_accelerate_defaults.log")
    assert launched.meta.framework == "axolotl"  # the tool the person ran, over the launcher it ran under
    assert launched.meta.world_size == 2 and "num_processes" in launched.meta.world_size_from
    assert unmatched(launched) == []


# --- what a per-process banner says alone --------------------------------------------------------------------
def test_n_gpu_of_one_process_is_never_the_runs_gpu_count(tmp_path):
    line = ("[INFO|2024-11-26 22:07:06] parser.py:355 >> Process rank: 3, device: cuda:3, n_gpu: 1, "
            "distributed training: True, compute dtype: torch.bfloat16\n")
    (tmp_path / "rank3.log").write_text(line)
    s = logkit.load_session(tmp_path / "rank3.log")
    assert s.meta.gpu_count is None
    assert s.meta.world_size == 4 and "lower bound" in s.meta.world_size_from  # rank 3 was seen


def test_a_banner_alone_is_a_session(tmp_path):
    (tmp_path / "out.log").write_text((DATA / "unsloth_224_old_banner.log").read_text(encoding="utf-8"))
    sessions = logkit.load_sessions(tmp_path)
    assert len(sessions) == 1 and sessions[0].meta.world_size == 8


# --- transformers' Trainer at its end ------------------------------------------------------------------------
def test_final_metrics_as_a_dict_of_text_and_as_a_block(tmp_path):
    path = DATA / "transformers_train_metrics_10488.log"
    s = load(path.name)
    # {'train_runtime': '2219', ..., 'train_loss': '0.7228'}: transformers 4.5x prints the values as text
    assert (s.meta.duration_s, s.meta.train_loss, s.meta.samples_per_second) == (2219.0, 0.7228, 1.474)
    assert s.meta.duration_from == f"stated: train_runtime ({path.name}:1)"
    assert unmatched(s) == []
    # the log_metrics block alone: train_runtime = 0:36:58.55 is h:mm:ss.ss
    block = path.read_text().splitlines()[1:]
    (tmp_path / "metrics.log").write_text("\n".join(block) + "\n")
    s = logkit.load_session(tmp_path / "metrics.log")
    assert s.meta.duration_s == 36 * 60 + 58.55 and s.meta.duration_from.startswith("stated: train_runtime")
    assert s.meta.train_loss == 0.7228 and s.meta.framework == "transformers"


def test_llamafactory_banner_with_its_world_size(tmp_path):
    """The banner as hparams/parser.py writes it since 0.9.1 (world size, no n_gpu), one line per process."""
    lines = [f"[INFO|2025-03-01 10:00:0{r}] llamafactory.hparams.parser:406 >> Process rank: {r}, world size: 8, "
             f"device: cuda:{r}, distributed training: True, compute dtype: torch.bfloat16" for r in (0, 5)]
    (tmp_path / "train.log").write_text("\n".join(lines) + "\n")
    s = logkit.load_session(tmp_path / "train.log")
    assert s.meta.world_size == 8 and s.meta.world_size_from.startswith("stated: world size: 8")
    assert s.meta.facts_source["world_size"] == "train.log:1"
    assert s.meta.gpu_count is None and s.meta.framework == "llamafactory"
    # one process without torch.distributed: rank -1, distributed training: False
    (tmp_path / "single.log").write_text("[INFO|2025-03-01 10:00:00] llamafactory.hparams.parser:406 >> Process rank: "
                                         "-1, world size: 1, device: cuda:0, distributed training: False, compute "
                                         "dtype: torch.float16\n")
    assert logkit.load_session(tmp_path / "single.log").meta.world_size == 1


def test_axolotl_log_dicts_say_axolotl_and_give_the_losses():
    path = DATA / "axolotl_3196_log_dicts.log"
    s = load(path.name)
    dicts = [ast.literal_eval(x) for x in path.read_text().splitlines()]
    assert list(s.steps["loss"]) == [d["loss"] for d in dicts]
    assert list(s.steps["grad_norm"]) == [d["grad_norm"] for d in dicts]
    assert s.meta.framework == "axolotl"  # its memory/ keys: the Trainer run by axolotl


def test_a_derived_world_size_below_a_rank_the_log_shows_gives_way(tmp_path):
    """The two-rank log's banner of rank 1, as if rank 5 had written it: 128 / (1 x 64) = 2 cannot be the job's."""
    text = (DATA / "llamafactory_deepseek_2gpu_running_log.txt").read_text(encoding="utf-8")
    text = text.replace("Process rank: 1, device: cuda:1", "Process rank: 5, device: cuda:5")
    (tmp_path / "running_log.txt").write_text(text, encoding="utf-8")
    s = logkit.load_session(tmp_path / "running_log.txt")
    assert s.meta.world_size == 6 and s.meta.world_size_from.startswith("inferred") \
        and "lower bound" in s.meta.world_size_from
    assert s.meta.gpu_count is None  # nothing to multiply n_gpu by


# --- a plain training loop: PyTorch's MNIST example and its copies -------------------------------------------
MNIST_LOSSES = [2.3000, 2.2135, 2.1705, 2.0767, 1.8682, 1.4141, 0.0755, 0.1176, 0.1918, 0.2067, 0.0639]  # lines 9-21


def test_train_epoch_lines_are_the_runs_losses():
    s = load("mnist_eks_doc_kubectl_logs_loss_eq.txt")
    assert s.steps["loss"].tolist() == MNIST_LOSSES  # in the order logged
    assert set(s.steps["epoch"]) == {1.0}
    assert not [t for t in unmatched(s) if "Train Epoch" in t]


def test_train_epoch_lines_as_the_example_prints_them(tmp_path):
    # a variation made here: the same lines as pytorch/examples' mnist/main.py prints them ("\tLoss: {:.6f}"),
    # unindented, the tab turned into spaces as a terminal copy does, and a Slurm .out around them
    text = (DATA / "mnist_eks_doc_kubectl_logs_loss_eq.txt").read_text(encoding="utf-8")
    body = "\n".join(re.sub(r"\tloss=(\S+)", lambda m: f"        Loss: {float(m[1]):.6f}", line.strip())
                     for line in text.splitlines() if "Train Epoch" in line)
    path = tmp_path / "slurm-20471.out"
    path.write_text("/home/user\n" + body + "\n\nTest set: Average loss: 0.0468, Accuracy: 9842/10000 (98%)\n",
                    encoding="utf-8")
    s = logkit.load_session(path)
    assert s.steps["loss"].tolist() == MNIST_LOSSES
    assert s.steps["loss"].min() == 0.0639


def test_a_train_epoch_line_with_no_loss_is_no_step(tmp_path):
    path = tmp_path / "train.log"
    path.write_text("Train Epoch: 1 [0/60000 (0%)]\tLoss: 2.282550\nTrain Epoch: 1 [640/60000 (1%)]\tLoss:\n",
                    encoding="utf-8")
    s = logkit.load_session(path)
    assert s.steps["loss"].tolist() == [2.282550]
    assert any("Train Epoch: 1 [640/60000" in t for t in unmatched(s))  # kept as a diagnostic with its line


# --- transformers' Trainer printing into a file: dicts glued to the bar ----------------------------------------
def test_a_dict_glued_to_the_bar_it_cleared_is_read():
    s = load("transformers_28683_bar_glued_eval_dicts.log")
    evals = s.evals[s.evals["name"] == "eval_loss"]
    # line 1 (after "4.69s/it]") and line 2
    assert evals["value"].tolist() == [0.6620487570762634, 0.6605485081672668]
    assert evals["epoch"].tolist() == [49.41, 50.0]
    assert (s.meta["progress"]["step"], s.meta["progress"]["total"]) == (850, 850)
    assert not unmatched(s)


def test_a_loss_glued_to_a_redrawn_bar_and_the_bars_after_training(tmp_path):
    # a variation made here: a training bar redrawn with CR, a loss dict glued after "it/s]", the eval dict of the
    # excerpt, the Trainer's final summary, then trainer.evaluate()'s own bar (0/4 .. 4/4): its n/total is an
    # evaluation's, not the run's progress, which stays 850/850
    bar = "\r".join(f"{k * 100 // 850:3d}%|          | {k}/850 [00:0{k % 10}<00:10,  2.79it/s]" for k in (848, 849))
    evaluate = "\r".join(f"{k * 25:3d}%|          | {k}/4 [00:00<00:00,  7.44it/s]" for k in range(5))
    body = (bar + "{'loss': 0.1306, 'grad_norm': 6.8, 'learning_rate': 2.1e-08, 'epoch': 49.99}\n"
            + (DATA / "transformers_28683_bar_glued_eval_dicts.log").read_text(encoding="utf-8")
            + "{'train_runtime': 6061.2, 'train_samples_per_second': 8.4, 'train_steps_per_second': 0.14, "
              "'train_loss': 0.29, 'epoch': 50.0}\n" + evaluate + "\n")
    path = tmp_path / "slurm-1.out"
    path.write_text(body, encoding="utf-8")
    s = logkit.load_session(path)
    assert s.steps["loss"].tolist() == [0.1306]
    assert len(s.evals[s.evals["name"] == "eval_loss"]) == 2
    assert (s.meta["progress"]["step"], s.meta["progress"]["total"], s.meta["progress"]["line"]) == (850, 850, 2)


# --- a DeepSpeed config kept beside a run's logs -------------------------------------------------------------
def test_a_deepspeed_config_in_the_output_folder_states_the_zero_stage(tmp_path):
    # a variation made here: LLaMA-Factory's ds_z2_config.json, under a name of the run's own, beside the
    # trainer_log.jsonl of llamafactory_mistral_translator (one session, its losses and the config's stage)
    folder = tmp_path / "output"
    folder.mkdir()
    (folder / "my_z2.json").write_bytes((DATA / "llamafactory_ds_z2_config.json").read_bytes())
    (folder / "trainer_log.jsonl").write_bytes((DATA / "llamafactory_mistral_translator" / "trainer_log.jsonl")
                                              .read_bytes())
    sessions = logkit.load_sessions(folder)
    assert len(sessions) == 1
    s = sessions[0]
    assert s.meta["zero_stage"] == 2 and s.meta["facts_source"]["zero_stage"] == "my_z2.json:19"  # line 19
    assert len(s.steps) > 0 and s.diagnostics.empty


def test_a_stage_that_is_no_zero_stage_is_a_diagnostic(tmp_path):
    path = tmp_path / "ds_config.json"
    path.write_text((DATA / "llamafactory_ds_z2_config.json").read_text(encoding="utf-8")
                    .replace('"stage": 2', '"stage": 5'), encoding="utf-8")
    s = logkit.load_session(path)
    assert s.meta.get("zero_stage") is None
    assert s.diagnostics["line"].tolist() == [19] and "no ZeRO stage" in s.diagnostics["reason"].iloc[0]
