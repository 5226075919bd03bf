"""A folder holding only the Trainer's printed dicts (its end-of-training summary, an evaluation's) is a
training log's folder: its session is found, as the file given by name is. The real summary line of
``tests/data/frameworks/transformers_train_metrics_10488.log`` (cited in its README) and variations made
here; expected values read off the line by eye."""

from __future__ import annotations

import pytest

import logkit
from tests.support.excerpts import reader

text = reader("frameworks")


def _folder_session(tmp_path, body: str):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.log").write_text(body, encoding="utf-8")
    found = logkit.load_sessions(tmp_path / "run")
    assert len(found) == 1
    return found[0]


def test_the_final_summary_dict_alone(tmp_path):
    # line 1: {'train_runtime': '2219', ..., 'train_loss': '0.7228', 'epoch': '3'}
    line = text("transformers_train_metrics_10488.log").splitlines()[0]
    s = _folder_session(tmp_path, line + "\n")
    assert s.meta.duration_s == 2219 and s.meta.train_loss == pytest.approx(0.7228)


def test_numbers_as_numbers(tmp_path):
    # variation: the Trainer's own form, numbers as numbers
    s = _folder_session(tmp_path, "{'train_runtime': 5.8, 'train_samples_per_second': 1.2, "
                                  "'train_steps_per_second': 1.2, 'train_loss': 2.1, 'epoch': 1.0}\n")
    assert s.meta.duration_s == 5.8 and s.meta.framework == "transformers"


def test_an_evaluations_dict_alone(tmp_path):
    # variation: transformers#28683's eval dict (tests/data/frameworks, line 2's keys) alone
    s = _folder_session(tmp_path, "{'eval_loss': 0.6620487570762634, 'eval_runtime': 12.3, 'epoch': 50.0}\n")
    assert s.evals.loc[s.evals["name"] == "eval_loss", "value"].tolist() == [0.6620487570762634]


def test_a_dict_of_other_keys_is_no_training_log(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("{'name': 'x', 'size': 3}\n", encoding="utf-8")
    assert logkit.load_sessions(tmp_path / "run") == []
