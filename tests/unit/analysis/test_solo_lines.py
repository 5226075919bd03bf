"""A console whose main process was last seen saving or evaluating when the other ranks' collective timed out:
the timeout finding says so. Real excerpts in tests/data/solo_work (README there: expected values read off
the files by eye), and variations made here from their watchdog lines with the save and evaluation lines the
Trainer, accelerate, DeepSpeed, Lightning, torchtune and Megatron print (each line as its source code writes it)."""

from __future__ import annotations

from pathlib import Path

import pytest

import logkit
from logkit.analysis.findings.log_findings import event_findings
from logkit.ingest.readers.phase_lines import phase_of

DATA = Path(__file__).resolve().parents[2] / "data" / "solo_work"
UFLD = DATA / "ufld_119_eval_rank0_watchdog.log"
MMDET = DATA / "mmdet_11096_coco_eval_rank0_watchdog.log"
# the UFLD excerpt's three watchdog lines (ranks 3, 1, 2; SeqNum 4178), kept for the variations
WATCHDOG = UFLD.read_text().splitlines()[1:4]


def _timeout(path: Path) -> dict:
    (f,) = [f.to_dict() for f in event_findings(logkit.load_session(path)) if f.kind == "nccl_timeout"]
    return f


def test_rank_0_evaluating_alone_before_three_ranks_time_out():
    f = _timeout(UFLD)
    assert f["ranks"] == [1, 2, 3] and f["seq"] == 4178  # lines 2-4: ranks 3, 1, 2 at SeqNum 4178
    assert f["last_seen_phase"] == {"rank": 0, "phase": "eval"}
    assert "was last seen evaluating (line 1: 'Evaluating the results...')" in f["detail"]
    assert "rank(s) 1, 2, 3 waited in the collective" in f["detail"]
    assert f["evidence"][0] == "ufld_119_eval_rank0_watchdog.log:1"


def test_mmdetection_coco_evaluation_on_rank_0():
    f = _timeout(MMDET)
    assert f["ranks"] == [2, 3, 4, 6] and f["ops"] == ["BROADCAST"]  # lines 9-12
    assert f["last_seen_phase"] == {"rank": 0, "phase": "eval"}
    assert "(line 7: 'Running per image evaluation...')" in f["detail"]  # the last evaluation line before them


SAVE_LINES = [
    # transformers' Trainer through LLaMA-Factory's log format (trainer.py: "Saving model checkpoint to {output_dir}")
    "[INFO|trainer.py:3705] 2024-11-29 11:26:55,117 >> Saving model checkpoint to saves/llama3/lora/checkpoint-500",
    # accelerate's save_state
    "11/29/2024 11:26:55 - INFO - accelerate.accelerator - Saving current state to out/step_500",
    # DeepSpeed's engine before it writes a checkpoint
    "[2024-11-29 11:26:55,117] [INFO] [logging.py:96:log_dist] [Rank 0] [Torch] Checkpoint global_step500 is about "
    "to be saved!",
    # Lightning's ModelCheckpoint(verbose=True)
    "Epoch 3, global step 500: 'val_loss' reached 0.41230 (best 0.41230), saving model to "
    "'/runs/ckpt/epoch=3-step=500.ckpt' as top 1",
    # torchtune's recipes
    "INFO:torchtune.utils._logging:Saving checkpoint. This may take some time. Retrieving full model state dict...",
    # Megatron-LM
    " saving checkpoint at iteration     500 to /checkpoints/gpt",
]


@pytest.mark.parametrize("line", SAVE_LINES)
def test_each_frameworks_save_line_before_the_timeout(tmp_path, line):
    path = tmp_path / "console.log"
    path.write_text("\n".join([line, *WATCHDOG]) + "\n")
    f = _timeout(path)
    assert f["last_seen_phase"] == {"rank": 0, "phase": "save"} and "was last seen saving a checkpoint" in f["detail"]
    assert f["evidence"][0] == "console.log:1"


def test_a_rank_prefixed_line_names_its_rank(tmp_path):
    path = tmp_path / "console.log"
    # torchrun --tee's prefix on rank 0's save line; ranks 1-3 timed out
    path.write_text("\n".join(["[rank0]: " + SAVE_LINES[0], *WATCHDOG]) + "\n")
    assert _timeout(path)["last_seen_phase"] == {"rank": 0, "phase": "save"}
    assert "Rank 0 was last seen saving" in _timeout(path)["detail"]


def test_nothing_is_said_when_training_went_on_or_the_saver_timed_out_too(tmp_path):
    path = tmp_path / "console.log"
    # the save ended: a training log dict after it, then the timeouts (their cause is elsewhere)
    resumed = [SAVE_LINES[0], "{'loss': 0.8123, 'grad_norm': 1.41, 'learning_rate': 4.3e-06, 'epoch': 0.57}"]
    path.write_text("\n".join([*resumed, *WATCHDOG]) + "\n")
    assert "last_seen_phase" not in _timeout(path)
    # rank 3 printed the save line and timed out itself: it was not alone at work
    path.write_text("\n".join(["[rank3]: " + SAVE_LINES[0], *WATCHDOG]) + "\n")
    assert "last_seen_phase" not in _timeout(path)
    # no save or evaluation line at all
    path.write_text("\n".join(WATCHDOG) + "\n")
    assert "last_seen_phase" not in _timeout(path)


@pytest.mark.parametrize("line", [
    "Gradient checkpointing is enabled", "Model weights saved in out/checkpoint-500/model.safetensors",
    "evaluation_strategy: steps", "[Torch] Checkpoint global_step500 is ready now!", "Loading checkpoint shards",
])
def test_lines_that_are_no_save_or_evaluation_beginning(line):
    assert phase_of(line) is None
