"""The emitter in one process: files, line shapes, summary, and faults that must not reach training."""

from __future__ import annotations

import math
import subprocess
import sys
import time
from types import SimpleNamespace

import orjson
import pytest

from logkit.schema import (
    MAIN_LINE,
    PROCESS_LINE,
    REQUIRED_KEYS,
    SessionFiles,
    parse_message,
)
from tests.support.launch import read_jsonl
from trainer_hooks.session_logger import SessionLogger

LOSSES = [2.5, 2.25, 2.0, float("nan"), 1.5]


def _run_session(log_dir, **settings) -> SessionLogger:
    log = SessionLogger(log_dir=log_dir, **settings)
    log.start(model_name="unit-model", per_device_batch_size=4, gradient_accumulation_steps=2, max_steps=len(LOSSES),
              config={"lr": 1e-4})
    for step, loss in enumerate(LOSSES, start=1):
        log.step_begin()
        time.sleep(0.01)  # a step long enough that microsecond rounding does not show
        log.step_end(step, loss=loss, learning_rate=1e-4 / step, grad_norm=0.5, epoch=step / 5)
    log.evaluation(5, {"eval_loss": 1.25})
    log.end()
    return log


def test_single_process_session_files(tmp_path):
    log = _run_session(tmp_path, performance_log_steps=2)
    files = SessionFiles(log.session_id)
    folder = tmp_path / log.session_id
    assert log.session_id.startswith("training_")
    records = read_jsonl(folder / files.rank_jsonl(0))
    for r in records:
        assert all(k in r for k in REQUIRED_KEYS)
        assert r["timestamp"].endswith("+00:00") and "." in r["timestamp"]
    types = [r["type"] for r in records]
    assert types[0] == "session_start" and types[-1] == "session_end"
    start = records[0]
    assert start["mode"] == "CPU" and start["total_batch_size"] == 8 and start["world_size"] == 1
    steps = [r for r in records if r["type"] == "training_step_complete"]
    assert [r["step"] for r in steps] == [1, 2, 3, 4, 5]
    assert [r["metrics"]["loss"] for r in steps][:3] == LOSSES[:3]
    assert steps[3]["metrics"]["loss"] is None  # NaN is written as null, never as invalid JSON
    elapsed = [r["elapsed_s"] for r in steps]
    assert elapsed == sorted(elapsed) and len(set(elapsed)) == len(elapsed)
    for r in steps:
        t = r["timing"]
        assert r["metrics"]["samples_per_second"] == pytest.approx(8 / t["step_time_seconds"], rel=1e-3)
        assert 0 <= t["data_time_seconds"] <= t["step_time_seconds"]
    perf = [r for r in records if r["type"] == "performance"]
    assert [p["step"] for p in perf] == [2, 4, 5] and [p["window_steps"] for p in perf] == [2, 2, 1]
    evals = [r for r in records if r["type"] == "evaluation"]
    assert evals[0]["metrics"]["eval_perplexity"] == pytest.approx(math.exp(1.25))
    end = records[-1]
    assert end["status"] == "completed" and end["total_steps"] == 5 and end["final_loss"] == 1.5
    assert end["samples_seen"] == 40

    summary = orjson.loads((folder / files.summary_json).read_bytes())
    for key in ("session_id", "mode", "gpu_count", "world_size", "model", "start_time", "end_time",
                "duration_seconds", "total_steps", "final_loss", "steps_per_second", "samples_per_second",
                "total_batch_size", "gpus", "communication", "status"):
        assert key in summary, key
    training_time = sum(r["timing"]["step_time_seconds"] for r in steps)
    assert summary["samples_per_second"] == pytest.approx(40 / training_time, rel=1e-3)
    assert "Samples/sec" in (folder / files.summary_txt).read_text()


def test_text_logs_use_the_schema_shapes(tmp_path):
    log = _run_session(tmp_path, performance_log_steps=2)
    folder, files = tmp_path / log.session_id, SessionFiles(log.session_id)
    step_lines = 0
    for line in (folder / files.main_log).read_text().splitlines():
        if not line.strip() or line.endswith(":") or set(line) == {"="}:
            continue  # blank lines, block headers ("📊 EVALUATION RESULTS ...:") and rules
        prefixed = MAIN_LINE.parse(line)
        parsed = parse_message(prefixed["message"] if prefixed else line)
        assert prefixed or parsed, f"main.log line nothing reads: {line!r}"
        if parsed and parsed[0] == "step_line":
            step_lines += 1
    assert step_lines == len(LOSSES)
    perf_lines = [PROCESS_LINE.parse(x) for x in (folder / files.performance_log).read_text().splitlines()]
    assert all(perf_lines)
    kinds = [(parse_message(p["message"]) or ("free text",))[0] for p in perf_lines]
    assert kinds.count("performance") == 3


def test_session_ids_do_not_collide(tmp_path):
    a, b = _run_session(tmp_path), _run_session(tmp_path)
    assert a.session_id != b.session_id
    assert (tmp_path / a.session_id).is_dir() and (tmp_path / b.session_id).is_dir()


def test_an_unwritable_log_folder_never_reaches_training(tmp_path, capsys):
    blocker = tmp_path / "not_a_folder"
    blocker.write_text("a file where the log folder should be")
    log = _run_session(blocker / "logs")  # every call returns normally
    assert log.session_id is None
    assert "logkit:" in capsys.readouterr().err


def test_bad_values_are_kept_out_not_raised(tmp_path):
    log = SessionLogger(log_dir=tmp_path)
    log.start(per_device_batch_size=1)
    log.step_end(1, loss="not a number", learning_rate=object())
    log.add_metrics(1, {"loss": 3.0})  # the step was flushed already: nothing to merge into
    log.end()
    (record,) = [r for r in read_jsonl(tmp_path / log.session_id / SessionFiles(log.session_id).rank_jsonl(0))
                 if r["type"] == "training_step_complete"]
    assert record["metrics"]["loss"] is None and record["metrics"]["learning_rate"] is None


def test_callback_survives_whatever_it_is_handed(tmp_path):
    pytest.importorskip("transformers")
    from trainer_hooks import LogkitCallback

    cb = LogkitCallback(log_dir=str(tmp_path))
    state = SimpleNamespace(global_step=1, epoch=0.1, max_steps=3, num_input_tokens_seen=0)
    cb.on_train_begin(SimpleNamespace(), state, None, model=None)  # args lack every field
    cb.on_step_end(None, state, None)
    cb.on_log(None, state, None, logs={"loss": object()})
    cb.on_train_end(None, state, None)


def test_import_costs():
    code = ("import sys, trainer_hooks, trainer_hooks.session_logger, logkit, logkit.schema; "
            "print('pandas' in sys.modules, 'torch' in sys.modules, 'transformers' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False", "False"]


def test_without_a_batch_size_throughput_is_unknown_and_every_text_line_parses(tmp_path):
    from trainer_hooks import TrainingLogger

    with TrainingLogger(tmp_path, performance_log_steps=2, gpu_snapshot_interval=0, max_steps=5) as tlog:
        for n in range(1, 6):
            with tlog.step() as step:
                time.sleep(0.005)
                step.log(loss=1.0 / n)
    folder, files = tlog.session_dir, SessionFiles(tlog.session_dir.name)
    records = read_jsonl(folder / files.rank_jsonl(0))
    times = {r["step"]: r["timing"]["step_time_seconds"] for r in records if r["type"] == "training_step_complete"}
    perf = [r for r in records if r["type"] == "performance"]
    assert [(p["step"], p["window_steps"]) for p in perf] == [(2, 2), (4, 2), (5, 1)]
    for p, window in zip(perf, ([1, 2], [3, 4], [5]), strict=True):
        assert p["throughput_samples_s"] is None and p["total_batch_size"] is None  # unknown, not 0
        assert p["avg_step_time_s"] == pytest.approx(sum(times[s] for s in window) / len(window), abs=2e-6)
    text = (folder / files.performance_log).read_text()
    assert "None" not in text and "Performance |" not in text
    for line in text.splitlines():
        parsed = PROCESS_LINE.parse(line)
        assert parsed and parse_message(parsed["message"]), line
