"""The model card the Trainer writes (``README.md``): its hyperparameter list states the world size and the
total batch. A real card's section (``tests/data/frameworks/model_card_4gpu/``, cited in the folder's README)
and variations said to be made here; expected values read off the lines by eye."""

from __future__ import annotations

import shutil

import logkit
from tests.support.launch import REPO

CARD = REPO / "tests" / "data" / "frameworks" / "model_card_4gpu" / "README.md"
RESULTS = '{"epoch": 2.94, "train_loss": 0.81, "train_runtime": 1200.5, "train_samples_per_second": 10.6}'


def test_a_model_card_beside_the_results_states_the_devices_and_the_batch(tmp_path):
    # a run folder: the card and an all_results.json (made here: the card's repository keeps no results file)
    shutil.copy(CARD, tmp_path / "README.md")
    (tmp_path / "all_results.json").write_text(RESULTS, encoding="utf-8")
    (s,) = logkit.load_sessions(tmp_path)
    assert s.meta["world_size"] == 4 and s.meta["gpu_count"] == 4  # line 11: num_devices: 4
    assert s.meta["total_batch_size"] == 128  # line 13: total_train_batch_size: 128
    assert s.meta["world_size_from"].startswith("stated") and s.meta["facts_source"]["world_size"].endswith(":11")
    assert s.meta["duration_s"] == 1200.5


def test_a_single_device_card_states_no_device_count(tmp_path):
    # variation: the Trainer leaves distributed_type and num_devices out on one device; the total is then
    # train_batch_size x gradient_accumulation_steps (8 x 4 = 32)
    body = CARD.read_text().replace("- distributed_type: multi-GPU\n- num_devices: 4\n", "").replace(
        "total_train_batch_size: 128", "total_train_batch_size: 32")
    (tmp_path / "README.md").write_text(body, encoding="utf-8")
    (tmp_path / "all_results.json").write_text(RESULTS, encoding="utf-8")
    (s,) = logkit.load_sessions(tmp_path)
    assert s.meta["total_batch_size"] == 32
    assert s.meta["gpu_count"] is None


def test_a_readme_without_the_list_is_no_model_card(tmp_path):
    (tmp_path / "README.md").write_text("# My run\n\nTrained on 4 GPUs with a batch of 128.\n", encoding="utf-8")
    (tmp_path / "all_results.json").write_text(RESULTS, encoding="utf-8")
    (s,) = logkit.load_sessions(tmp_path)
    assert s.meta["total_batch_size"] is None
