"""A script's own training output: tqdm bars with a label (``steps:``, ``Training:``, datasets' ``Map:``,
``Evaluating:``) and its epoch summary (``Epoch: 0, Average Training Loss: X, Average Evaluation Loss: Y``).
A bar's label is no host prefix; a bar of another phase is not the run's progress. A real excerpt
(``tests/data/frameworks/``, cited in its README) and variations said to be made here; expected values read
off the lines by eye."""

from __future__ import annotations

from tests.support.excerpts import load, reader

text = reader("frameworks")


def test_a_labelled_training_bar_is_the_progress(tmp_path):
    s = load(tmp_path, text("lora_comfy_107_labelled_steps_bars.log"))
    # line 12: "steps:  32%|...| 256/800 [01:06<02:21, ...]"
    assert (s.meta["progress"]["step"], s.meta["progress"]["total"], s.meta["progress"]["line"]) == (256, 800, 12)
    assert s.meta.get("hosts") in (None, [])  # "steps" is the bar's label, not a host


def test_a_data_or_evaluation_bar_after_training_is_not_the_progress(tmp_path):
    # variation: datasets' Map bar and an evaluation's bar after the excerpt's last training bar
    body = text("lora_comfy_107_labelled_steps_bars.log") + (
        "Map: 100%|███████████████████| 669/669 [00:00<00:00, 3076.21 examples/s]\n"
        "Evaluating: 100%|███████████████████| 2/2 [00:19<00:00,  9.58s/it]\n")
    s = load(tmp_path, body)
    assert (s.meta["progress"]["step"], s.meta["progress"]["total"]) == (256, 800)


def test_an_epoch_summary_is_a_loss_and_an_evaluation(tmp_path):
    # variation: the excerpt's epochs closed by a script's summary lines (two wordings)
    body = text("lora_comfy_107_labelled_steps_bars.log") + (
        "Epoch: 16, Average Training Loss: 0.3125, Average Evaluation Loss: 0.4012\n"
        "epoch 17 | train loss 0.2980 | val loss 0.3990\n")
    s = load(tmp_path, body)
    assert list(s.steps["loss"]) == [0.3125, 0.2980] and list(s.steps["epoch"]) == [16, 17]
    ev = s.evals[s.evals["name"] == "eval_loss"]
    assert list(ev["value"]) == [0.4012, 0.3990] and list(ev["epoch"]) == [16, 17]


def test_a_line_about_loss_that_is_no_summary_is_not_read_as_one(tmp_path):
    s = load(tmp_path, "Epoch: 3, the training loss went up\n")
    assert s.steps.empty
