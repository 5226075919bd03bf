"""ms-swift's output folder: ``logging.jsonl`` (its logging records: the Trainer's log dict with ms-swift's
progress keys; 2.x: an integer ``global_step``, each record written twice) and ``args.json`` (its arguments:
``global_world_size``). A real 2.x excerpt (``tests/data/ms_swift/``, cited in its README), another program's
``logging.jsonl``, and variations made here (3.x records, an args.json); expected values read off the
lines by eye."""

from __future__ import annotations

import json
import shutil

import pytest

import logkit
from logkit.ingest.readers.ms_swift import seconds
from tests.support.launch import REPO

DATA = REPO / "tests" / "data" / "ms_swift"


def test_a_2x_folder():
    s = logkit.load_session(DATA / "swift_2x_output")
    # lines 1, 3, 5 (2, 4, 6 repeat them): steps 1, 5, 10
    assert s.steps[["step", "loss"]].values.tolist() == [[1, 5.04565144], [5, 4.96214485], [10, 4.96434174]]
    assert s.steps["grad_norm"].tolist() == [484.0, 476.0, 478.0]
    assert s.meta.framework == "ms-swift" and s.meta.final_loss == 4.96434174
    assert s.diagnostics.empty


def test_another_programs_logging_jsonl_is_no_session(tmp_path):
    shutil.copy(DATA / "chat_logging.jsonl", tmp_path / "logging.jsonl")
    assert logkit.load_sessions(tmp_path) == []


# 3.x records as its log callback writes them (variation: the keys of ms-swift 3's logging.jsonl, values made here)
_3X = [
    {"loss": 2.5, "grad_norm": 9.0, "learning_rate": 1e-4, "epoch": 0.01, "global_step/max_steps": "1/40",
     "percentage": "2.50%", "elapsed_time": "5s", "remaining_time": "3m 15s", "memory(GiB)": 20.1,
     "train_speed(iter/s)": 0.2},
    {"loss": 1.25, "grad_norm": 3.0, "learning_rate": 5e-5, "epoch": 0.5, "global_step/max_steps": "20/40",
     "percentage": "50.00%", "elapsed_time": "1h 1m 40s", "remaining_time": "1m 40s", "memory(GiB)": 20.4,
     "train_speed(iter/s)": 0.2},
    {"eval_loss": 1.5, "eval_runtime": 10.0, "eval_token_acc": 0.6, "epoch": 0.5, "global_step/max_steps": "20/40",
     "elapsed_time": "1h 2m"},
    {"train_runtime": 3800.5, "train_samples_per_second": 1.5, "train_steps_per_second": 0.01, "train_loss": 1.8,
     "epoch": 1.0, "global_step/max_steps": "40/40", "elapsed_time": "1h 3m 20s"},
    {"last_model_checkpoint": "/out/v0/checkpoint-40", "best_metric": 1.5, "global_step": 40, "log_history": []},
]
_ARGS = {"model": "Qwen/Qwen2.5-7B-Instruct", "train_type": "lora", "per_device_train_batch_size": 2,
         "gradient_accumulation_steps": 8, "deepspeed": None, "rank": 0, "global_world_size": 4, "local_world_size": 4}


@pytest.fixture
def folder_3x(tmp_path):
    out = tmp_path / "v0-20250101-000000"
    out.mkdir()
    (out / "logging.jsonl").write_text("".join(json.dumps(r) + "\n" for r in _3X), encoding="utf-8")
    (out / "args.json").write_text(json.dumps(_ARGS, indent=2), encoding="utf-8")
    return out


def test_a_3x_folder(folder_3x):
    found = logkit.load_sessions(folder_3x.parent)
    assert len(found) == 1
    s = found[0]
    assert s.steps[["step", "loss"]].values.tolist() == [[1, 2.5], [20, 1.25]]
    assert s.steps["time_s"].tolist() == [5.0, 3700.0]  # "5s", "1h 1m 40s"
    ev = s.evals.set_index("name")
    assert ev.loc["eval_loss", "value"] == 1.5 and ev.loc["eval_loss", "step"] == 20
    assert "eval_runtime" not in ev.index  # a rate of the evaluation, no metric
    assert (s.meta.duration_s, s.meta.train_loss, s.meta.samples_per_second) == (3800.5, 1.8, 1.5)
    assert (s.meta.progress["step"], s.meta.progress["total"]) == (40, 40)
    assert s.meta.final_loss == 1.25 and s.meta.best_metric == 1.5
    # args.json: "global_world_size": 4 on line 8 of json.dumps(indent=2)
    assert s.meta.world_size == 4 and s.meta.world_size_from.startswith("stated:")
    assert s.meta.facts_source["world_size"] == "args.json:8"
    assert (s.meta.per_device_batch_size, s.meta.gradient_accumulation_steps) == (2, 8)
    assert s.meta.framework == "ms-swift" and s.diagnostics.empty


def test_a_torn_line_is_a_diagnostic(folder_3x):
    with open(folder_3x / "logging.jsonl", "a", encoding="utf-8") as fh:
        fh.write('{"loss": 1.0, "global_step/max_st\n')
    s = logkit.load_session(folder_3x)
    assert s.diagnostics["line"].tolist() == [6] and len(s.steps) == 2


@pytest.mark.parametrize("text, expected", [("6s", 6), ("46m 13s", 2773), ("1h 2m", 3720), ("1d 1s", 86401),
                                            ("soon", None), ("", None)])
def test_elapsed_time_words(text, expected):
    assert seconds(text) == expected


def test_the_line_of_a_top_level_key_and_of_a_key_after_another(tmp_path):
    # made here: json.dump(indent=2) of a nested "global_world_size" (line 3) before the top-level one (line 5),
    # and a "stage" (line 8) after "zero_optimization" (line 7), another "stage" before it (line 6)
    from logkit.ingest.readers.base import Read
    from logkit.ingest.readers.formats import FileFormat
    from logkit.ingest.readers.json_docs import line_of
    doc = {"inner": {"global_world_size": 2}, "global_world_size": 4, "stage": "x", "zero_optimization": {"stage": 2}}
    path = tmp_path / "args.json"
    path.write_text(json.dumps(doc, indent=2))
    read = Read(path, FileFormat.MS_SWIFT_ARGS)
    assert line_of(read, '"global_world_size"', top=True) == 5
    assert line_of(read, '"global_world_size"') == 3
    assert line_of(read, '"stage"', after='"zero_optimization"') == 8
    assert line_of(read, '"missing"') is None
