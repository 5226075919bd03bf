"""The findings, end to end: a real training loop (1 process, TrainingLogger at ultra) with a
sleep, a loss spike and a collapsed gradient at known steps; the records they give in the
JSONL stream and the warning lines in performance.log."""

from __future__ import annotations

import statistics
import time

import pytest

from logkit.schema import PROCESS_LINE, SLOW_STEP, SessionFiles
from tests.support.launch import read_jsonl

STEPS, SLOW_AT, SPIKE_AT, DEAD_AT, SLEEP = 30, 12, 18, 24, 0.6


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    torch = pytest.importorskip("torch")
    from trainer_hooks import TrainingLogger

    torch.manual_seed(0)
    torch.set_num_threads(1)
    model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.ReLU(), torch.nn.Linear(64, 1))
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)  # a near-flat loss: spikes stand out
    x = torch.randn(256, 32)
    y = x @ torch.randn(32, 1)
    losses = {}
    tmp = tmp_path_factory.mktemp("detectors")
    with TrainingLogger(tmp, "ultra", model=model, per_device_batch_size=256, max_steps=STEPS,
                        gpu_snapshot_interval=0) as tlog:
        for n in range(1, STEPS + 1):
            with tlog.step() as step:
                # targets x30 make the loss (and every gradient) spike; inputs x0 zero the first
                # layer's weight gradient (dL/dW = delta x^T)
                xb = x * (0.0 if n == DEAD_AT else 1.0)
                loss = torch.nn.functional.mse_loss(model(xb), y * (30.0 if n == SPIKE_AT else 1.0))
                loss.backward()
                tlog.check_gradients(loss)
                opt.step()
                opt.zero_grad()
                if n == SLOW_AT:
                    time.sleep(SLEEP)  # e.g. a stalled data loader or a straggling peer
                losses[n] = loss.item()
                step.log(loss=losses[n], learning_rate=1e-4)
    session = tlog.session_dir
    files = SessionFiles(session.name)
    return session, files, read_jsonl(session / files.rank_jsonl(0)), losses


def _findings(records, kind):
    return [r for r in records if r["type"] in ("anomaly", "resource_warning") and r.get("kind") == kind]


def test_a_slow_step_is_found_at_its_step(run):
    session, files, records, _ = run
    steps = {r["step"]: r for r in records if r["type"] == "training_step_complete"}
    slow = {r["step"]: r for r in _findings(records, "slow_step")}
    assert SLOW_AT in slow
    finding = slow[SLOW_AT]
    assert finding["type"] == "anomaly" and finding["level"] == "WARNING"
    assert finding["value"] == pytest.approx(steps[SLOW_AT]["timing"]["step_time_seconds"], abs=1e-6)
    assert finding["value"] >= SLEEP and finding["value"] > finding["threshold"]
    assert finding["threshold"] == pytest.approx(3 * finding["median"], abs=4e-6)  # both rounded to 1 us
    # the performance.log line, with the same value
    lines = [PROCESS_LINE.parse(x) for x in (session / files.performance_log).read_text().splitlines()]
    said = [SLOW_STEP.parse(p["message"]) for p in lines if p and SLOW_STEP.parse(p["message"])]
    assert {"step_time_s": round(finding["value"], 1)} in said
    assert len(said) == len(slow)
    assert f"Slow training detected: {finding['value']:.1f}s per step" in (session / files.performance_log).read_text()


def test_a_loss_spike_is_found_at_its_step(run):
    _, _, records, losses = run
    spikes = {r["step"]: r for r in _findings(records, "loss_spike")}
    assert SPIKE_AT in spikes and min(spikes) == SPIKE_AT  # nothing before it on the flat curve
    spike = spikes[SPIKE_AT]
    assert spike["type"] == "anomaly" and spike["value"] == losses[SPIKE_AT]
    assert spike["value"] > spike["threshold"] > spike["median"]
    assert spike["median"] == pytest.approx(statistics.median(losses[s] for s in range(1, SPIKE_AT)))


def test_layer_gradients_explode_and_collapse_at_their_steps(run):
    _, _, records, _ = run
    norms = {r["step"]: r["layer_grad_norms"] for r in records if r["type"] == "training_step_complete"}
    explode = [(r["step"], r["tensor"]) for r in _findings(records, "grad_explode")]
    vanish = [(r["step"], r["tensor"]) for r in _findings(records, "grad_vanish")]
    assert (SPIKE_AT, "0.weight") in explode and min(s for s, _ in explode) == SPIKE_AT
    assert vanish == [(DEAD_AT, "0.weight")]  # collapsed to 0 after being clearly non-zero
    assert norms[DEAD_AT]["0.weight"] == 0.0 and norms[DEAD_AT - 1]["0.weight"] > 1e-3
    (finding,) = [r for r in _findings(records, "grad_vanish")]
    assert finding["value"] == 0.0 and finding["median"] > 1e-3
    assert finding["message"].startswith("Gradient norm of 0.weight collapsed to 0")
