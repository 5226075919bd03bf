"""--forecast SIZES and --gpu-hour-price as typed (in-process, click's runner): the sizes reach the JSON's
forecast[] rows, the price the counterfactual, and sizes that are not whole numbers exit 2."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from logkit.cli import analyze_logs
from tests.support.synth import write_session


def run(*args):
    return CliRunner().invoke(analyze_logs, [str(a) for a in args], catch_exceptions=False)


@pytest.fixture(scope="module")
def logs(tmp_path_factory):
    """8 samples per 0.5 s on 1 rank and per 0.3 s on 2 ranks, 20 steps each (long enough to forecast from)."""
    root = tmp_path_factory.mktemp("cli") / "logs"
    write_session(root, "one", world_size=1, step_times=[0.5] * 20, total_batch_size=8, start="2026-11-22T01:00:00+00:00")
    write_session(root, "two", world_size=2, step_times=[0.3] * 20, total_batch_size=8, start="2026-11-22T02:00:00+00:00")
    return root


def test_sizes_and_price_reach_the_json(logs):
    r = run(logs, "--forecast", "4,3,4", "--gpu-hour-price", "2", "--json", "--no-cache")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert [f["world_size"] for f in doc["forecast"]] == [4, 3]  # as asked, once each
    # no phases: 1 rank gives 0.5 / 8 s a sample; the 2-rank rest 0.3 - 4 x 0.0625 = 0.05 s is the sync,
    # x 1.5 at 4 ranks: 2 x 0.0625 + 0.075 = 0.2 s a step, 40 samples/s
    assert doc["forecast"][0]["samples_per_s"] == pytest.approx(40.0)
    run_row = doc["counterfactual"][0]
    # 160 samples at 8 / 0.3 samples/s on 2 ranks: 6 s, 2 x 6 s of GPU time at 2 a GPU-hour
    assert run_row["cost"] == pytest.approx(2 * 12 / 3600)


def test_console_block(logs):
    r = run(logs, "--forecast", "--no-cache")
    assert r.exit_code == 0, r.output
    assert "FORECAST" in r.output and "4 ranks: 40 samples/s" in r.output and "8 ranks:" in r.output


@pytest.mark.parametrize("sizes", ["4,x", "0", "4,,8", "3.5"])
def test_sizes_that_are_not_whole_numbers_exit_2(logs, sizes):
    r = CliRunner().invoke(analyze_logs, [str(logs), f"--forecast={sizes}", "--no-cache"])
    assert r.exit_code == 2 and "--forecast takes world sizes" in r.output
