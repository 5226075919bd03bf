"""A NaN loss at a known step of a real transformers Trainer run (tiny Llama, 1 process):
the report names the loss itself, then the gradients or parameters it poisoned, and dumps them."""

from __future__ import annotations

import math

import pytest

from logkit.schema import SessionFiles
from tests.support.launch import read_jsonl

NAN_STEP, STEPS = 3, 5


def _run(tmp, verbosity: str, **settings):
    torch = pytest.importorskip("torch")
    from transformers import LlamaConfig, LlamaForCausalLM, Trainer, TrainingArguments

    from trainer_hooks import LogkitCallback

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                         num_attention_heads=2, num_key_value_heads=2))
    data = [{"input_ids": torch.arange(i, i + 16) % 64, "labels": torch.arange(i, i + 16) % 64} for i in range(64)]
    callback = LogkitCallback(log_dir=str(tmp / "logs"), verbosity=verbosity, gpu_snapshot_interval=0,
                              **settings)
    args = TrainingArguments(output_dir=str(tmp / "out"), max_steps=STEPS, per_device_train_batch_size=2,
                             logging_steps=1, save_strategy="no", report_to=[], use_cpu=True, disable_tqdm=True)
    trainer = Trainer(model=model, args=args, train_dataset=data, callbacks=[callback])

    def inject(module, inputs, output):  # the model's own loss turns NaN at NAN_STEP
        if module.training and trainer.state.global_step + 1 == NAN_STEP:
            output["loss"] = output["loss"] * float("nan")
        return output

    model.register_forward_hook(inject)  # before the callback's: it sees the NaN
    trainer.train()
    session = callback.session_dir
    return session, read_jsonl(session / SessionFiles(session.name).rank_jsonl(0)), trainer


@pytest.fixture(scope="module", params=["high", "ultra"])
def nan_run(request, tmp_path_factory):
    return request.param, *_run(tmp_path_factory.mktemp(f"nan_{request.param}"), request.param)


def test_nan_loss_report_names_the_loss_and_what_it_poisoned(nan_run):
    from safetensors import safe_open

    verbosity, session, records, trainer = nan_run
    reports = [r for r in records if r["type"] == "nan_detected"]
    first = reports[0]
    assert first["step"] == NAN_STEP and first["kind"] == "nan_loss"  # nothing before the injected step
    loss = first["tensors"][0]
    assert (loss["name"], loss["kind"], loss["shape"], loss["nan_count"], loss["inf_count"]) == ("loss", "loss", [], 1, 0)
    trainable = {n: p for n, p in trainer.model.named_parameters() if p.requires_grad}
    kinds = {t["kind"] for t in first["tensors"]}
    if verbosity == "ultra":
        # read before the optimizer step: every gradient is NaN, the parameters not yet
        grads = {t["name"]: t for t in first["tensors"] if t["kind"] == "gradient"}
        assert kinds == {"loss", "gradient"} and set(grads) == set(trainable)
        assert all(t["nan_count"] == t["numel"] == trainable[n].numel() for n, t in grads.items())
        dumped_names = {"loss"} | {f"{n}.grad" for n in grads}
    else:
        # read when the loss is logged: the optimizer step has spread the NaN into the weights
        params = {t["name"]: t for t in first["tensors"] if t["kind"] == "parameter"}
        assert kinds == {"loss", "parameter"} and set(params) == set(trainable)
        assert all(t["shape"] == list(trainable[n].shape) for n, t in params.items())
        dumped_names = {"loss"} | set(params)
    with safe_open(str(session / first["dump_path"]), framework="pt") as f:
        assert set(f.keys()) == dumped_names
        assert math.isnan(f.get_tensor("loss").item())
    (anomaly,) = [r for r in records if r["type"] == "anomaly" and r.get("step") == NAN_STEP
                  and r["kind"].startswith("nan")]
    assert anomaly["kind"] == "nan_loss" and anomaly["value"] is None
    # the Trainer's logging_nan_inf_filter logged a finite loss: the report did not need it
    logged = {e["step"]: e for e in trainer.state.log_history if "loss" in e}
    assert math.isfinite(logged[NAN_STEP]["loss"]) and math.isnan(logged[NAN_STEP]["grad_norm"])
    main_log = (session / SessionFiles(session.name).main_log).read_text()
    assert f"NaN/Inf DETECTED [rank 0] at step {NAN_STEP} (nan_loss)" in main_log
    assert "  • loss (loss, shape []): NaN 1/1, Inf 0/1" in main_log


def _steps(records) -> list[int]:
    return [r["step"] for r in records if r["type"] == "training_step_complete"]


def test_without_stop_on_nan_training_goes_on(nan_run):
    _, _, records, trainer = nan_run
    assert trainer.state.global_step == STEPS and _steps(records) == list(range(1, STEPS + 1))


@pytest.mark.parametrize("verbosity", ["high", "ultra"])
def test_stop_on_nan_stops_the_trainer_at_the_nan_step(tmp_path, verbosity):
    # high: the NaN is seen in the trainer's log of the step (its grad norm); ultra: in the
    # gradients before the optimizer step. Either way the Trainer stops after that very step.
    _, records, trainer = _run(tmp_path, verbosity, stop_on_nan=True)
    assert trainer.state.global_step == NAN_STEP
    assert _steps(records) == list(range(1, NAN_STEP + 1))
    assert [r["step"] for r in records if r["type"] == "nan_detected"] == [NAN_STEP]
    assert records[-1]["type"] == "session_end" and records[-1]["total_steps"] == NAN_STEP


@pytest.mark.parametrize("stop_on_nan", [True, False])
def test_the_loop_helper_asks_to_stop_at_the_nan_step_only_when_told(tmp_path, stop_on_nan):
    torch = pytest.importorskip("torch")
    from trainer_hooks import TrainingLogger

    torch.manual_seed(0)
    model = torch.nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    x, y = torch.randn(8, 4), torch.randn(8, 1)
    asked = {}
    settings = {"stop_on_nan": True} if stop_on_nan else {}
    with TrainingLogger(tmp_path, model=model, per_device_batch_size=8, max_steps=STEPS, gpu_snapshot_interval=0,
                        **settings) as tlog:
        for n in range(1, STEPS + 1):
            with tlog.step() as step:
                loss = torch.nn.functional.mse_loss(model(x), y) * (float("nan") if n == NAN_STEP else 1.0)
                loss.backward()
                tlog.check_gradients(loss)
                opt.step()
                opt.zero_grad()
                step.log(loss=loss.item())
            asked[n] = tlog.should_stop
            if asked[n]:
                break
    if stop_on_nan:
        assert asked == {n: n == NAN_STEP for n in range(1, NAN_STEP + 1)}
    else:  # the NaN is reported (and poisons every later step) but the loop is never asked to stop
        assert asked == dict.fromkeys(range(1, STEPS + 1), False)
    records = read_jsonl(tlog.session_dir / SessionFiles(tlog.session_dir.name).rank_jsonl(0))
    assert min(r["step"] for r in records if r["type"] == "nan_detected") == NAN_STEP
