"""The forecast end to end: the known-cost trainer (benchmarks/known_cost_trainer.py: sleeps for compute and
data, a real gloo all-reduce of a 16 MB gradient) at 1 and 2 CPU ranks forecasts the 3-rank run, which is
then run and measured; the CLI as a user types it (``--forecast 3 --json``)."""

from __future__ import annotations

import json

import pytest

from tests.support.launch import accelerate_launch, analyze_logs

pytestmark = pytest.mark.slow

TRAINER = "benchmarks/known_cost_trainer.py"
# strong regime, global batch 12: 20 ms of compute and 4 ms of data per sample on each rank
CONFIG = ["--regime", "strong", "--grad-mb", "16", "--steps", "20"]
TOLERANCE = 0.15  # the validation's bar (README: forecast validation)


def _json(*args) -> dict:
    r = analyze_logs(*args, "--no-cache", "--json")
    assert r.returncode in (0, 1), r.stderr
    return json.loads(r.stdout)


def test_two_runs_forecast_the_third_within_tolerance(tmp_path):
    fit, third = tmp_path / "fit", tmp_path / "third"
    for ranks in (1, 2):
        accelerate_launch(TRAINER, [*CONFIG, "--log-dir", str(fit)], ranks, cwd=tmp_path)
    accelerate_launch(TRAINER, [*CONFIG, "--log-dir", str(third)], 3, cwd=tmp_path)
    doc = _json(str(fit), "--forecast", "3")
    (row,) = doc["forecast"]
    assert row["world_size"] == 3 and row["group"] == "known-cost-strong-16mb" and row["dominant"] == "compute"
    assert row["lo"] < row["samples_per_s"] < row["hi"]
    (measured,) = _json(str(third))["sessions"]
    rate = measured["steady_samples_per_second"]
    assert abs(row["samples_per_s"] / rate - 1) <= TOLERANCE, (row, rate)
    # the counterfactual: the 2-rank run against the 1-rank one, then the forecast's 3 ranks, said in the verdict
    (run, three) = doc["counterfactual"]
    assert run["measured"] and run["world_size"] == 2 and run["baseline_world_size"] == 1
    assert run["samples"] == 20 * 12  # 20 steps of a global batch of 12
    assert three["world_size"] == 3 and not three["measured"]
    assert three["hours"] == pytest.approx(240 / row["samples_per_s"] / 3600)
    assert doc["verdict"][1] == run["sentence"]
