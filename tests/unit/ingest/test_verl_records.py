"""verl's trainer records (``step:N - key:value - ...``) under Ray's TaskRunner prefix, broken across lines.
A real record (``tests/data/frameworks/``, cited in its README) and variations said to be made here;
expected values read off the lines by eye."""

from __future__ import annotations

import pytest

from tests.support.excerpts import load, reader

text = reader("frameworks")


def test_a_verl_record_is_a_step_of_verl(tmp_path):
    s = load(tmp_path, text("verl_sglang_tutorial_106_step_record_wrapped.log"))
    assert s.meta["framework"] == "verl"
    (row,) = s.steps.to_dict("records")
    # line 1: step:86, actor/pg_loss:0.000, actor/grad_norm:0.006, training/epoch:2.000
    assert (row["step"], row["loss"], row["grad_norm"], row["epoch"]) == (86, 0.0, 0.006, 2.0)
    assert s.diagnostics.empty  # line 2, the record's rest, is read as its rest


def test_the_rest_of_a_broken_record_gives_its_step_time(tmp_path):
    # variation: the record's timing_s/step (verl writes it after timing_s/ref) on the broken line
    body = text("verl_sglang_tutorial_106_step_record_wrapped.log").rstrip("\n") + " - timing_s/step:44.812\n"
    s = load(tmp_path, body)
    assert s.steps["step_time_s"].tolist() == [pytest.approx(44.812)]


def test_two_records_are_two_steps(tmp_path):
    # variation: the record twice, the second for step 87 with another loss
    one = text("verl_sglang_tutorial_106_step_record_wrapped.log")
    two = one.replace("step:86", "step:87").replace("actor/pg_loss:0.000", "actor/pg_loss:0.125")
    s = load(tmp_path, one + two)
    assert s.steps["step"].tolist() == [86, 87] and s.steps["loss"].tolist() == [0.0, 0.125]
