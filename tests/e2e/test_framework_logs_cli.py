"""``analyze_logs DIR --json`` as typed, on LLaMA-Factory output folders (real files: tests/data/frameworks/
README.md): the world size, the total batch, the final loss, the runtime and the framework of each run.

Expected values are read here from the files themselves (json, regex), never from logkit's output.
"""

from __future__ import annotations

import json
import re
import shutil

import logkit
from tests.support.launch import REPO, analyze_logs

DATA = REPO / "tests" / "data" / "frameworks"
RUNS = ("llamafactory_qwen3_lora", "llamafactory_mistral_translator")


def test_analyze_logs_json_on_llamafactory_output_folders(tmp_path):
    for name in RUNS:
        shutil.copytree(DATA / name, tmp_path / "saves" / name)
    proc = analyze_logs(str(tmp_path / "saves"), "--json")
    assert proc.returncode == 0, proc.stderr
    sessions = {s["session_id"].rsplit("/", 1)[-1]: s for s in json.loads(proc.stdout)["sessions"]}
    assert set(sessions) == set(RUNS)

    qwen = tmp_path / "saves" / "llamafactory_qwen3_lora"
    log = (qwen / "running_log.txt").read_text(encoding="utf-8")
    total = int(re.search(r"Total train batch size \(w\. parallel, distributed & accumulation\) = (\d+)", log)[1])
    per = int(re.search(r"Instantaneous batch size per device = (\d+)", log)[1])
    acc = int(re.search(r"Gradient Accumulation steps = (\d+)", log)[1])
    results = json.loads((qwen / "train_results.json").read_text())
    s = sessions["llamafactory_qwen3_lora"]
    assert s["total_batch_size"] == total == 112  # as stated; the rates would give 14.427 / 0.128 -> 113
    assert s["world_size"] == total // (per * acc) == 7
    assert s["duration_s"] == results["train_runtime"]
    assert s["final_loss"] is None  # no loss was logged (logging_steps 996 > 768 steps): none is made up

    mistral = tmp_path / "saves" / "llamafactory_mistral_translator"
    entries = [json.loads(x) for x in (mistral / "trainer_log.jsonl").read_text().splitlines() if x.strip()]
    results = json.loads((mistral / "all_results.json").read_text())
    s = sessions["llamafactory_mistral_translator"]
    assert s["final_loss"] == [e["loss"] for e in entries if "loss" in e][-1] == 0.1333
    assert s["duration_s"] == results["train_runtime"]
    assert s["total_steps"] == entries[-1]["current_steps"]

    # the framework each folder was written by (in the session's meta, which --json's facts block shows)
    assert {logkit.load_session(tmp_path / "saves" / n).meta.framework for n in RUNS} == {"llamafactory"}


def test_a_folder_of_launcher_lines_or_a_config_echo_alone_is_a_session(tmp_path):
    """Not "no logkit sessions found": each file alone gives a session with the world size it states."""
    for name in ("deepspeed_launcher_37505.log", "accelerate_env_1473.txt", "unsloth_224_old_banner.log"):
        folder = tmp_path / name.split(".")[0]
        folder.mkdir()
        shutil.copy(DATA / name, folder / name)
        proc = analyze_logs(str(folder), "--json")
        assert proc.returncode == 0, proc.stderr
        (session,) = json.loads(proc.stdout)["sessions"]
        text = (DATA / name).read_text(encoding="utf-8")
        stated = re.search(r"dist_world_size=(\d+)|num_processes: (\d+)|Num GPUs = (\d+)", text)
        assert session["world_size"] == int(next(g for g in stated.groups() if g))
