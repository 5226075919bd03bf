"""A training loop's step record written as key=value fields after a counter (``step=5 loss=3.6606 ...``:
ezpz/wordplay's trainer, NeMo Automodel's EAGLE recipe), and NeMo Automodel's fine-tuning recipe's ``key value``
fields between bars: steps with their loss, learning rate and gradient norm, alone in a folder too. Real excerpts
(tests/data/key_value_steps/README.md) and variations said to be made here; expected values read off the lines
by eye."""

from __future__ import annotations

import logkit
from tests.support.excerpts import load, reader

text = reader("key_value_steps")


def test_key_value_records_behind_a_bar_and_a_prefix_are_steps(tmp_path):
    s = load(tmp_path, text("wordplay_ddp_hw6_key_value_steps.log"))
    rows = s.steps[s.steps["loss"].notna()]
    # lines 1-4: step=5 loss=3.6606, step=10 loss=3.2386, step=15 loss=2.9490, step=100 loss=2.4075; the
    # train_loss=4.2922 and val_loss=4.2905 after them are no step's loss
    assert rows[["step", "loss"]].values.tolist() == [[5, 3.6606], [10, 3.2386], [15, 2.949], [100, 2.4075]]


def test_key_value_records_alone_in_a_folder(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "train.log").write_text(text("wordplay_ddp_hw6_key_value_steps.log"), encoding="utf-8")
    found = logkit.load_sessions(folder)
    assert len(found) == 1 and found[0].steps["loss"].dropna().iloc[-1] == 2.4075  # line 4


def test_key_value_record_with_learning_rate_and_grad_norm(tmp_path):
    # variation: the wordplay record in NeMo Automodel's EAGLE recipe's fields, behind its pipe prefix
    body = ("2025-03-02 10:00:01 | INFO | nemo_automodel.recipes.llm.train_eagle1 | epoch=1 step=40 loss=3.1250 acc=0.21"
            " lr=1.5e-05 grad_norm=0.75 hidden_loss=2.0 rank_loss=19.5 token_loss=5.1\n")
    s = load(tmp_path, body)
    row = s.steps.iloc[0]
    assert (row["step"], row["loss"], row["learning_rate"], row["grad_norm"]) == (40, 3.125, 1.5e-05, 0.75)


def test_key_value_pairs_without_a_loss_are_no_step(tmp_path):
    # variation: a record of the same shape that carries no loss (a data loader's) is no step
    s = load(tmp_path, "[2024-04-02 01:59:46][INFO][loader:12] - step=5 tokens=65536 shards=4\n")
    assert s.steps["loss"].dropna().empty


def test_fields_between_bars_keep_their_grad_norm(tmp_path):
    s = load(tmp_path, text("nemo_automodel_3473_step_bar_lines.log"))
    # line 1: step 9 | epoch 0 | loss 0.6974 | grad_norm 1.5436 | lr 1.00e-05
    row = s.steps[s.steps["step"] == 9].iloc[0]
    assert (row["loss"], row["grad_norm"], row["learning_rate"]) == (0.6974, 1.5436, 1e-05)
