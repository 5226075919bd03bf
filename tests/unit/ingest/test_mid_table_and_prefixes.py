"""Round 5's first-sight misses as classes: torchrun's failure table pasted from its middle; torch
elastic's prefix in any role and template, and a launcher prefix glued to the end of a progress bar; a
bar whose postfix states the step's time and the loss under a framework's name (NeMo); a script's own
counter and loss lines, each process's. Expected values are read off the excerpts in
tests/data/failure_tables and tests/data/console_prefixes (READMEs there) and off the corpus files named."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest

import logkit
from logkit.ingest.readers import normalise
from logkit.ingest.readers import torch_lines as tl
from logkit.ingest.readers.console_shapes import GRAMMAR
from logkit.ingest.readers.prefixes import peel
from logkit.ingest.readers.script_lines import ScriptLines
from tests.support.launch import REPO

DATA = Path(__file__).resolve().parents[2] / "data"
TABLE = DATA / "failure_tables" / "insightface_2182_table_from_failures.log"
CORPUS = REPO / "sample_logs" / "real_world" / "console"


def _failed(s):
    ev = s.events[s.events["kind"] == "child_failed"]
    return {int(src.rsplit(":", 1)[1]): row for src, row in zip(ev["source"], ev.to_dict("records"), strict=True)}


# --- torchrun's failure table from its middle ---------------------------------------------------------
def test_a_table_pasted_from_its_failures_line_is_read():
    s = logkit.load_session(TABLE)
    failed = _failed(s)
    assert sorted(failed) == [2, 9, 16, 25]  # the "[1]:", "[2]:", "[3]:" and root cause "[0]:" lines
    assert [(failed[n]["rank"], failed[n]["pid"], failed[n]["exitcode"]) for n in (2, 9, 16)] == \
        [(1, 49149, 1), (2, 49150, 1), (3, 49151, 1)]  # lines 5-6, 12-13, 19-20
    assert failed[25]["root_cause"] is True and failed[25]["host"] == "GPU236"  # line 27, cut after it
    assert not any(failed[n]["root_cause"] for n in (2, 9, 16))
    assert s.meta["framework"] == "torchrun" and s.diagnostics.empty
    assert s.meta["world_size"] == 4 and "lower bound" in s.meta["world_size_from"]  # rank 3 seen, nothing stated


def test_a_table_cut_inside_an_entry_keeps_that_entry(tmp_path):
    # the same table from entry [1]'s host line (its "[1]:" and time lines cut): the entry cites its first field
    lines = TABLE.read_text(encoding="utf-8").splitlines()[3:]
    p = tmp_path / "cut.log"
    p.write_text("\n".join(lines) + "\n", encoding="utf-8")
    failed = _failed(logkit.load_session(p))
    assert failed[1]["rank"] == 1 and failed[1]["pid"] == 49149 and failed[1]["host"] == "GPU236"
    assert sorted(failed) == [1, 6, 13, 22]
    assert failed[22]["root_cause"] is True


def test_a_table_from_its_root_cause_line_and_a_folder_finds_it(tmp_path):
    lines = TABLE.read_text(encoding="utf-8").splitlines()[23:]  # "Root Cause (first observed failure):" on
    run = tmp_path / "run"
    run.mkdir()
    (run / "err.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    (found,) = logkit.load_sessions(run)
    failed = _failed(found)
    assert list(failed) == [2] and failed[2]["root_cause"] is True and found.meta["framework"] == "torchrun"


def test_fields_that_are_not_torch_padded_layout_open_no_table(tmp_path):
    # a printed config's "rank: 0" / "host: gpu1" is no failure entry: torch pads each key to ten characters
    p = tmp_path / "config.log"
    p.write_text("Traceback (most recent call last):\n  host: gpu1\n  rank: 0\n  exitcode: 1\n", encoding="utf-8")
    assert _failed(logkit.load_session(p)) == {}


# --- launcher prefixes ---------------------------------------------------------------------------------
@pytest.mark.parametrize("line, rank, text", [
    ("[trainer0]:hello", 0, "hello"),  # torch elastic's default template with torchx's role name
    ("[trainer3|1]:x", 3, "x"),  # "[${role_name}${rank}|${local_rank}]:"
    ("[workers/5|1]:x", 5, "x"),  # a task group, then "${rank}|${local_rank}"
    ("[default2]:[rank2]: y", 2, "y"),  # nested, as before
])
def test_torch_elastic_prefix_in_any_role_and_template(line, rank, text):
    s = peel(line)
    assert (s.rank, s.text) == (rank, text)


def test_the_watchdog_tag_and_a_plain_bracket_are_no_prefix():
    assert peel("[Rank 1] Watchdog caught collective operation timeout").rank is None
    assert peel("[1] loss: 2.046").text == "[1] loss: 2.046"


def test_a_launcher_prefix_glued_to_a_bar_is_a_record_of_its_own():
    path = DATA / "console_prefixes" / "horovod_3871_bars_glued_mpirun_prefix.log"
    lines = path.read_text(encoding="utf-8").splitlines()
    layout = normalise.Layout.learn(lines, GRAMMAR)
    first = list(layout.records([(1, lines[0])]))
    assert [r.rank for r in first] == [None, 0]  # the bar (no prefix), then rank 0's rule (line 1)
    assert first[1].text == "-" * 25
    s = logkit.load_session(path)
    losses = s.steps["loss"].dropna()
    assert len(losses) == 10 and s.diagnostics.empty  # 12 lines, 10 of them bars (lines 3 and 5 a rule alone)
    assert losses.iloc[0] == 1.1147929430007935 and losses.iloc[-1] == 1.0117827653884888  # lines 1 and 12
    assert s.steps["step"].iloc[-1] == 287  # line 12: "287/391"


def test_torchtune_bars_under_a_templated_prefix_give_their_losses():
    s = logkit.load_session(CORPUS / "torchtune_2620_multi_node_lora_trainer0_prefix_loss_bars_25_to_32_of_101.log")
    # line 10: "1|30|Loss: 1.1868056058883667", the lowest; line 13 (the last): "1|31|Loss: 1.1992870569229126"
    assert s.steps["loss"].min() == 1.1868056058883667 and s.steps["loss"].iloc[-1] == 1.1992870569229126
    assert set(s.steps["rank"].dropna()) == {0}  # "[trainer0|0]:"


# --- a bar's postfix -----------------------------------------------------------------------------------
def test_nemo_bar_step_timing_and_a_framework_loss_name():
    line = (CORPUS / "nemo_7957_megatron_gpt_bar_nan_reduced_train_loss_step_9000_checkpoint.log").read_text(
        encoding="utf-8").splitlines()[0]
    bar = tl.parse_bar(line)  # "9000/301500 [...], reduced_train_loss=nan.0, ..., train_step_timing in s=0.615"
    assert bar["step"] == 9000 and bar["step_time_s"] == 0.615 and bar["loss"] != bar["loss"]  # NaN


@pytest.mark.parametrize("postfix, loss, step_time", [
    ("v_num=0-56, reduced_train_loss=2.31, train_step_timing in s=0.615", 2.31, 0.615),
    ("2.10s/it, loss=2.5, reduced_train_loss=2.31, train_step_timing in s=0.615", 2.5, 0.615),  # "loss" first
    ("1.20s/it, v_num=1, reduced_train_loss=3.090", 3.09, 1.2),  # no timing field: tqdm's rate
    ("v_num=1, train_step_timing=0.615, val_loss=7.0", None, None),  # a time without its unit, a val loss: none
])
def test_bar_postfix_variations(postfix, loss, step_time):
    bar = tl.parse_bar(f"Epoch 0: :   3%|▎         | 9000/301500 [1:42:42<55:37:46, {postfix}]")
    if loss is None and step_time is None:
        assert bar is None
    else:
        assert (bar["loss"], bar["step_time_s"]) == (pytest.approx(loss), pytest.approx(step_time))


def test_a_bar_whose_postfix_fields_are_empty_gives_no_row():
    # NeMo Speech issue 11900 (README): every field empty, the total unknown
    line = ("Epoch 0: :   0%|          | 614/? [23:53<00:00, v_num=, reduced_train_loss=, global_step=, "
            "consumed_samples=, train_step_timing in s=, val_loss=]")
    assert tl.parse_bar(line) is None


# --- a script's own counter and loss lines -------------------------------------------------------------
def test_each_process_loss_line_at_its_own_last_counter():
    s = logkit.load_session(CORPUS / "horovod_1421_mpirun_two_ranks_epoch_batch_total_loss_lines.log")
    steps = s.steps
    # line 6: rank 1 "Total loss is  30.246166229248047" after its line 4 "Epoch 0/100, Batch 17/29316"
    row = steps[(steps["rank"] == 1) & (steps["loss"] == 30.246166229248047)].iloc[0]
    assert row["step"] == 17 and row["epoch"] == 0
    # line 2: rank 0's loss with no counter of its own before it (the paste began at rank 1's)
    first = steps[steps["loss"] == 236.61468505859375].iloc[0]
    assert first["rank"] == 0 and pd.isna(first["step"])
    assert set(steps["rank"]) == {0, 1} and s.diagnostics.empty
    assert s.meta["world_size"] == 2 and "lower bound" in s.meta["world_size_from"]


def test_script_line_variations():
    lines = ScriptLines()
    assert lines.line("Epoch 2/10, Step 5/100", 3) is True
    assert lines.line("train loss: 0.41", 3) == {"step": 205, "epoch": 2.0, "loss": 0.41}  # 2 * 100 + 5
    assert lines.line("loss = 0.5", 1) == {"step": None, "epoch": None, "loss": 0.5}  # rank 1 said no counter
    assert lines.line("Validation loss is 0.3", 3) is None  # an evaluation's
    assert lines.line("loss: 0.5, val_loss: 0.6", 3) is None  # two losses: not this shape
    assert lines.line("Epoch 3, Batch 7", 3) is True
    assert lines.line("Total loss is 1.5 ETA is 0:01:00", 3)["step"] == 7  # no batches per epoch said: the batch
