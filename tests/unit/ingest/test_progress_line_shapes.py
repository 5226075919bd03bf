"""Three shapes of training progress lines a console capture holds (``tests/data/progress_lines/``, cited
in its README), with variations made here; expected values read off the lines by eye:

- an iteration line whose counter is followed by its percentage (ArcticTraining's ``iter:  130/3000   4% |``),
  each process printing its own, untagged;
- ms-swift's log records as JSON, one a line (lines of one width are no terminal's wrap), one cut short;
- Python logging with a UTC date and a padded level (``2025-08-14T23:41:27Z INFO     ...``)."""

from __future__ import annotations

import logkit
from tests.support.launch import REPO

DATA = REPO / "tests" / "data" / "progress_lines"


def _write(tmp_path, lines: list[str]):
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return logkit.load_session(path)


# --- the counter followed by its percentage ------------------------------------------------------------
def test_arctictraining_lines_of_its_print_summary():
    s = logkit.load_session(DATA / "arctictraining_print_summary_format.log")
    # lines 1-4: iter 1 twice (two processes), 2, 250 of 500; "iter time: 2.3 s" (a unit after a space)
    assert s.steps[["step", "loss"]].values.tolist() == [[1, 11.2345], [1, 11.3012], [2, 10.9876], [250, 3.4567]]
    assert s.steps["step_time_s"].tolist() == [2.3, 2.4, 1.9, 1.8]
    assert s.steps["learning_rate"].tolist() == [1e-05, 1e-05, 2e-05, 1e-04]
    assert (s.meta.progress["step"], s.meta.progress["total"], s.meta.progress["line"]) == (250, 500, 4)
    assert s.diagnostics.empty


def test_a_counter_with_a_percentage_in_a_folder(tmp_path):
    # variation: the newer line ("1.038s"), alone in a folder: found as a session
    folder = tmp_path / "run"
    folder.mkdir()
    (folder / "out.log").write_text(
        "iter:  10/100  10% | loss: 2.5000 | iter time: 1.038s | lr: 1.000E-04 | epoch: 0\n"
        "iter:  20/100  20% | loss: 2.2500 | iter time: 0.996s | lr: 1.000E-04 | epoch: 0\n", encoding="utf-8")
    (s,) = logkit.load_sessions(folder)
    assert s.steps[["step", "loss", "step_time_s"]].values.tolist() == [[10, 2.5, 1.038], [20, 2.25, 0.996]]


def test_a_percentage_is_no_step_without_a_loss(tmp_path):
    # variation: the counter and percentage with no loss on the line: no step row
    s = _write(tmp_path, ["iter:  10/100  10% | iter time: 1.0 s | lr: 1.000E-04"])
    assert s.steps.empty


# --- ms-swift's JSON records ---------------------------------------------------------------------------
def test_json_records_of_one_width_are_not_joined():
    s = logkit.load_session(DATA / "onevl_6_ms_swift_json_records.log")
    # lines 1-4: steps 1770..1785 of 3228 (lines 1 and 4 are of one width: no wrap)
    assert s.steps[["step", "loss"]].values.tolist() == [
        [1770, 0.31405878], [1775, 0.30831275], [1780, 0.30919123], [1785, 0.30667906]]
    assert s.steps["grad_norm"].tolist() == [0.26923865, 0.35303295, 0.28300717, 0.40353647]
    assert (s.meta.progress["step"], s.meta.progress["total"]) == (1785, 3228)
    assert s.diagnostics.empty


def test_a_record_cut_short_keeps_its_whole_values(tmp_path):
    lines = (DATA / "onevl_6_ms_swift_json_records.log").read_text(encoding="utf-8").splitlines()
    # variation: an eval record at the last step, then the summary cut inside "train_loss"'s value
    lines += ['{"eval_loss": 0.41234567, "eval_token_acc": 0.85, "eval_runtime": 12.5, "epoch": 1.10594796, '
              '"global_step/max_steps": "1785/3228", "elapsed_time": "3h 43m 10s", "remaining_time": "6h 3m 0s"}',
              '{"train_runtime": 13390.25, "train_samples_per_second": 2.1, "train_steps_per_second": 0.133, "train_loss": 0.3']
    s = _write(tmp_path, lines)
    ev = s.evals[s.evals["name"] == "eval_loss"]
    assert ev[["step", "value"]].values.tolist() == [[1785, 0.41234567]]
    assert s.meta.duration_s == 13390.25 and s.meta.steps_per_second == 0.133
    assert s.meta.train_loss is None  # its value was cut: "0.3" is not what the run said
    (note,) = s.diagnostics.to_dict("records")
    assert note["line"] == 6 and "cut short" in note["reason"]


def test_a_printed_dict_cut_before_any_whole_value_is_not_read(tmp_path):
    # variation: Python's printed dict cut inside its first value: nothing whole, nothing read
    s = _write(tmp_path, ["{'loss': 0.5"])
    assert s.steps.empty and len(s.diagnostics) == 1


def test_a_closed_dict_with_text_after_it_is_not_taken_for_a_cut_one(tmp_path):
    # variation: a whole dict, then other text on its line: not read as a dict cut short (its last pair kept
    # or nothing read, never a "cut short" note)
    s = _write(tmp_path, ["{'loss': 0.5, 'learning_rate': 1e-05, 'epoch': 0.1} and more"])
    assert not s.diagnostics["reason"].str.contains("cut short").any()


# --- Python logging with a UTC date and a padded level -------------------------------------------------
def test_katib_lines_are_logging_records():
    s = logkit.load_session(DATA / "katib_2020_utc_stamp_padded_level_mxnet.log")
    # every line a logging record (INFO): none "not understood"
    assert s.diagnostics.empty


def test_train_epoch_lines_under_a_utc_date_and_padded_level(tmp_path):
    # variation: Kubeflow's MNIST lines under that format, a warning, and a date with an offset
    s = _write(tmp_path, [
        "2025-08-14T23:41:27Z INFO     Train Epoch: 1 [1920/60000 (3%)]    loss=2.2376",
        "2025-08-14T23:41:31Z INFO     Train Epoch: 1 [2560/60000 (4%)]    loss=2.1059",
        "2025-08-14T23:42:47Z WARNING  Dataloader worker 1 is slow",
        "2025-08-14T23:42:50+00:00 INFO     Train Epoch: 1 [3200/60000 (5%)]    loss=1.7948",
    ])
    assert s.steps["loss"].tolist() == [2.2376, 2.1059, 1.7948]
    assert s.steps["time_s"].tolist() == [0.0, 4.0, 83.0]  # seconds after 23:41:27
    (warn,) = s.events[s.events["kind"] == "warning"].to_dict("records")
    assert warn["level"] == "WARNING" and warn["time_s"] == 80.0 and warn["message"] == "Dataloader worker 1 is slow"
    assert s.diagnostics.empty
