"""What Megatron's iteration lines say of the run beyond each step: Megatron wrote them, the global batch, how
far the run got; and Megatron-DeepSpeed's ``lm_loss`` wording. A real excerpt (``tests/data/frameworks/``,
cited in its README) and variations said to be made here; expected values read off the lines by eye."""

from __future__ import annotations

import pytest

from tests.support.excerpts import load, reader

text = reader("frameworks")


def test_iteration_lines_state_the_framework_the_batch_and_the_progress(tmp_path):
    s = load(tmp_path, text("megatron_llm_11_iteration_lines.log"))
    assert s.meta["framework"] == "megatron"
    assert s.meta["total_batch_size"] == 1024  # every line: global batch size: 1024
    assert (s.meta["progress"]["step"], s.meta["progress"]["total"], s.meta["progress"]["line"]) == (144, 250000, 3)
    assert list(s.steps["loss"]) == [2.466446, 2.455252, 2.473252]


def test_megatron_deepspeed_writes_lm_loss_with_an_underscore(tmp_path):
    # variation: Megatron-DeepSpeed's wording of the same line ("samples/sec" first, "lm_loss")
    body = "".join(" samples/sec: 7.799 |" + ln.replace("lm loss:", "lm_loss:") + "\n"
                   for ln in text("megatron_llm_11_iteration_lines.log").splitlines())
    s = load(tmp_path, body)
    assert list(s.steps["loss"]) == [2.466446, 2.455252, 2.473252]
    assert s.steps["step_time_s"].iloc[0] == pytest.approx(100.8634)  # line 1: 100863.4 ms


def test_a_batch_ramp_up_ends_at_the_run_s_batch(tmp_path):
    # variation: the first line during a batch ramp-up (512), the later ones at 1024
    lines = text("megatron_llm_11_iteration_lines.log").splitlines()
    lines[0] = lines[0].replace("global batch size:  1024", "global batch size:   512")
    s = load(tmp_path, "\n".join(lines) + "\n")
    assert s.meta["total_batch_size"] == 1024
