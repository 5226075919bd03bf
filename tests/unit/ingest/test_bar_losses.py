"""A training progress bar's own loss (in its label or its postfix) and its rate as steps rows; a
Trainer log dict printed as JSON or pasted without its opening brace; a launcher's kill lines as
the launcher's. Expected values are read off the excerpts in tests/data/bar_losses (README there)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

import logkit
from logkit.ingest.readers import torch_lines as tl

DATA = Path(__file__).resolve().parents[2] / "data" / "bar_losses"


def test_lightning_bar_postfix_loss_and_rate():
    s = logkit.load_session(DATA / "nemo_speech_5468_lightning_bar.log")
    losses = s.steps["loss"].dropna()
    assert losses.iloc[-1] == pytest.approx(1.63)  # line 13: "7/517 [...,  1.66it/s, loss=1.63]"
    assert losses.iloc[0] == pytest.approx(1.67)  # line 2: "1/517 [...,  1.89s/it, loss=1.67]"
    times = s.steps["step_time_s"].dropna()
    assert (times - 1.89).abs().min() < 1e-9  # line 1: "1.89s/it"
    assert (times - 1 / 1.66).abs().min() < 1e-9  # line 13: "1.66it/s", so 1/1.66 s a step
    assert (s.meta["progress"]["step"], s.meta["progress"]["total"]) == (7, 517)
    assert s.meta["progress"]["line"] == 13


def test_torchtune_label_loss_under_a_torchx_prefix():
    # torchtune PR 2620's log line (README): the loss is in the bar's label, n/total and s/it in its body
    line = "[trainer0|0]:1|55|Loss: 1.0744975805282593:  55%|█████▌    | 56/101 [15:19<11:17, 15.06s/it]"
    assert tl.parse_bar(line) == {"step": 56, "loss": pytest.approx(1.0744975805282593), "step_time_s": 15.06}


def test_bar_variations():
    # reduced_train_loss is not the bar's loss; a bar naming no loss and no rate gives no row
    bar = "Epoch 0:   1%|          | 795/77225 [9:07:58<878:01:48, 41.36s/it, reduced_train_loss=3.090, loss=2.5]"
    assert tl.parse_bar(bar)["loss"] == 2.5
    assert tl.parse_bar("Epoch 0:   0%|          | 0/517 [00:00<?, ?it/s]") is None
    # another phase's bar (vLLM's generation) is no training step
    assert tl.parse_bar("Processed prompts: 100%|██████████| 16/16 [00:12<00:00,  1.27it/s]") is None


def test_a_trainer_bar_redrawn_at_every_step_adds_no_rows_where_log_dicts_log_the_steps(tmp_path):
    p = tmp_path / "train.log"
    p.write_text(" 50%|█████     | 1/2 [00:01<00:01,  1.20s/it]\n{'loss': 2.5, 'learning_rate': 1e-05, 'epoch': 0.5}\n"
                 "100%|██████████| 2/2 [00:02<00:00,  1.10s/it]\n{'loss': 2.25, 'learning_rate': 1e-05, 'epoch': 1.0}\n")
    s = logkit.load_session(p)
    assert list(s.steps["loss"]) == [2.5, 2.25]
    assert s.steps["step_time_s"].isna().all()


def test_deepspeed_kill_lines_alone_are_deepspeeds():
    s = logkit.load_session(DATA / "deepspeed_3232_sigkill_lines.log")
    assert s.meta["framework"] == "deepspeed"  # line 1: "[launch.py:428:sigkill_handler] Killing subprocess"


@pytest.mark.parametrize("shape", ["python", "json", "headless_python", "headless_json"])
def test_ms_swift_log_dict_shapes(tmp_path, shape):
    lines = (DATA / "ms_swift_4146_dpo_log_dict.log").read_text().splitlines()
    if "json" in shape:  # the same records as ms-swift's logging.jsonl writes them
        lines = [json.dumps(ast.literal_eval(ln)) for ln in lines]
    if "headless" in shape:  # a paste that starts at the first key
        lines[0] = lines[0][1:]
    p = tmp_path / "swift.log"
    p.write_text("\n".join(lines) + "\n")
    s = logkit.load_session(p)
    assert s.meta["framework"] == "ms-swift"
    assert (s.meta["progress"]["step"], s.meta["progress"]["total"]) == (57, 176)  # line 2: '57/176'
    assert list(s.steps["loss"]) == [pytest.approx(0.23179118), pytest.approx(0.21862793)]
    assert list(s.steps["step"]) == [56, 57]


def test_other_json_in_a_console_log_is_no_log_dict(tmp_path):
    # a tool's JSON record (no Trainer key) among a run's lines gives no steps row
    p = tmp_path / "run.log"
    p.write_text('{"event": "checkpoint", "step": 3}\n{"loss": 1.5, "epoch": 0.1}\n')
    s = logkit.load_session(p)
    assert list(s.steps["loss"]) == [1.5]


def test_whole_bars_of_one_width_are_records_of_their_own(tmp_path):
    # the llama-recipes shape (four processes' bars, no rank named, lines of one width): a variation of
    # real_world's llama_cookbook_206 with other losses; each whole bar is a record, not a wrapped line's rest
    bar = "Training Epoch: 1/3, step 9/10 completed (loss: {}): 100%|██████████| 10/10 [01:40<00:00, 10.05s/it]\n"
    p = tmp_path / "bars.log"
    p.write_text("".join(bar.format(x) for x in ("2.125", "2.250", "2.375", "2.500")))
    s = logkit.load_session(p)
    assert list(s.steps["loss"]) == [2.125, 2.25, 2.375, 2.5]
    assert s.meta["progress"]["line"] == 4


def test_a_bar_labelled_loss_states_no_loss():
    # the percentage is no loss: a bar whose label is the word alone states none (a rate only)
    assert tl.parse_bar("Loss: 100%|██████████| 10/10 [00:10<00:00,  1.00s/it]") == {
        "step": 10, "loss": None, "step_time_s": 1.0}
