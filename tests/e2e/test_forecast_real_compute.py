"""The real-compute trainer (benchmarks/real_compute_trainer.py: a token model's real forward, backward and
AdamW steps) at 1 and 2 CPU ranks writes sessions the forecast reads: the CLI as a user types it
(``--communication``, ``--forecast 3``, in process). No timing is asserted: this host's load decides the
times; what the runs must say is their batch, their gradient's bytes and a forecast (or why not)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from logkit.cli import analyze_logs
from tests.support.launch import REPO, accelerate_launch, read_jsonl, session_dirs

pytestmark = pytest.mark.slow  # two real launches, ~25 s on 2 cores

TRAINER = "benchmarks/real_compute_trainer.py"
STEPS = 16
CONFIG = ["--regime", "strong", "--grad-mb", "2", "--steps", str(STEPS)]  # global batch 24, hidden 128, 4 layers
# The model's float32 bytes, by hand: a block is LayerNorm 2x128 + Linear 128->256 (128x256 + 256) + Linear
# 256->128 (256x128 + 128) = 66176 parameters; 4 blocks 264704; the 16-class head 128x16 + 16 = 2064; the
# embedding takes the rest of 2 MB: floor((500000 - 266768) / 128) = 1822 rows of 128 = 233216; in all
# 499984 parameters, 1999936 bytes: what DDP all-reduces each step.
MODEL_BYTES = 1_999_936


def _json(*args) -> dict:
    r = CliRunner().invoke(analyze_logs, [*args, "--no-cache", "--json"], catch_exceptions=False)
    assert r.exit_code in (0, 1), r.output
    return json.loads(r.stdout)


def _robust_spread(times: list[float]) -> float:
    """1.4826 x MAD / median, the spread the forecast's too-noisy rule reads (computed here from the file)."""
    t = np.asarray(times)
    return float(1.4826 * np.median(np.abs(t - np.median(t))) / np.median(t))


def test_one_and_two_ranks_of_real_compute_feed_the_forecast(tmp_path):
    fit = tmp_path / "fit"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    subprocess.run([sys.executable, str(REPO / TRAINER), *CONFIG, "--log-dir", str(fit)], cwd=tmp_path, env=env,
                   check=True, capture_output=True, timeout=300)
    accelerate_launch(TRAINER, [*CONFIG, "--log-dir", str(fit)], 2, cwd=tmp_path)

    sessions = {s["world_size"]: s for s in _json(str(fit))["sessions"]}
    assert sorted(sessions) == [1, 2]
    for s in sessions.values():  # strong: the global batch of 24 kept, split 24 / 12 per rank
        assert s["total_batch_size"] == 24 and s["total_steps"] == STEPS

    # every step's gradient synced once on the 2-rank run: the model's bytes a step
    comm = _json(str(fit), "--communication")["communication"]
    (rank0,) = [r for r in comm if r["rank"] == 0 and r["op"] == "gradient_sync"]
    assert rank0["total_bytes"] == STEPS * MODEL_BYTES

    (row,) = _json(str(fit), "--forecast", "3")["forecast"]
    assert row["world_size"] == 3 and row["group"] == "real-compute-strong-2mb, seq len 64"
    assert row["measured_sizes"] == "1, 2"
    if row["samples_per_s"] is None:
        # refused only for the run's own steps (a loaded host): too noisy, and then the named run's steps do
        # vary; or too short, and then its warm-up left fewer than 8 steady steps of the 16
        assert row["basis"].startswith(("no forecast: too noisy", "no forecast: too short")), row["basis"]
        (named,) = [d for d in session_dirs(fit) if d.name in row["basis"]]
        if "too short" in row["basis"]:
            assert sessions[1 if named.name == sessions[1]["session_id"] else 2]["steady_steps"] < 8
            return
        times = [r["timing"]["step_time_seconds"] for r in read_jsonl(named / f"{named.name}_rank0.jsonl")
                 if r["type"] == "training_step_complete"]
        assert _robust_spread(times[2:]) > 0.1, times
        return
    assert row["regime"] == "strong" and row["global_batch"] == 24  # 8 samples on each of 3 ranks
    parts = sum(row[f"{c}_s"] for c in ("data", "compute", "comm", "wait", "other"))
    assert parts == pytest.approx(row["step_s"])
    assert row["samples_per_s"] == pytest.approx(24 / row["step_s"])
    assert row["lo"] < row["samples_per_s"] < row["hi"]
