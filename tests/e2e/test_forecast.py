"""The forecast end to end: the known-cost trainer (benchmarks/known_cost_trainer.py: sleeps for compute and
data, a real gloo all-reduce of a 16 MB gradient) at 1 and 2 CPU ranks forecasts the 3-rank run, which is
then run and measured; the CLI as a user types it (``--forecast 3 --json``, in process)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from logkit.cli import analyze_logs
from tests.support.launch import REPO, accelerate_launch

pytestmark = pytest.mark.slow

TRAINER = "benchmarks/known_cost_trainer.py"
# strong regime, global batch 12: 20 ms of compute and 4 ms of data per sample on each rank
CONFIG = ["--regime", "strong", "--grad-mb", "16", "--steps", "16"]
TOLERANCE = 0.15  # the validation's bar (README: forecast validation)


def _json(*args) -> dict:
    """``analyze_logs ARGS --no-cache --json`` as typed, in this process (no second interpreter to start)."""
    r = CliRunner().invoke(analyze_logs, [*args, "--no-cache", "--json"], catch_exceptions=False)
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def test_two_runs_forecast_the_third_within_tolerance(tmp_path):
    fit, third = tmp_path / "fit", tmp_path / "third"
    # one rank as a user runs one GPU (python train.py: no launcher to start), then 2 and 3 through accelerate
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, str(REPO / TRAINER), *CONFIG, "--log-dir", str(fit)], cwd=tmp_path, env=env,
                   check=True, capture_output=True, timeout=300)
    accelerate_launch(TRAINER, [*CONFIG, "--log-dir", str(fit)], 2, cwd=tmp_path)
    accelerate_launch(TRAINER, [*CONFIG, "--log-dir", str(third)], 3, cwd=tmp_path)
    doc = _json(str(fit), "--forecast", "3")
    (row,) = doc["forecast"]
    assert row["world_size"] == 3 and row["group"] == "known-cost-strong-16mb" and row["dominant"] == "compute"
    assert row["lo"] < row["samples_per_s"] < row["hi"]
    (measured,) = _json(str(third))["sessions"]
    rate = measured["steady_samples_per_second"]
    assert abs(row["samples_per_s"] / rate - 1) <= TOLERANCE, (row, rate)
    # the counterfactual: the 2-rank run against the 1-rank one, then the forecast's 3 ranks, said first in the verdict
    (run, three) = doc["counterfactual"]
    assert run["measured"] and run["world_size"] == 2 and run["baseline_world_size"] == 1
    assert run["samples"] == 16 * 12  # 16 steps of a global batch of 12
    assert three["world_size"] == 3 and not three["measured"]
    assert three["hours"] == pytest.approx(16 * 12 / row["samples_per_s"] / 3600)
    assert doc["verdict"][0] == run["sentence"]
