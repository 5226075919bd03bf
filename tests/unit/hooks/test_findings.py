"""The findings' detectors and the writer's faults, on values chosen to cross each threshold."""

from __future__ import annotations

import json
import os
import statistics
import time

import pytest

from tests.support.launch import REPO
from trainer_hooks.findings import (
    GradNormWatch,
    LossSpikeDetector,
    SlowStepDetector,
    resource_findings,
    trend,
)
from trainer_hooks.writer import RecordWriter

SAMPLE_LOGS = REPO / "sample_logs"


def test_slow_step_against_the_running_median():
    d = SlowStepDetector(factor=3.0, warmup=5)
    assert [d.check(t) for t in (5.0, 0.1, 0.1, 0.1, 0.1)] == [None] * 5  # warm-up: compile steps are slow
    assert d.check(0.25) is None
    finding = d.check(0.35)
    assert finding["kind"] == "slow_step" and finding["value"] == 0.35 and finding["median"] == 0.1


def test_loss_spike_uses_a_robust_spread():
    d = LossSpikeDetector(factor=3.0, warmup=5)
    for loss in (2.0, 2.02, 1.98, 2.01, 1.99, 2.0):
        assert d.check(loss) is None
    assert d.check(2.2) is None  # within median x 1.05^3 (the floor of the spread, on a log scale)
    finding = d.check(2.5)
    assert finding["kind"] == "loss_spike" and finding["threshold"] == pytest.approx(2.0 * 1.05**3)
    assert d.check(float("nan")) is None  # NaN has its own report


def test_loss_spike_on_losses_that_can_be_negative_is_linear():
    d = LossSpikeDetector(factor=3.0, warmup=5)
    for loss in (-0.02, 0.0, 0.01, -0.01, 0.02, 0.0):
        assert d.check(loss) is None
    finding = d.check(0.2)
    mad = 1.4826 * 0.01  # median |x - 0| of the window above
    assert finding["threshold"] == pytest.approx(3 * mad)


def _gpu_fixture_steps(run: str) -> list[dict]:
    (path,) = (SAMPLE_LOGS / "gpu" / run / "logs").glob("*/*_rank0.jsonl")
    records = [json.loads(line) for line in path.read_text().splitlines()]
    return [r for r in records if r["type"] == "training_step_complete"]


def test_the_right_skew_of_a_real_noisy_loss_is_not_a_spike():
    # a real run on an H100 (sample_logs/gpu/loop_monitored): an MSE regression at batch 64,
    # whose per-step loss is right-skewed. On a linear scale ~2% of its steps read as spikes.
    losses = [r["metrics"]["loss"] for r in _gpu_fixture_steps("loop_monitored")]
    d = LossSpikeDetector(factor=3.0)
    spikes = [i for i, x in enumerate(losses) if d.check(x)]
    assert len(losses) == 2000 and len(spikes) <= 0.01 * len(losses)
    linear = LossSpikeDetector(factor=3.0, log_scale=False)  # the old rule, for contrast
    assert sum(linear.check(x) is not None for x in losses) > 2 * max(1, len(spikes))
    # a real spike on the same curve is still found: three times the loss at step 1000
    d = LossSpikeDetector(factor=3.0)
    found = [d.check(x * (3 if i == 1000 else 1)) for i, x in enumerate(losses[:1001])]
    assert found[1000] is not None


def test_lora_adapters_waking_up_are_not_exploding_gradients():
    # a real QLoRA run at ultra on an H100 (sample_logs/gpu/qlora_ultra): LoRA B starts at zero, so
    # adapters' gradient norms grow tenfold in the first steps while each is a few % of the total
    steps = _gpu_fixture_steps("qlora_ultra")
    watch = GradNormWatch(factor=10.0, window=20, warmup=3)
    found, jumps_below_share = [], 0
    history: dict[str, list[float]] = {}
    for s in steps:
        norms = s["layer_grad_norms"]
        rms = (sum(v * v for v in norms.values()) / len(norms)) ** 0.5
        for name, v in norms.items():  # the relative rule alone, computed here independently
            past = history.setdefault(name, [])
            if len(past) >= 3 and v > 10 * statistics.median(past[-20:]) and v < rms:
                jumps_below_share += 1
            if v > 1e-8:
                past.append(v)
        for f in watch.check(norms):
            found.append(f)
            assert f["value"] >= rms and f["value"] > 10 * f["median"]
    assert jumps_below_share >= 5  # what the relative rule alone would have called explosions
    assert len(found) < jumps_below_share



def test_layer_gradients_exploding_and_vanishing():
    watch = GradNormWatch(factor=10.0, warmup=3)
    for _ in range(3):
        assert watch.check({"a": 1.0, "b": 1.0}) == []
    kinds = {(f["tensor"], f["kind"]) for f in watch.check({"a": 50.0, "b": 1e-10})}
    assert kinds == {("a", "grad_explode"), ("b", "grad_vanish")}


def _kinds(watch, norms):
    return [(f["tensor"], f["kind"]) for f in watch.check(norms)]


def test_a_layer_that_starts_at_zero_is_not_vanishing():
    # LoRA: B starts at zero, so A's gradient is exactly 0 at step 1, then grows with B
    watch = GradNormWatch()
    seen = [_kinds(watch, {"lora_A": a, "lora_B": 0.05}) for a in (0.0, 1e-4, 2e-4, 3e-4, 4e-4, 6e-4, 8e-4)]
    assert seen == [[]] * 7


def test_a_collapse_is_flagged_once_per_episode():
    watch = GradNormWatch(warmup=3)
    for norm in (0.01, 0.012, 0.011, 0.01):
        assert _kinds(watch, {"w": norm}) == []
    (finding,) = watch.check({"w": 0.0})
    assert (finding["kind"], finding["value"], finding["median"]) == ("grad_vanish", 0.0, pytest.approx(0.0105))
    assert "collapsed" in finding["message"]
    assert _kinds(watch, {"w": 0.0}) == []  # the same episode
    assert _kinds(watch, {"w": 0.011}) == []  # back: its reference is still the pre-collapse one
    assert _kinds(watch, {"w": 1e-9}) == [("w", "grad_vanish")]  # a new episode
    # a tiny-but-alive layer (median under active_abs) is never "collapsed"
    quiet = GradNormWatch(warmup=3)
    assert [_kinds(quiet, {"q": v}) for v in (1e-7, 2e-7, 1e-7, 0.0)] == [[]] * 4


def test_explode_is_against_the_layers_own_median_and_its_share():
    watch = GradNormWatch(factor=10.0, warmup=3)
    for _ in range(4):  # layers of very different sizes: no absolute threshold
        assert _kinds(watch, {"big": 5.0, "mid": 1.0, "small": 1e-3}) == []
    # 20x its median but a negligible share of the gradient (below the RMS of the layers' norms)
    assert _kinds(watch, {"big": 5.0, "mid": 1.0, "small": 2e-2}) == []
    # 20x and now the largest share: an explosion; said once per episode
    assert _kinds(watch, {"big": 5.0, "mid": 20.0, "small": 1e-3}) == [("mid", "grad_explode")]
    assert _kinds(watch, {"big": 5.0, "mid": 30.0, "small": 1e-3}) == []
    assert _kinds(watch, {"big": 5.0, "mid": float("nan"), "small": 1e-3}) == []  # NaN: reported elsewhere
    # every layer at once (a global blow-up): the ones at or above the RMS are named
    everything = GradNormWatch(factor=10.0, warmup=3)
    for _ in range(4):
        everything.check({"a": 1.0, "b": 1.0})
    assert {t for t, _ in _kinds(everything, {"a": 50.0, "b": 40.0})} == {"a"}


def test_no_false_gradient_findings_on_a_real_lora_run_at_ultra(tmp_path):
    torch = pytest.importorskip("torch")
    peft = pytest.importorskip("peft")
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    from logkit.schema import SessionFiles
    from tests.support.launch import read_jsonl
    from trainer_hooks import LogkitCallback

    torch.manual_seed(0)
    base = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                                        num_attention_heads=2, num_key_value_heads=2))
    model = peft.get_peft_model(base, peft.LoraConfig(r=4, lora_alpha=8, task_type="CAUSAL_LM",
                                                      target_modules=["q_proj", "v_proj", "up_proj", "down_proj"]))
    data = [{"input_ids": torch.arange(i, i + 16) % 64, "labels": torch.arange(i, i + 16) % 64} for i in range(64)]
    callback = LogkitCallback(log_dir=str(tmp_path / "logs"), verbosity="ultra", gpu_snapshot_interval=0)
    args = TrainingArguments(output_dir=str(tmp_path / "out"), max_steps=8, per_device_train_batch_size=4,
                             learning_rate=2e-3, logging_steps=1, save_strategy="no", report_to=[], use_cpu=True,
                             disable_tqdm=True)
    Trainer(model=model, args=args, train_dataset=data, callbacks=[callback]).train()
    session = callback.session_dir
    records = read_jsonl(session / SessionFiles(session.name).rank_jsonl(0))
    norms = {r["step"]: r["layer_grad_norms"] for r in records if r["type"] == "training_step_complete"}
    assert sorted(norms) == list(range(1, 9))
    lora_a = [n for n in norms[1] if "lora_A" in n]
    assert len(lora_a) == 8  # 4 targets x 2 layers
    # what used to give a false grad_vanish per LoRA layer: A's gradient is exactly 0 at step 1
    assert all(norms[1][n] == 0.0 for n in lora_a) and all(norms[2][n] > 0 for n in lora_a)
    assert all(norms[1][n.replace("lora_A", "lora_B")] > 0 for n in lora_a)
    assert not [r for r in records if r.get("kind") in ("grad_vanish", "grad_explode")]


def test_resource_thresholds():
    usage = {"memory": {"usage_percent": 93.0},
             "gpu": {"devices": [{"index": 0, "memory_usage_percent": 96.5, "utilization_percent": 99.0},
                                 {"index": 1, "memory_usage_percent": 40.0, "utilization_percent": 35.2}]}}
    found = {(f["kind"], f.get("gpu")) for f in resource_findings(usage, 90, 95, 50)}
    assert found == {("memory_high", None), ("gpu_memory_high", 0), ("gpu_util_low", 1)}
    assert resource_findings({}, 90, 95, 50) == []


def test_trend_direction():
    assert trend([1.0, 1.0, 1.0, 1.0, 2.0])["trend_direction"] == "increasing"
    assert trend([2.0, 2.0, 2.0, 2.0, 1.0])["trend_direction"] == "decreasing"
    assert trend([1.0, 1.0])["trend_direction"] == "stable"
    assert trend([None]) is None


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_disk_full_goes_to_the_errors_log_not_to_the_caller(tmp_path, capsys):
    writer = RecordWriter("/dev/full", tmp_path / "errors.log")
    for i in range(3):
        writer.put({"type": "x", "i": i, "timestamp": time.time()})
    writer.close()
    errors = (tmp_path / "errors.log").read_text()
    assert "No space left on device" in errors
    assert "training goes on" in capsys.readouterr().err  # said once on stderr


def test_a_file_removed_underneath_is_recreated(tmp_path):
    path = tmp_path / "stream.jsonl"
    writer = RecordWriter(path, tmp_path / "errors.log", flush_interval_s=0.05)
    writer.put({"type": "first", "timestamp": time.time()})
    deadline = time.time() + 5
    while not path.exists() and time.time() < deadline:
        time.sleep(0.02)
    path.unlink()
    time.sleep(1.3)  # the writer checks its files every second
    writer.put({"type": "second", "timestamp": time.time()})
    writer.close()
    assert '"type":"second"' in path.read_text()
    assert "was removed while in use" in (tmp_path / "errors.log").read_text()


class _FakeEvent:
    """Stands in for torch.cuda.Event: complete or not, with a time in ms."""

    def __init__(self, ms: float, done: bool = True) -> None:
        self.ms, self.done, self.synced = ms, done, False

    def query(self) -> bool:
        return self.done

    def synchronize(self) -> None:
        self.synced, self.done = True, True

    def elapsed_time(self, end) -> float:
        return end.ms - self.ms


def test_cuda_event_timings_are_read_when_ready_and_keep_their_step():
    """Bucket timings and each step's phases (the last-launched bucket's ready time from the step's
    anchor event, the first's, the last's all-reduce) come when the GPU has finished, in order."""
    from trainer_hooks.commhook import CommTimer

    timer = CommTimer()
    timer.anchor, timer.begin = _FakeEvent(-5.0), 100.0  # step 1 started 5 ms before its first bucket
    timer.pending.append((0, 1000, _FakeEvent(0.0), _FakeEvent(2.0), 0))
    timer.pending.append((1, 2000, _FakeEvent(1.0), _FakeEvent(4.0, done=False), 1))  # the GPU is still on it
    assert timer.collect(step=1) == ([(1, 0, 1000, 0.002)], [])  # no wait: bucket 1 stays in flight
    timer.anchor, timer.begin = _FakeEvent(9.0), 101.0
    timer.pending.append((0, 1000, _FakeEvent(10.0), _FakeEvent(11.0), 0))
    assert timer.collect(step=2) == ([], [])  # in order: step 2 waits behind step 1's open bucket
    ready, phases = timer.collect(step=3, wait=True)  # session end: wait for the GPU
    assert ready == [(1, 1, 2000, 0.003), (2, 0, 1000, 0.001)]
    # (step, begin, compute: anchor to the last bucket's start, first ready, last bucket's sync, buckets)
    assert [p[:6] for p in phases] == [(1, 100.0, 0.006, 0.005, 0.003, 2), (2, 101.0, 0.001, 0.001, 0.001, 1)]
    # and the time a bucket was in flight: [0, 2] and [1, 4] ms make 4 ms; [10, 11] 1 ms
    assert [p[6] for p in phases] == pytest.approx([0.004, 0.001])
