"""Ingest of every format logkit reads, from the fixtures in sample_logs/, and robustness
(hypothesis): no input crashes a reader, and every line nothing used is a diagnostic."""

from __future__ import annotations

import gzip
import json
import re
import shutil
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import logkit
from logkit.ingest.discover import discover
from logkit.ingest.readers import READERS, read_file, sniff
from logkit.ingest.readers.base import UNMATCHED
from tests.support.launch import REPO, analyze_logs

SAMPLES = REPO / "sample_logs"


def events(session, kind):
    return session.events[session.events["kind"] == kind].reset_index(drop=True)


def test_torchrun_capture_nccl_timeouts_mismatch_and_child_failures():
    s = logkit.load_session(SAMPLES / "console" / "torchrun_nccl_timeout.log")
    assert s.diagnostics.empty and s.meta["world_size"] == 2 and s.meta["nccl_version"] == "2.20.5+cuda12.4"
    inits = events(s, "nccl_init")
    assert inits[["host", "rank", "nranks", "comm_id", "network"]].values.tolist() == [
        ["node1", 0, 2, "0x7f3a2c1e9b5d4a10", "Socket"], ["node1", 1, 2, "0x7f3a2c1e9b5d4a10", "Socket"]]
    (warn,) = events(s, "nccl_warn").to_dict("records")
    assert warn["host"] == "node1" and warn["rank"] == 1 and "Connection closed" in warn["message"]
    assert warn["chain"] == "misc/socket.cc:752 -> 6; transport/net_socket.cc:474 -> 6; transport/net.cc:1302 -> 6"
    timeouts = events(s, "nccl_timeout")  # the one glued to a progress bar, and no duplicate from what():
    assert timeouts[["rank", "op", "seq", "numel", "timeout_ms", "elapsed_ms"]].values.tolist() == [
        [0, "ALLREDUCE", 451, 8388608, 600000.0, 600020.0], [1, "BROADCAST", 451, 1, 600000.0, 600097.0]]
    (mismatch,) = events(s, "collective_mismatch").to_dict("records")
    assert (mismatch["seq"], mismatch["ranks"], mismatch["ops"]) == (451, "0,1", "ALLREDUCE,BROADCAST")
    failed = events(s, "child_failed").sort_values("rank")
    assert failed[["rank", "local_rank", "host", "exitcode", "signal"]].values.tolist() == [
        [0, 0, "node1", -15, "SIGTERM"], [1, 1, "node1", -6, "SIGABRT"]]
    assert failed["root_cause"].tolist() == [False, True]
    assert list(s.steps["loss"]) == [2.3514, 2.1082] and "eval_loss" in set(s.evals["name"])
    assert s.events["time_s"].min() == 0.0  # seconds since the capture's first stamp


def test_mpirun_capture_oom_old_and_new_shapes_crlf_and_ansi():
    s = logkit.load_session(SAMPLES / "console" / "mpirun_oom_mismatch.log")
    oom = events(s, "cuda_oom").sort_values("rank")
    assert oom["rank"].tolist() == [0, 1]
    assert oom["requested_gib"].tolist() == pytest.approx([2.0, 20 / 1024])
    assert oom["capacity_gib"].tolist() == pytest.approx([79.15, 15.78])
    assert oom["free_gib"].tolist() == pytest.approx([1.02, 5.12 / 1024])
    old = events(s, "nccl_timeout")
    assert old["rank"].tolist() == [2, 3] and old["numel"].isna().all() and set(old["op"]) == {"ALLGATHER"}
    (mm,) = events(s, "collective_mismatch").to_dict("records")
    assert (mm["seq"], mm["ranks"], mm["ops"]) == (78, "2,0", "ALLREDUCE,BROADCAST")
    # mpirun's own closing banner is no grammar we know: its two lines of text are diagnostics, with their lines
    # (the rules around them, lines 11 and 14, are read: a rule says nothing)
    assert s.diagnostics["line"].tolist() == [12, 13]
    assert not s.diagnostics["text"].str.contains("\r|\x1b").any()


def test_gpu_prefixed_lines_and_nan_report():
    s = logkit.load_session(SAMPLES / "console" / "stdout_gpu_prefixed.log")
    assert s.steps[["rank", "step", "loss", "learning_rate", "grad_norm"]].values.tolist()[:2] == [
        [0, 0, 12.234, 1e-05, 2.7565], [1, 0, 12.234, 1e-05, 2.7565]]
    (nan,) = events(s, "nan_detected").to_dict("records")
    assert (nan["rank"], nan["step"]) == (1, 21)
    assert s.diagnostics["text"].tolist() == ["this line is a stray print nothing reads"]


def test_nccl_tests_tables():
    s = logkit.load_session(SAMPLES / "nccl_tests" / "all_reduce_all_gather_8xA100.log")
    assert s.diagnostics.empty
    assert s.comm.groupby("op").size().to_dict() == {"allgather": 12, "allreduce": 26}
    big = s.comm[(s.comm["op"] == "allreduce") & (s.comm["size_bytes"] == 134217728)]
    lines = (SAMPLES / "nccl_tests" / "all_reduce_all_gather_8xA100.log").read_text().splitlines()
    number = next(i for i, line in enumerate(lines, 1) if line.split()[:1] == ["134217728"])
    assert big[["placement", "source", "duration_ms", "algbw_mb_s", "busbw_mb_s", "group_size"]].values.tolist() == [
        ["out-of-place", f"all_reduce_all_gather_8xA100.log:{number}", pytest.approx(1.4702), pytest.approx(91290.0),
         pytest.approx(159760.0), 8],
        ["in-place", f"all_reduce_all_gather_8xA100.log:{number}", pytest.approx(1.4689), pytest.approx(91370.0),
         pytest.approx(159900.0), 8]]
    assert [t["avg_busbw_gb_s"] for t in s.meta["nccl_tests"]] == [30.1052, 19.4761]
    assert (s.meta["gpu_count"], s.meta["world_size"], s.meta["backend"]) == (8, 8, "nccl")
    assert s.meta["gpus"][7] == {"index": 7, "host": "dgx-a100-07", "device": 7, "name": "NVIDIA A100-SXM4-80GB"}


@pytest.mark.parametrize("name, fmt", [("nvidia_smi_query.csv", "nvidia_smi_csv"),
                                       ("nvidia_smi_dmon.log", "nvidia_smi_dmon"), ("gpustat_i.log", "gpustat")])
def test_gpu_captures(name, fmt):
    path = SAMPLES / "gpu_captures" / name
    assert sniff(path) == fmt
    s = logkit.load_session(path)
    assert s.diagnostics.empty and len(s.gpu) == 6 and set(s.gpu["gpu"]) == {0, 1}
    last = s.gpu[s.gpu["gpu"] == 1].iloc[-1]
    assert last["utilization_pct"] in (11.0, 12.0)  # the straggler of the last sample
    assert list(s.gpu["time_s"].round().drop_duplicates()) == ([0.0, 5.0, 10.0] if fmt != "nvidia_smi_dmon" else [0.0, 1.0, 2.0])
    if fmt != "nvidia_smi_dmon":
        assert last["memory_total_mb"] == pytest.approx(81920 * 2**20 / 1e6)  # MiB -> MB
    else:
        assert s.gpu["memory_temperature_c"].isna().all()  # "-": unsupported


def test_pipeline_sessions_compare_single_vs_multi():
    found = logkit.load_sessions(SAMPLES / "pipeline_sessions" / "sessions")
    assert [s.session_id for s in found] == ["v1/single_gpu", "v1/multi_gpu"] or \
        sorted(s.session_id for s in found) == ["v1/multi_gpu", "v1/single_gpu"]
    by_id = {s.session_id: s for s in found}
    multi = by_id["v1/multi_gpu"]
    assert (multi.meta["mode"], multi.meta["world_size"], multi.meta["gpu_count"]) == ("MULTI-GPU", 2, 2)
    assert multi.meta["duration_s"] == 58.9 and multi.meta["total_steps"] == 20 and len(multi.steps) == 20
    assert set(multi.evals["name"]) >= {"eval_loss"} and multi.meta["train_batch_size"] == 4
    assert by_id["v1/single_gpu"].meta.get("train_batch_size") is None  # an older trainer_state.json
    proc = analyze_logs("--compare", str(SAMPLES / "pipeline_sessions" / "sessions"))
    assert proc.returncode == 0, proc.stderr
    assert "Multi-GPU Speedup: 1.80x" in proc.stdout


def test_real_trainer_state_matches_our_jsonl():
    run = logkit.load_session(SAMPLES / "qlora_tiny_cpu" / "outputs" / "ranks2")
    ours = logkit.load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs")[1]
    rank0 = ours.steps[ours.steps["rank"] == 0]
    assert list(run.steps["loss"]) == list(rank0["loss"]) and list(run.steps["step"]) == list(rank0["step"])
    results = orjson.loads((SAMPLES / "qlora_tiny_cpu" / "outputs" / "ranks2" / "results.json").read_bytes())
    assert run.meta["samples_per_second"] == results["samples_per_second"] and run.meta["world_size"] == 2


def test_text_logs_only_session():
    s = logkit.load_session(SAMPLES / "text_logs" / "logs" / "training_20241206_143022")
    assert s.diagnostics.empty and s.meta["mode"] == "MULTI-GPU" and s.meta["status"] == "completed"
    assert s.steps[["step", "loss", "step_time_s"]].values.tolist() == [[50, 2.1234, 0.4], [100, 1.9876, 0.385]]
    assert s.comm["size_bytes"].tolist() == [45_670_000, 45_670_000]
    assert s.evals[["step", "name", "value"]].values.tolist() == [[100, "eval_loss", 1.8765],
                                                                  [100, "eval_perplexity", 6.5432]]
    assert s.perf["throughput_samples_s"].tolist() == [10.5]
    assert set(s.events["kind"]) == {"warning", "resource_warning", "anomaly"}
    times = s.events["time_s"].tolist()
    assert times == sorted(times)  # the warning written out of time order is sorted in


def test_rank_dirs_legacy_summary_and_verbose_jsonl():
    (ranked,) = logkit.load_sessions(SAMPLES / "rank_dirs")
    assert ranked.session_id == "rank_dirs/logs" and sorted(ranked.steps["rank"].unique()) == [0, 1]
    assert ranked.meta["world_size"] == 2 and set(events(ranked, "warning")["rank"]) == {0, 1}
    legacy = logkit.load_session(SAMPLES / "legacy_summary" / "logs" / "training_20241120_090000")
    assert len(legacy.steps) == 20 and len(legacy.gpu) == 6 and legacy.meta["mode"] == "MULTI-GPU"
    assert legacy.comm["size_bytes"].iloc[0] == 67_230_000 and legacy.meta["total_steps"] == 1000
    verbose = logkit.load_session(SAMPLES / "verbose_jsonl" / "verbose_training_logs.jsonl")
    assert verbose.steps["step"].tolist() == [40, 41, 42, 43, 44] and verbose.meta["naive_timestamps"]
    assert verbose.steps["grad_norm"].isna().tolist() == [False, False, False, True, False]  # a NaN literal
    assert verbose.steps["time_s"].tolist() == pytest.approx([2.0, 4.0, 6.0, 8.0, 10.0], abs=1e-3) or \
        verbose.steps["time_s"].iloc[0] > 0
    assert len(verbose.gpu) == 5 and "torn" in verbose.diagnostics["reason"].iloc[0]


def test_discovery_of_the_whole_sample_tree_and_gz(tmp_path):
    kinds = {s.session_id: s.kind for s in discover(SAMPLES)}
    assert kinds["v1/multi_gpu"] == "run_folder" and kinds["rank_dirs/logs"] == "rank_dirs"
    assert kinds["torchrun_nccl_timeout"] == "file" and kinds["training_20241206_143022"] == "logkit"
    nested = tmp_path / "a" / "b"
    nested.mkdir(parents=True)
    src = SAMPLES / "console" / "torchrun_nccl_timeout.log"
    (nested / "capture.log.gz").write_bytes(gzip.compress(src.read_bytes()))
    (tmp_path / "README.txt").write_text("notes, not a log\n")
    (s,) = logkit.load_sessions(tmp_path)
    assert s.session_id == "capture" and len(events(s, "nccl_timeout")) == 2


def test_sessions_of_one_name_in_two_folders_stay_apart(tmp_path):
    csv = (SAMPLES / "gpu_captures" / "nvidia_smi_query.csv").read_bytes()
    for folder in ("node_a", "node_b"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / "nvidia_smi_query.csv").write_bytes(csv)
    (tmp_path / "node_a" / "nvidia_smi_query.log").write_bytes(
        (SAMPLES / "gpu_captures" / "nvidia_smi_dmon.log").read_bytes())
    found = {s.session_id: s for s in logkit.load_sessions(tmp_path)}
    assert sorted(found) == ["node_a/nvidia_smi_query.csv", "node_a/nvidia_smi_query.log",
                             "node_b/nvidia_smi_query"]
    assert found["node_a/nvidia_smi_query.log"].meta["formats"] == ["nvidia_smi_dmon"]
    assert len(found["node_b/nvidia_smi_query"].gpu) == len(found["node_a/nvidia_smi_query.csv"].gpu) > 0
    # ids that were unique stay as they were
    assert {s.session_id for s in discover(SAMPLES)} >= {"torchrun_nccl_timeout", "v1/multi_gpu"}


def unreadable_log(folder: Path) -> Path:
    """A log file that exists and that this process cannot read, root included: a link to
    /proc/self/mem, a regular file whose first byte (address 0, never mapped) fails to read
    with an I/O error, as a failing disk or a dead network mount does. Without /proc, a file
    made mode 000 (which stops everyone but root)."""
    path = folder / "x.log"
    mem = Path("/proc/self/mem")
    if mem.is_file():
        path.symlink_to(mem)
    else:
        path.write_text("GPU0:INFO | hello\n")
        path.chmod(0)
    try:
        with open(path, "rb") as fh:
            fh.read(1)
    except OSError:
        return path
    pytest.skip("no file here that this process cannot read (root without /proc)")


def test_unreadable_path_gets_a_clear_error(tmp_path):
    path = unreadable_log(tmp_path)
    with pytest.raises(PermissionError, match=f"^cannot read {re.escape(str(path))}: "):
        logkit.load_session(path)
    proc = analyze_logs(str(path))
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith(f"analyze_logs: cannot read {path}: ") and proc.stderr.count("\n") == 1


DOC_FORMATS = ["trainer_state", "results_json", "legacy_summary", "verbose_jsonl", "flight_recorder"]
TEXT_FORMATS = [f for f in READERS if f not in DOC_FORMATS]
_LINES = [
    "GPU0:INFO | [GPU 0] Step [3/10] | Loss: 1.5 | LR: 1e-4", "[rank1]:[E1122 10:00:00.1 x.cpp:1] [Rank 1] Watchdog",
    "node:1:2 [0] NCCL INFO comm 0x1 rank 0 nranks 2 cudaDev 0 busId 1 commId 0x2 - Init COMPLETE",
    "node:1:2 [0] NCCL INFO a.cc:1 -> 3", "# nThread 1", "#  size count type redop root time algbw busbw #wrong",
    "   8 2 float sum -1 1.0 0.0 0.0 0", "[0] GPU | 40°C,  5 % | 1 / 2 MB |", "# gpu pwr sm", "0 1 2",
    "index, utilization.gpu [%]", "0, 45 %", "14:30:22 | INFO  | Mode: CPU", "NaN GRADIENT DETECTED [GPU 1]",
    "Step: x", "Traceback (most recent call last):", "  File \"x\", line 1", "ValueError: boom", "[1]:",
    "  exitcode  : -9 (pid: 1)", "{'loss': 1.0}", "{'loss': }", "\x1b[31mred\x1b[0m", "50%|█| 5/10 [00:01<00:01]",
]


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(TEXT_FORMATS),
       lines=st.lists(st.sampled_from(_LINES) | st.text(max_size=60), max_size=25),
       junk=st.binary(max_size=40), crlf=st.booleans())
def test_no_input_crashes_a_text_reader_and_unused_lines_are_counted(fmt, lines, junk, crlf):
    data = ("\r\n" if crlf else "\n").join(lines).encode("utf-8", "surrogatepass") + junk
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "capture.log"
        path.write_bytes(data)
        read = READERS[fmt](path)
        unmatched = sum(d["reason"] == UNMATCHED for d in read.diagnostics)
        assert read.used + unmatched == read.lines  # every non-blank line: used, or a diagnostic
        assert all(d["file"] == str(path) for d in read.diagnostics)
        logkit.load_session(path)  # and a session builds from it


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(fmt=st.sampled_from(DOC_FORMATS),
       data=st.binary(max_size=200) | st.sampled_from([b'{"log_history": [1, {"loss": "x"}]}', b"[]",
                                                       b'{"session": 3, "training_metrics": {}}', b"{}",
                                                       b'{"log_history": [{"eval_loss": NaN, "step": 1.5}]}',
                                                       b'{"entries": [{"collective_seq_id": 1e400}], "pg_config": 1}',
                                                       b"\x80\x02}q\x00X\x07\x00\x00\x00entriesq\x01]q\x02s."]))
def test_no_input_crashes_a_json_reader(fmt, data):
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "doc.json"
        path.write_bytes(data)
        read_file(path, fmt)


def test_a_pipeline_run_folder_and_the_session_inside_it_are_one_session(tmp_path):
    """seed 002's pipeline writes sessions/v1/{single_gpu,multi_gpu}/ with results.json and
    trainer_state.json beside logs/<id>/: two runs, not four sessions."""
    real = SAMPLES / "qlora_tiny_cpu"
    ids = sorted(p.name for p in (real / "logs").iterdir())
    for run, ranks, sid in (("single_gpu", "ranks1", ids[0]), ("multi_gpu", "ranks2", ids[1])):
        folder = tmp_path / "sessions" / "v1" / run
        shutil.copytree(real / "outputs" / ranks, folder)
        shutil.copytree(real / "logs" / sid, folder / "logs" / sid)
    sessions = logkit.load_sessions(tmp_path / "sessions")
    assert [s.session_id for s in sessions] == ids
    assert [s.meta["run"] for s in sessions] == ["v1/single_gpu", "v1/multi_gpu"]
    assert [s.meta["world_size"] for s in sessions] == [1, 2]
    results = json.loads((real / "outputs" / "ranks2" / "results.json").read_text())
    assert sessions[1].meta["config_name"] == results["config"] and sessions[1].meta["session"] == results["session"]
    # the streams' rows only: trainer_state.json's log history is not read a second time
    alone = logkit.load_session(real / "logs" / ids[1])
    assert len(sessions[1].steps) == len(alone.steps)
    # two folders of runs under one run folder: nothing says which is which, so nothing is joined
    shutil.copytree(real / "logs" / ids[0], tmp_path / "sessions" / "v1" / "multi_gpu" / "logs" / ids[0])
    assert len(logkit.load_sessions(tmp_path / "sessions" / "v1" / "multi_gpu")) == 3


def test_a_loss_or_grad_norm_logged_as_nan_is_an_event_with_its_line(tmp_path):
    verbose = logkit.load_session(SAMPLES / "verbose_jsonl" / "verbose_training_logs.jsonl")
    (row,) = events(verbose, "nan_detected").to_dict("records")
    assert (row["step"], row["subkind"], row["source"]) == (43, "nan_grad_norm", "verbose_training_logs.jsonl:5")
    capture = tmp_path / "train.log"
    capture.write_text("[rank1]: {'loss': 2.5, 'grad_norm': 1.0, 'learning_rate': 0.0001, 'epoch': 0.1}\n"
                       "[rank1]: {'loss': nan, 'grad_norm': inf, 'learning_rate': 0.0001, 'epoch': 0.2}\n")
    s = logkit.load_session(capture)
    assert s.steps["grad_norm"].tolist()[1] == float("inf") and s.diagnostics.empty
    (row,) = events(s, "nan_detected").to_dict("records")
    assert (row["rank"], row["subkind"], row["source"]) == (1, "nan_loss", "train.log:2")
    assert row["message"] == "loss logged as nan, grad_norm logged as inf"
    main = tmp_path / "text" / "training_20250101_000000_main.log"
    main.parent.mkdir()
    main.write_text("10:00:00 | INFO  | Session ID: training_20250101_000000\n"
                    "Step    3/10 ( 30.0%) | Loss: nan | LR: 1.00e-04 | Speed: 2.5 steps/s | ETA: 6.3min\n")
    (row,) = events(logkit.load_session(main), "nan_detected").to_dict("records")
    assert (row["step"], row["source"]) == (3, "training_20250101_000000_main.log:2")


def test_model_dataset_and_system_facts_reach_meta():
    path = sorted((SAMPLES / "qlora_tiny_cpu" / "logs").iterdir())[1]
    first = {}
    for line in next(path.glob("*_rank0.jsonl")).read_text().splitlines():
        rec = json.loads(line)
        first.setdefault(rec["type"], rec)
    s = logkit.load_session(path)
    assert s.meta["model_info"]["parameters_total"] == first["model_info"]["parameters_total"] > 0
    assert s.meta["model_info"]["parameters_trainable"] == first["model_info"]["parameters_trainable"] > 0
    assert "timestamp" not in s.meta["model_info"] and "rank" not in s.meta["model_info"]


def test_the_nan_report_and_block_titles_of_main_log_read_without_diagnostics(tmp_path):
    from logkit.schema import (
        BULLET_LINE,
        MAIN_LINE,
        NAN_DUMP,
        NAN_MORE,
        NAN_RULE,
        NAN_TITLE,
        SECTION_LINE,
        STEP_LINE,
    )

    step = STEP_LINE.format(step=21, max_steps=30, percent=70.0, loss=float("nan"), learning_rate=1e-4,
                            steps_per_second=2.5, eta_minutes=0.1)
    lines = [MAIN_LINE.format(time="10:00:00", level="INFO", message="Session ID: training_20250101_000000"),
             SECTION_LINE.format(title="📡 MULTI-GPU CONFIGURATION"), BULLET_LINE.format(key="Accelerator processes",
                                                                                        value="2"),
             step, NAN_RULE.format(rule="=" * 80),
             MAIN_LINE.format(time="10:00:01", level="ERROR", message=NAN_TITLE.format(rank=1, step=21, kind="nan_grad")),
             BULLET_LINE.format(key="model.layers.0.q_proj.lora_A.weight (gradient, shape [8, 64])",
                                value="NaN 512/512, Inf 0/512"),
             NAN_MORE.format(count=4), NAN_DUMP.format(path="nan_dumps/step_21_rank1.safetensors"),
             NAN_RULE.format(rule="=" * 80), "",
             SECTION_LINE.format(title="📊 EVALUATION RESULTS (step 21)"), BULLET_LINE.format(key="eval_loss",
                                                                                             value="1.8765")]
    path = tmp_path / "training_20250101_000000_main.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    s = logkit.load_session(path)
    assert s.diagnostics.empty and s.meta["world_size"] == 2
    report = events(s, "nan_detected")
    report = report[report["subkind"] == "nan_grad"].to_dict("records")
    assert [(r["rank"], r["step"], r["dump_path"], r["source"]) for r in report] == [
        (1, 21, "nan_dumps/step_21_rank1.safetensors", f"{path.name}:6")]
    assert s.evals[["step", "name", "value"]].values.tolist() == [[21, "eval_loss", 1.8765]]


def test_a_run_folder_joins_the_session_its_results_json_names():
    """The fixtures keep outputs/ranksN/ (results.json, trainer_state.json) beside logs/<id>/:
    results.json's "logkit_session" names the session, so each run is read once."""
    root = SAMPLES / "qlora_tiny_cpu"
    sessions = logkit.load_sessions(root)
    named = {json.loads((root / "outputs" / r / "results.json").read_text())["logkit_session"].rsplit("/", 1)[-1]: r
             for r in ("ranks1", "ranks2")}
    assert {s.session_id: s.meta["run"] for s in sessions} == {sid: f"outputs/{r}" for sid, r in named.items()}


def test_files_in_rank_folders_are_cited_with_their_folder():
    (s,) = logkit.load_sessions(SAMPLES / "rank_dirs")
    sources = set(s.events["source"])
    assert any(x.startswith("rank_0/train.log:") for x in sources)
    assert any(x.startswith("rank_1/train.log:") for x in sources)
