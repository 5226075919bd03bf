"""Verbosity levels, the settings and environment variables, the verbose callback's name,
and what ``ultra`` adds, on a real (single-process) transformers Trainer run."""

from __future__ import annotations

import math
import time

import pytest

from logkit.schema import STEP_LINE, SessionFiles
from tests.support.launch import read_jsonl
from trainer_hooks.session_logger import SessionLogger
from trainer_hooks.settings import resolve_settings


def test_settings_resolve_from_verbosity_then_env_then_arguments():
    low = resolve_settings("low", env={})
    assert (low.log_interval_steps, low.step_records_every, low.communication_records) == (50, 50, False)
    high = resolve_settings("high", env={})
    assert (high.log_interval_steps, high.resource_usage_steps, high.grad_check) == (1, 1, False)
    ultra = resolve_settings("ultra", env={})
    assert ultra.layer_grad_norms and ultra.trainer_logs and ultra.batch_records and ultra.grad_check
    env = resolve_settings("high", env={"TRAINING_LOG_LEVEL": "warning", "MULTIGPU_LOG_LEVEL": "DEBUG"})
    assert env.main_level == "WARNING" and env.multigpu_level == "DEBUG" and env.comm_log_interval == 1
    given = resolve_settings("medium", env={}, log_interval_steps=7, performance_log_steps=None)
    assert given.log_interval_steps == 7 and given.performance_log_steps == 50  # None = not given
    with pytest.raises(TypeError, match="unknown logging settings"):
        resolve_settings("high", env={}, log_intervall_steps=3)
    with pytest.raises(ValueError, match="verbosity"):
        resolve_settings("loud", env={})


def _steps(log, n=6, loss=2.0):
    log.start(per_device_batch_size=2, max_steps=n)
    for step in range(1, n + 1):
        log.step_begin()
        time.sleep(0.001)  # steps long enough for the 6-digit rounding of step times
        log.step_end(step, loss=loss / step, learning_rate=1e-3)
    log.end()
    return SessionFiles(log.session_id)


def test_low_verbosity_keeps_milestones_only(tmp_path):
    # a memory threshold every machine is above: findings are still written at low
    log = SessionLogger(tmp_path, "low", gpu_snapshot_interval=0.2, memory_high_pct=0.01)
    files = _steps(log, n=60)
    folder = tmp_path / log.session_id
    records = read_jsonl(folder / files.rank_jsonl(0))
    steps = [r for r in records if r["type"] == "training_step_complete"]
    assert [r["step"] for r in steps] == [50, 60]  # progress every 50 steps, and the last one
    assert all("trends" not in r and "resource_usage" not in r for r in records)
    # no periodic performance records, no snapshots: one performance record, the final statistic
    (perf,) = [r for r in records if r["type"] == "performance"]
    assert perf["step"] == 60 and perf["window_steps"] == 60 and perf["total_batch_size"] == 2
    assert perf["throughput_samples_s"] == pytest.approx(2 / perf["avg_step_time_s"], rel=1e-3)
    assert not [r for r in records if r["type"] in ("gpu_snapshot", "communication", "batch_complete")]
    memory = [r for r in records if r["type"] == "resource_warning" and r["kind"] == "memory_high"]
    assert memory and all(0.01 < r["value"] <= 100 and r["threshold"] == 0.01 for r in memory)
    text = (folder / files.performance_log).read_text()
    assert text.count("Performance |") == 1 and text.count("Host memory usage high") == len(memory)


def test_training_log_level_filters_main_log(tmp_path, monkeypatch):
    monkeypatch.setenv("TRAINING_LOG_LEVEL", "WARNING")
    log = SessionLogger(tmp_path, "high", gpu_snapshot_interval=0)
    files = _steps(log)
    main_log = tmp_path / log.session_id / files.main_log
    main = main_log.read_text() if main_log.exists() else ""  # nothing at WARNING or above: no file
    assert not [line for line in main.splitlines() if STEP_LINE.parse(line)]
    monkeypatch.delenv("TRAINING_LOG_LEVEL")
    log = SessionLogger(tmp_path, "high", gpu_snapshot_interval=0)
    files = _steps(log)
    main = (tmp_path / log.session_id / files.main_log).read_text()
    assert len([line for line in main.splitlines() if STEP_LINE.parse(line)]) == 6


@pytest.fixture(scope="module")
def tiny_trainer_run(tmp_path_factory):
    """A real Trainer run (tiny Llama, full precision, 1 process) with the verbose callback at ultra."""
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    from trainer_hooks import VerboseLoggingCallback

    tmp = tmp_path_factory.mktemp("ultra")
    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    data = [{"input_ids": torch.arange(i, i + 16) % 64, "labels": torch.arange(i, i + 16) % 64} for i in range(64)]
    callback = VerboseLoggingCallback(verbosity_level="ultra", log_file=str(tmp / "verbose_training_logs.jsonl"),
                                      log_dir=str(tmp / "logs"), gpu_snapshot_interval=0.5)
    args = TrainingArguments(output_dir=str(tmp / "out"), max_steps=4, per_device_train_batch_size=2,
                             gradient_accumulation_steps=2, logging_steps=1, save_strategy="steps", save_steps=2,
                             eval_strategy="steps", eval_steps=2, per_device_eval_batch_size=4, report_to=[],
                             use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, eval_dataset=data[:8], callbacks=[callback])
    trainer.train()
    session = callback.session_dir
    return tmp, session, read_jsonl(session / SessionFiles(session.name).rank_jsonl(0)), trainer


def test_seed_004_callback_name_and_log_file(tiny_trainer_run):
    tmp, session, records, _ = tiny_trainer_run
    mirror = read_jsonl(tmp / "verbose_training_logs.jsonl")
    assert mirror == records  # the same stream, in the verbose callback's single file too
    assert records[0]["verbosity"] == "ultra"


def test_ultra_adds_layer_norms_batches_and_trainer_logs(tiny_trainer_run):
    _, _, records, trainer = tiny_trainer_run
    steps = [r for r in records if r["type"] == "training_step_complete"]
    assert len(steps) == 4
    trainable = {n for n, p in trainer.model.named_parameters() if p.requires_grad}
    for r in steps:
        norms = r["layer_grad_norms"]
        assert set(norms) == trainable and all(v is not None and v >= 0 for v in norms.values())
    # every micro-batch (gradient_accumulation_steps=2), with its duration within its step's
    batches = [r for r in records if r["type"] == "batch_complete"]
    assert [(r["step"], r["micro_batch"]) for r in batches] == [(s, m) for s in (1, 2, 3, 4) for m in (1, 2)]
    for r in steps:
        durations = [b["duration_s"] for b in batches if b["step"] == r["step"]]
        assert all(d > 0 for d in durations) and sum(durations) <= r["timing"]["step_time_seconds"]
    logs = [r for r in records if r["type"] == "trainer_log"]
    assert {r["logs"]["loss"] for r in logs if "loss" in r["logs"]} == {r["metrics"]["loss"] for r in steps}
    assert any("train_runtime" in r["logs"] for r in logs)
    # the per-layer norms are read just before the optimizer step, after clipping: their
    # root-sum-square is transformers' logged (pre-clip) grad_norm, clipped at max_grad_norm
    max_norm = trainer.args.max_grad_norm
    for r in steps:
        total = sum(v * v for v in r["layer_grad_norms"].values()) ** 0.5
        assert total == pytest.approx(min(r["metrics"]["grad_norm"], max_norm), rel=1e-4)


def test_evaluation_checkpoint_dataset_and_model_records(tiny_trainer_run):
    tmp, _, records, trainer = tiny_trainer_run
    evals = [r for r in records if r["type"] == "evaluation"]
    logged = [e for e in trainer.state.log_history if "eval_loss" in e]
    assert [r["step"] for r in evals] == [e["step"] for e in logged] == [2, 4]
    for r, e in zip(evals, logged, strict=True):
        assert r["metrics"]["eval_loss"] == e["eval_loss"]
        assert r["metrics"]["eval_perplexity"] == pytest.approx(math.exp(e["eval_loss"]))
    saves = [r for r in records if r["type"] == "checkpoint_saved"]
    assert [r["step"] for r in saves] == [2, 4]
    for r in saves:
        on_disk = sum(f.stat().st_size for f in (tmp / "out" / f"checkpoint-{r['step']}").rglob("*") if f.is_file())
        assert r["size_bytes"] == on_disk > 0
    (data,) = [r for r in records if r["type"] == "dataset_info"]
    assert data["num_samples"] == 64 and data["sample_shapes"]["input_ids"] == [16]
    (model,) = [r for r in records if r["type"] == "model_info"]
    assert model["parameters_total"] == sum(p.numel() for p in trainer.model.parameters())
    assert model["parameters_trainable"] == model["parameters_total"]  # no adapters: all trainable
    (system,) = [r for r in records if r["type"] == "system_info"]
    assert system["cpu_count"] >= 1 and system["memory_total_gb"] > 0
    assert [r["epoch"] for r in records if r["type"] == "epoch_complete"]


def test_ultra_writes_the_complete_system_state_every_step(tiny_trainer_run):
    import psutil

    _, _, records, _ = tiny_trainer_run
    steps = [r for r in records if r["type"] == "training_step_complete"]
    notes = [r["message"] for r in records if r["type"] == "resource_warning" and r["kind"] == "sampling_degraded"]
    disk_here = psutil.disk_io_counters() is not None
    sensors_here = any(e.current and e.current > 0 for v in psutil.sensors_temperatures().values() for e in v)
    for r in steps:
        usage = r["resource_usage"]
        assert 0 < usage["memory"]["process_rss_gb"] < usage["memory"]["total_gb"]
        assert usage["network"]["bytes_recv"] >= 0 and usage["network"]["bytes_sent"] >= 0
        assert ("disk" in usage) == disk_here
        if disk_here:
            assert usage["disk"]["read_bytes"] > 0 and usage["disk"]["write_bytes"] > 0
        assert ("temperatures" in usage) == sensors_here
        if sensors_here:
            assert usage["temperatures"]["max_c"] == max(usage["temperatures"]["sensors"].values())
    # the I/O rates are aggregated per interval like any other metric
    snaps = [r for r in records if r["type"] == "gpu_snapshot"]
    assert snaps and all("recv_mb_s_max" in s["resource_usage"]["network"] for s in snaps)
    assert ("host temperature sensors not available: not sampled" in notes) == (not sensors_here)


@pytest.mark.parametrize("verbosity, hooked", [("low", False), ("high", True)])
def test_the_loss_hook_is_on_the_models_forward_above_low_only(tmp_path, verbosity, hooked):
    """``loss_tensors``: at low the callback puts no hook on the model's forward (a hook makes torch take
    its slower call path every forward); above it keeps each micro-batch's loss tensor for a NaN report."""
    import torch
    from transformers import TrainerControl, TrainerState, TrainingArguments

    from trainer_hooks import LogkitCallback

    model = torch.nn.Linear(2, 2)
    callback = LogkitCallback(log_dir=str(tmp_path), verbosity=verbosity, end_verdict=False,
                              gpu_snapshot_interval=0)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), use_cpu=True, report_to=[])
    state = TrainerState()
    state.max_steps = 1
    callback.on_train_begin(args, state, TrainerControl(), model=model)
    try:
        assert bool(model._forward_hooks) is hooked
        assert callback.logger.settings.loss_tensors is hooked
    finally:
        callback.on_train_end(args, state, TrainerControl())
    assert not model._forward_hooks  # removed at the end either way
