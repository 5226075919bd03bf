"""examples/complete_training_pipeline.sh, run as a user runs it: real tiny QLoRA on 1 then 2 CPU ranks."""

from __future__ import annotations

import json
import os
import re
import subprocess

import pytest

from tests.support.launch import REPO, analyze_logs, read_jsonl

REPO = REPO
SEED_002_KEYS = {"mode", "session", "config", "duration_seconds", "final_loss", "steps_per_second", "total_steps",
                 "num_gpus", "model_name", "optimizations"}


@pytest.mark.slow
def test_pipeline_small_on_cpu(tmp_path):
    env = {**os.environ, "SESSIONS_DIR": str(tmp_path / "sessions"), "TINY": "1", "MONITOR_INTERVAL": "2"}
    proc = subprocess.run(["bash", str(REPO / "examples/complete_training_pipeline.sh"), "t1", "small"],
                          cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    root = tmp_path / "sessions" / "t1"
    for run, mode, ranks in (("single_gpu", "single-gpu", 1), ("multi_gpu", "multi-gpu", 2)):
        folder = root / run
        results = json.loads((folder / "results.json").read_text())
        assert SEED_002_KEYS <= set(results)
        assert (results["mode"], results["session"], results["config"]) == (mode, "t1", "small")
        assert results["total_steps"] == 20 and results["num_processes"] == ranks
        assert results["duration_seconds"] > 0 and results["steps_per_second"] > 0
        state = json.loads((folder / "trainer_state.json").read_text())
        assert state["global_step"] == 20
        losses = [e for e in state["log_history"] if "loss" in e]
        assert len(losses) == 20 and losses[-1]["step"] == 20
        assert any("train_runtime" in e for e in state["log_history"])  # the final summary entry
        # the logkit session beside them: one folder, every rank's stream, rank 0's summary
        (session,) = [p for p in (folder / "logs").iterdir() if p.is_dir()]
        sid = session.name
        for r in range(ranks):
            assert (session / f"{sid}_rank{r}.jsonl").exists()
        summary = json.loads((session / f"{sid}_summary.json").read_text())
        assert summary["world_size"] == ranks and summary["total_steps"] == 20
        # monitor_gpu ran around the training
        snaps = read_jsonl(folder / "gpu_usage.jsonl")
        assert snaps and all(s["type"] == "gpu_snapshot" for s in snaps)
    # the analysis: a comparison with a speedup line, kept in a file, and the HTML report
    assert "SINGLE-PROCESS vs MULTI-PROCESS COMPARISON" in proc.stdout
    speedup = re.search(r"Speedup: ([0-9.]+)x", proc.stdout)
    assert speedup and float(speedup.group(1)) > 0
    assert "Speedup:" in (root / "comparison.txt").read_text()
    assert (root / "report.html").stat().st_size > 1000

    # what a user expects of sessions/t1: each run folder (results.json and trainer_state.json
    # beside logs/<id>/) is ONE session, and the two are compared once
    analysis = analyze_logs("--compare", "--json", str(root))
    assert analysis.returncode == 0, analysis.stderr[-3000:]
    doc = json.loads(analysis.stdout)
    runs = {}
    for run, ranks in (("single_gpu", 1), ("multi_gpu", 2)):
        (session,) = [p for p in (root / run / "logs").iterdir() if p.is_dir()]
        steps = [r for r in read_jsonl(session / f"{session.name}_rank0.jsonl")
                 if r["type"] == "training_step_complete"]
        runs[session.name] = (ranks, steps)
    assert sorted((s["session_id"], s["world_size"]) for s in doc["sessions"]) == sorted(
        (sid, ranks) for sid, (ranks, _) in runs.items())
    (cmp,) = doc["comparisons"]
    base_id, cand_id = sorted(runs, key=lambda sid: runs[sid][0])
    assert (cmp["baseline"], cmp["candidate"]) == (base_id, cand_id)

    def throughput(steps):  # samples/s as the definitions say: over rank 0's optimizer steps
        return sum(r["metrics"]["total_batch_size"] for r in steps) / sum(
            r["timing"]["step_time_seconds"] for r in steps)

    by_id = {s["session_id"]: s for s in doc["sessions"]}
    for sid, (_, steps) in runs.items():
        assert by_id[sid]["samples_per_second"] == pytest.approx(throughput(steps), rel=1e-6)
    whole = throughput(runs[cand_id][1]) / throughput(runs[base_id][1])
    assert cmp["whole_run_speedup"] == pytest.approx(whole, rel=1e-6)
    # the headline speedup is the steady state's: the same sums without each run's warm-up steps
    assert cmp["basis"] == "steady state"
    steady = [throughput(runs[sid][1][by_id[sid]["warmup_steps"]:]) for sid in (cand_id, base_id)]
    assert cmp["speedup"] == pytest.approx(steady[0] / steady[1], rel=1e-6)
    assert cmp["scaling_efficiency"] == pytest.approx(cmp["speedup"] / 2, rel=1e-6)
    assert f"Speedup: {cmp['speedup']:.2f}x" in proc.stdout
