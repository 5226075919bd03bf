"""The ledger (``analyze_logs DIR --ledger``): runs of known cost, each in processes of their own
(``tests/support/ledger_runs.py``: sleeps of known length before the logger, per step, per evaluation and
save), read back through the CLI's JSON; and foreign logs, whose figures are read off the files by eye.

Independent oracles: the sleeps' lengths; the run's own clock (its first line and its end, and the
test's clock around the process: the wall lies between); the Trainer's own ``eval_runtime``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from logkit.schema.vocab import LedgerCategory
from tests.support import ledger_runs as known
from tests.support.launch import REPO, analyze_logs, torchrun

pytestmark = pytest.mark.slow

CATEGORIES = [c.value for c in LedgerCategory]
DATA = REPO / "tests" / "data"
SLEEP_SLACK = 0.05  # what a time.sleep may overrun by on a busy 2-core host, per sleep (and then some)


def _run(mode: str, tmp: Path) -> tuple[dict, float, float]:
    """(the run's facts, the test's clock before it started, after it ended)."""
    before = time.time()
    subprocess.run([sys.executable, "-m", "tests.support.ledger_runs", mode, str(tmp / "logs"), str(tmp / "facts.json")],
                   cwd=REPO, check=True, capture_output=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""})
    return json.loads((tmp / "facts.json").read_text()), before, time.time()


def _ledger(folder: Path) -> list[dict]:
    proc = analyze_logs(str(folder), "--ledger", "--json")
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)["ledger"]


def _adds_up(row: dict) -> None:
    """Every category is there, they add up to the wall within 2%, and each share is seconds / wall."""
    assert list(row["seconds"]) == CATEGORIES and list(row["shares"]) == CATEGORIES
    assert all(v is not None and v >= -1e-6 for v in row["seconds"].values()), row["seconds"]
    assert sum(row["seconds"].values()) == pytest.approx(row["wall_s"], rel=0.02)
    for cat in CATEGORIES:
        assert row["shares"][cat] == pytest.approx(row["seconds"][cat] / row["wall_s"])


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ledger_loop")
    facts, before, after = _run("loop", tmp)
    (row,) = _ledger(tmp / "logs")
    return tmp, row, facts, before, after


def test_loop_ledger_adds_up_to_the_wall_between_the_runs_own_clocks(loop_run):
    _, row, facts, before, after = loop_run
    _adds_up(row)
    # the process started before its first line and after the test launched it; it ended after training
    assert facts["ended"] - facts["begun"] <= row["wall_s"] <= after - before
    assert row["ranks"] == 1


def test_loop_ledger_gives_each_known_cost_its_category(loop_run):
    _, row, _, _, _ = loop_run
    s = row["seconds"]
    assert s["startup"] >= known.STARTUP_SLEEP  # the sleep before the logger existed (and the imports)
    evals = known.STEPS // known.EVAL_EVERY  # 4, the last after the last step
    assert evals * known.EVAL_SLEEP <= s["evaluation"] <= evals * (known.EVAL_SLEEP + SLEEP_SLACK)
    assert known.SAVE_SLEEP <= s["checkpoint_saving"] <= known.SAVE_SLEEP + SLEEP_SLACK
    # the first step's data wait is start-up (the time before the first step); the others are data wait
    data = (known.STEPS - 1) * known.DATA_SLEEP
    assert data - 0.01 <= s["data_wait"] <= (known.STEPS - 1) * (known.DATA_SLEEP + SLEEP_SLACK)
    compute = known.STEPS * known.COMPUTE_SLEEP
    assert compute <= s["compute"] <= known.STEPS * (known.COMPUTE_SLEEP + SLEEP_SLACK)
    assert s["exposed_communication"] == s["waiting_for_ranks"] == 0  # one rank
    assert 0 < s["logging"] < 0.1 * row["wall_s"]
    # a phase of another name is in the rest, and the rest says so
    assert known.OTHER_SLEEP <= s["rest"] <= known.OTHER_SLEEP + 2 * SLEEP_SLACK
    assert any(f"phase '{known.OTHER_NAME}'" in n for n in row["notes"])


def test_loop_ledger_in_the_console_and_the_html_report(loop_run):
    tmp, row, _, _, _ = loop_run
    text = analyze_logs(str(tmp / "logs"), "--ledger").stdout
    assert "WHERE THE HOURS WENT" in text and row["session_id"] in text
    assert "evaluation" in text and "rest (no record explains it)" in text
    proc = analyze_logs(str(tmp / "logs"), "--report", str(tmp / "report.html"))
    assert proc.returncode == 0, proc.stderr
    html = (tmp / "report.html").read_text()
    assert 'id="ledger"' in html and 'class="ledger-bar"' in html
    evaluation = f'{row["seconds"]["evaluation"]:.1f} s'
    assert f'title="evaluation: {evaluation}' in html  # the bar's part, with its seconds


@pytest.fixture(scope="module")
def trainer_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("ledger_trainer")
    facts, before, after = _run("trainer", tmp)
    (row,) = _ledger(tmp / "logs")
    return row, facts, before, after


def test_trainer_ledger_times_evaluation_and_saving(trainer_run):
    row, facts, before, after = trainer_run
    _adds_up(row)
    assert facts["ended"] - facts["begun"] <= row["wall_s"] <= after - before
    s = row["seconds"]
    assert s["startup"] >= known.STARTUP_SLEEP
    # each evaluation from the Trainer's event before it to on_evaluate: it holds the Trainer's own timer
    runtimes = facts["eval_runtimes"]
    assert len(runtimes) == known.TRAINER_STEPS // known.TRAINER_EVAL_STEPS
    assert sum(runtimes) <= s["evaluation"] <= sum(runtimes) + 0.3 * len(runtimes)
    saves = facts["checkpoints"]
    assert saves == [f"checkpoint-{n}" for n in range(known.TRAINER_SAVE_STEPS, known.TRAINER_STEPS + 1,
                                                      known.TRAINER_SAVE_STEPS)]
    assert s["checkpoint_saving"] >= len(saves) * known.TRAINER_SAVE_SLEEP
    assert s["compute"] > 0 and s["rest"] < 0.05 * row["wall_s"]


def test_ddp_ledger_puts_the_late_rank_in_waiting(tmp_path):
    torchrun("tests/support/ledger_runs.py", ["ddp", str(tmp_path / "logs"), str(tmp_path / "facts.json")], 2,
             cwd=tmp_path, timeout=300)
    (row,) = _ledger(tmp_path / "logs")
    _adds_up(row)
    assert row["ranks"] == 2
    facts = [json.loads((tmp_path / f"facts.rank{r}.json").read_text()) for r in (0, 1)]
    assert max(f["ended"] for f in facts) - min(f["begun"] for f in facts) <= row["wall_s"]
    # rank 0 waits for rank 1's late start and, at each sync, for its longer compute; rank 1 waits for
    # nobody: the mean over the two ranks is half rank 0's wait (less what the sync's timing misses)
    waited = known.LATE_START + 0.8 * known.DDP_STEPS * known.SLOW_COMPUTE
    assert waited / 2 <= row["seconds"]["waiting_for_ranks"] <= (waited + 1.0) / 2 + 0.5
    assert row["seconds"]["exposed_communication"] > 0


def test_a_checkpoints_trainer_state_gives_its_evaluations_and_says_the_wall_is_unknown():
    (row,) = _ledger(DATA / "ledger" / "imdb_lora_checkpoint")
    assert row["wall_s"] is None
    # log_history's eval_runtime at steps 125, 250, 375 (trainer_state.json, read by eye)
    assert row["seconds"]["evaluation"] == pytest.approx(3.2785 + 3.1499 + 3.0155)
    assert row["seconds"]["compute"] is None and row["shares"]["evaluation"] is None
    assert "no train_runtime" in row["basis"]


def test_a_finished_trainer_state_gives_the_wall_and_its_evaluations():
    (row,) = _ledger(DATA / "ledger" / "imdb_lora_finished")
    assert row["wall_s"] == pytest.approx(187.5)  # the summary entry's train_runtime
    assert row["seconds"]["evaluation"] == pytest.approx(9.4439)
    assert row["seconds"]["rest"] == pytest.approx(187.5 - 9.4439)
    assert row["shares"]["evaluation"] == pytest.approx(9.4439 / 187.5)
    assert {"data_wait", "compute", "checkpoint_saving", "logging"} <= set(row["unknown"])
    assert any("not split" in n for n in row["notes"])


def test_a_llamafactory_folder_gives_train_runtime_and_no_evaluation():
    (row,) = _ledger(DATA / "frameworks" / "llamafactory_qwen3_lora")
    assert row["wall_s"] == pytest.approx(5980.6912)  # train_results.json's train_runtime
    assert row["seconds"]["evaluation"] is None and "evaluation" in row["unknown"]
    assert any("no eval_runtime" in n for n in row["notes"])


def test_a_stream_cut_before_its_end_still_adds_up_and_says_so(loop_run, tmp_path):
    """The loop's stream cut after its last step record (a killed run): its span ends at its last record."""
    src, _, _, _, _ = loop_run
    (session,) = [p for p in (src / "logs").iterdir() if p.is_dir()]
    cut = tmp_path / "logs" / session.name
    shutil.copytree(session, cut)
    (cut / "summary.json").unlink(missing_ok=True)
    stream = next(cut.glob("*rank0.jsonl"))
    records = [json.loads(line) for line in stream.read_bytes().splitlines()]
    last = max(i for i, r in enumerate(records) if r["type"] == "training_step_complete")
    kept = records[:last + 1]
    stream.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in kept))
    (row,) = _ledger(tmp_path / "logs")
    _adds_up(row)
    assert any("no session_end" in n for n in row["notes"])
    phases = [r for r in kept if r["type"] == "timed_phase"]
    age = next(r["duration_s"] for r in phases if r["phase"] == "startup")
    # from the process start (its age at the logger's origin) to the last record left
    assert row["wall_s"] == pytest.approx(age + kept[-1]["elapsed_s"], abs=1e-3)
    # the evaluations before the cut (the last one came after the last step)
    evals = [r["duration_s"] for r in phases if r["phase"] == "eval"]
    assert len(evals) == known.STEPS // known.EVAL_EVERY - 1
    assert row["seconds"]["evaluation"] == pytest.approx(sum(evals), abs=1e-3)
