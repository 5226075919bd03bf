"""End to end: the tiny QLoRA example under accelerate launch on 1 and 2 CPU ranks, then the CLI.

Slow (two real launches, ~40 s together); everything asserted comes from those runs.
"""

from __future__ import annotations

import importlib.util
import math

import orjson
import pytest

from logkit.schema import REQUIRED_KEYS, SessionFiles
from tests.support.launch import REPO, accelerate_launch, analyze_logs, read_jsonl, session_dirs

pytestmark = pytest.mark.slow

MAX_STEPS = 12
BATCH = 4


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("qlora")
    tiny = root / "tiny"
    out = {}
    for nprocs in (1, 2):
        log_dir = root / f"logs{nprocs}"
        accelerate_launch("examples/train_qlora.py", [
            "--tiny", "--tiny-dir", str(tiny), "--max-steps", str(MAX_STEPS), "--batch-size", str(BATCH),
            "--log-dir", str(log_dir), "--output-dir", str(root / f"out{nprocs}")], nprocs, cwd=root)
        (session,) = session_dirs(log_dir)
        out[nprocs] = {
            "session": session,
            "files": SessionFiles(session.name),
            "state": orjson.loads((root / f"out{nprocs}" / "trainer_state.json").read_bytes()),
        }
    out["root"], out["tiny"] = root, tiny
    return out


def _stream(run, rank):
    return read_jsonl(run["session"] / run["files"].rank_jsonl(rank))


def test_every_rank_writes_a_complete_stream(runs):
    run = runs[2]
    ids = set()
    for rank in (0, 1):
        records = _stream(run, rank)
        for r in records:
            assert all(k in r for k in REQUIRED_KEYS), r
            assert r["rank"] == rank and r["world_size"] == 2
            ids.add(r["session_id"])
        types = [r["type"] for r in records]
        assert types[0] == "session_start" and types[-1] == "session_end"
        assert records[-1]["status"] == "completed"
        assert types.count("training_step_complete") == MAX_STEPS
        assert records[0]["mode"] == "MULTI-CPU" and records[0]["backend"] == "gloo"
    assert ids == {run["session"].name}  # one id, agreed by both ranks
    assert not (run["session"] / run["files"].errors_log).exists()
    # rank 0 alone writes the text logs and the summary
    for name in ("main_log", "multigpu_log", "performance_log", "summary_json", "summary_txt"):
        assert (run["session"] / getattr(run["files"], name)).is_file(), name


@pytest.mark.parametrize("nprocs", [1, 2])
def test_losses_are_exactly_what_transformers_logged(runs, nprocs):
    run = runs[nprocs]
    logged = {e["step"]: e for e in run["state"]["log_history"] if "loss" in e}
    assert len(logged) == MAX_STEPS
    for rank in range(nprocs):
        steps = {r["step"]: r for r in _stream(run, rank) if r["type"] == "training_step_complete"}
        assert sorted(steps) == sorted(logged)
        for step, entry in logged.items():
            metrics = steps[step]["metrics"]
            assert metrics["loss"] == entry["loss"]
            assert metrics["learning_rate"] == entry["learning_rate"]
            assert metrics["grad_norm"] == entry["grad_norm"]
            assert metrics["total_batch_size"] == BATCH * nprocs
            assert metrics["samples_per_second"] == pytest.approx(
                BATCH * nprocs / steps[step]["timing"]["step_time_seconds"], rel=1e-3)


def _trainable_grad_bytes(tiny_dir) -> int:
    spec = importlib.util.spec_from_file_location("train_qlora", REPO / "examples" / "train_qlora.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model, _ = example.load_qlora_model(str(tiny_dir), lora_r=8, on_cuda=False)
    return sum(p.numel() * p.element_size() for p in model.parameters() if p.requires_grad)


def test_gradient_bytes_per_step_equal_the_trainable_gradients(runs):
    expected = _trainable_grad_bytes(runs["tiny"])
    assert expected > 0
    for rank in (0, 1):
        per_step: dict[int, int] = {}
        for r in _stream(runs[2], rank):
            if r["type"] == "communication":
                assert r["op"] == "gradient_sync" and r["group_size"] == 2 and r["timing_source"] == "wall"
                assert r["duration_ms"] > 0
                algbw = r["size_bytes"] / 1e6 / (r["duration_ms"] / 1e3)
                assert r["algbw_mb_s"] == pytest.approx(algbw, rel=1e-3)
                assert r["busbw_mb_s"] == pytest.approx(algbw * 2 * (2 - 1) / 2, rel=1e-3)
                per_step[r["step"]] = per_step.get(r["step"], 0) + r["size_bytes"]
        assert sorted(per_step) == list(range(1, MAX_STEPS + 1))
        assert set(per_step.values()) == {expected}
    # a single rank has nothing to synchronise
    assert not [r for r in _stream(runs[1], 0) if r["type"] == "communication"]


def test_summary_totals(runs):
    run = runs[2]
    summary = orjson.loads((run["session"] / run["files"].summary_json).read_bytes())
    losses = [e["loss"] for e in run["state"]["log_history"] if "loss" in e]
    assert summary["world_size"] == 2 and summary["gpu_count"] == 0 and summary["mode"] == "MULTI-CPU"
    assert summary["total_steps"] == MAX_STEPS and summary["status"] == "completed"
    assert summary["final_loss"] == losses[-1]
    assert summary["total_batch_size"] == BATCH * 2
    sync = summary["communication"]["gradient_sync"]
    rank0_comm = [r for r in _stream(run, 0) if r["type"] == "communication"]
    assert sync["count"] == len(rank0_comm)
    assert sync["total_mb"] == pytest.approx(sum(r["size_bytes"] for r in rank0_comm) / 1e6)
    step_times = [r["timing"]["step_time_seconds"] for r in _stream(run, 0) if r["type"] == "training_step_complete"]
    assert summary["samples_per_second"] == pytest.approx(MAX_STEPS * BATCH * 2 / sum(step_times), rel=1e-3)


def test_cli_json_compares_the_two_runs(runs):
    # both sessions under one folder, as a user keeps them
    root = runs["root"] / "all_logs"
    root.mkdir(exist_ok=True)
    for n in (1, 2):
        target = root / runs[n]["session"].name
        if not target.exists():
            target.symlink_to(runs[n]["session"], target_is_directory=True)
    proc = analyze_logs("--compare", "--json", "--follow-links", str(root))
    assert proc.returncode == 0, proc.stderr
    doc = orjson.loads(proc.stdout)
    by_size = {s["world_size"]: s for s in doc["sessions"]}
    assert set(by_size) == {1, 2}

    def throughput(run, skip=0):  # samples/s over rank 0's optimizer steps (after ``skip`` warm-up steps)
        rows = [r for r in _stream(run, 0) if r["type"] == "training_step_complete"][skip:]
        return sum(r["metrics"]["total_batch_size"] for r in rows) / sum(r["timing"]["step_time_seconds"] for r in rows)

    for n in (1, 2):
        s = by_size[n]
        assert s["session_id"] == runs[n]["session"].name
        assert s["total_steps"] == MAX_STEPS and s["total_batch_size"] == BATCH * n
        assert s["samples_per_second"] == pytest.approx(throughput(runs[n]), rel=1e-6)
        assert s["final_loss"] == [e["loss"] for e in runs[n]["state"]["log_history"] if "loss" in e][-1]
    (cmp,) = doc["comparisons"]
    assert cmp["baseline"] == runs[1]["session"].name and cmp["candidate"] == runs[2]["session"].name
    assert cmp["whole_run_speedup"] == pytest.approx(throughput(runs[2]) / throughput(runs[1]), rel=1e-6)
    # the headline figures are the steady state's: the same sums without each run's warm-up steps
    assert cmp["basis"] == "steady state"
    speedup = throughput(runs[2], by_size[2]["warmup_steps"]) / throughput(runs[1], by_size[1]["warmup_steps"])
    assert cmp["speedup"] == pytest.approx(speedup, rel=1e-6)
    assert cmp["scaling_efficiency"] == pytest.approx(speedup / 2, rel=1e-6)
    assert cmp["regime"] == "weak"  # same per-device batch, the global batch doubled

    def step_rate(run, skip):
        rows = [r for r in _stream(run, 0) if r["type"] == "training_step_complete"][skip:]
        return len(rows) / sum(r["timing"]["step_time_seconds"] for r in rows)

    assert math.isfinite(cmp["step_rate_ratio"]) and cmp["step_rate_ratio"] == pytest.approx(
        step_rate(runs[2], by_size[2]["warmup_steps"]) / step_rate(runs[1], by_size[1]["warmup_steps"]), rel=1e-6)


def test_trl_sft_trainer_on_two_ranks(tmp_path, runs):
    """The same callback under TRL's SFTTrainer: streams, losses and gradient sync."""
    accelerate_launch("examples/train_qlora.py", [
        "--tiny", "--tiny-dir", str(runs["tiny"]), "--trainer", "sft", "--max-steps", "6",
        "--batch-size", str(BATCH), "--log-dir", str(tmp_path / "logs"), "--output-dir", str(tmp_path / "out")],
        2, cwd=tmp_path)
    (session,) = session_dirs(tmp_path / "logs")
    files = SessionFiles(session.name)
    state = orjson.loads((tmp_path / "out" / "trainer_state.json").read_bytes())
    logged = {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}
    for rank in (0, 1):
        records = read_jsonl(session / files.rank_jsonl(rank))
        assert records[0]["config"]["trainer"] == "sft" and records[-1]["status"] == "completed"
        steps = {r["step"]: r["metrics"]["loss"] for r in records if r["type"] == "training_step_complete"}
        assert steps == logged
        assert {r["step"] for r in records if r["type"] == "communication"} == set(range(1, 7))


def _failed_launch(tmp_path, runs, nprocs, *extra):
    with pytest.raises(AssertionError, match="launch failed"):
        accelerate_launch("examples/train_qlora.py", [
            "--tiny", "--tiny-dir", str(runs["tiny"]), "--max-steps", "8", "--batch-size", str(BATCH),
            "--log-dir", str(tmp_path / "logs"), "--output-dir", str(tmp_path / "out"), *extra], nprocs, cwd=tmp_path)
    (session,) = session_dirs(tmp_path / "logs")
    files = SessionFiles(session.name)
    streams = {rank: read_jsonl(session / files.rank_jsonl(rank)) for rank in range(nprocs)}
    return session, files, streams


def test_an_exception_in_a_trainer_run_ends_both_streams_as_failed(tmp_path, runs):
    session, files, streams = _failed_launch(tmp_path, runs, 2, "--fail-at", "5")
    for records in streams.values():
        end = records[-1]
        assert end["type"] == "session_end" and end["status"] == "failed" and end["total_steps"] == 4
        (error,) = [r for r in records if r["type"] == "error"]
        assert error["exception_type"] == "RuntimeError" and error["message"] == "RuntimeError: injected failure at step 5"
        assert error["traceback"].startswith("Traceback") and "in on_step_begin" in error["traceback"]
        assert [r["step"] for r in records if r["type"] == "training_step_complete"] == [1, 2, 3, 4]
    summary = orjson.loads((session / files.summary_json).read_bytes())
    assert summary["status"] == "failed" and summary["total_steps"] == 4
    main_log = (session / files.main_log).read_text()
    assert "❌ RuntimeError: injected failure at step 5" in main_log and "TRAINING SESSION FAILED" in main_log


def test_a_caught_exception_then_exit_is_not_a_completed_session(tmp_path, runs):
    # the script catches the trainer's exception and exits 1: no traceback reaches logkit, and
    # on_train_end never ran, so the session did not complete
    session, files, streams = _failed_launch(tmp_path, runs, 1, "--fail-at", "3", "--catch-failure")
    records = streams[0]
    end = records[-1]
    assert end["type"] == "session_end" and end["status"] == "failed" and end["total_steps"] == 2
    assert end["reason"] == "the process exited before training ended (on_train_end never ran)"
    assert end["reason"] in end["message"]
    (error,) = [r for r in records if r["type"] == "error"]
    assert error["kind"] == "exit_before_end" and error["traceback"] is None
    summary = orjson.loads((session / files.summary_json).read_bytes())
    assert summary["status"] == "failed"
