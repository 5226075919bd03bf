"""World size, hosts and failure blocks stated in ways the readers missed at first sight: a ChildFailedError
block pasted without its exception line, a worker's traceback under its failure entry, DeepSpeed's flops
profiler summary and multi-node runner, GPT-NeoX's world size line, NCCL 2.4's ``Init COMPLETE`` lines.
Excerpts of real logs (``tests/data/world_and_hosts/``, each cited in its README) and variations said to
be made here. Expected values are read off the excerpts by eye; each says where."""

from __future__ import annotations

import logkit
from tests.support.excerpts import events_of, load, reader

text = reader("world_and_hosts")


# --- torchrun's ChildFailedError block, pasted from its "FAILED" line on -------------------------------------
def test_a_block_pasted_without_its_exception_line_is_read(tmp_path):
    # llamafactory_7032: line 1 "llama_fc/lib/python3.10/site-packages/llamafactory/launcher.py FAILED"; the root
    # cause entry [0] at line 7: rank 0 (local_rank: 0), exitcode 1 (pid: 14661), host iZl4v544jr5cejwaqci3xvZ
    s = load(tmp_path, text("llamafactory_7032_childfailed_from_failed_line.log"))
    (ev,) = events_of(s, "child_failed")
    assert (ev["rank"], ev["local_rank"], ev["exitcode"], ev["pid"], ev["host"]) == (0, 0, 1, 14661,
                                                                                    "iZl4v544jr5cejwaqci3xvZ")
    assert ev["root_cause"] and ev["source"] == "capture.log:7"
    assert ev["script"] == "llama_fc/lib/python3.10/site-packages/llamafactory/launcher.py"
    # the FAILED script is llamafactory/launcher.py (line 1 of the excerpt): the framework that ran
    assert s.meta["framework"] == "llamafactory" and s.diagnostics.empty


def test_a_folder_holding_only_such_a_block_is_a_session(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "err.log").write_text(text("llamafactory_7032_childfailed_from_failed_line.log"))
    (s,) = logkit.load_sessions(tmp_path / "run")
    assert len(events_of(s, "child_failed")) == 1


def test_a_word_before_failed_in_prose_opens_no_block(tmp_path):
    # made here: a sentence ending in FAILED, or a word that names no script, is no block's head
    s = load(tmp_path, "the nightly check FAILED\nBUILD FAILED\n")
    assert s.meta.get("framework") is None
    assert events_of(s, "child_failed") == []


def test_a_worker_traceback_under_its_entry_is_that_ranks_cause(tmp_path):
    # made here: llamafactory_7032's entry with its error_file set, so torch prints the worker's traceback in
    # the traceback field, indented under the entry (the shape torch writes; frames 4 spaces in, the exception 2)
    lines = text("llamafactory_7032_childfailed_from_failed_line.log").splitlines()
    entry = lines[:11] + ["  error_file: /tmp/torchelastic_x/attempt_0/0/error.json",
                          "  traceback : Traceback (most recent call last):",
                          '    File "/srv/train.py", line 16, in main',
                          "      dist.barrier()",
                          "  RuntimeError: NCCL communicator was aborted on rank 0."]
    s = load(tmp_path, "\n".join(entry) + "\n")
    (ev,) = events_of(s, "child_failed")
    assert ev["rank"] == 0 and ev["error_file"] == "/tmp/torchelastic_x/attempt_0/0/error.json"
    causes = events_of(s, "failure_cause")
    assert [(c["rank"], c["source"]) for c in causes] == [(0, "capture.log:16")]


# --- DeepSpeed's flops profiler ------------------------------------------------------------------------------
def test_the_flops_profiler_states_world_and_data_parallel_size_behind_a_label(tmp_path):
    # megatron_deepspeed_98 lines 10-11: "0: world size: ... 128", "0: data parallel size: ... 16"
    s = load(tmp_path, text("megatron_deepspeed_98_flops_profiler_srun_label.log"))
    assert (s.meta["world_size"], s.meta["data_parallel_size"]) == (128, 16)
    assert s.meta["world_size_from"].startswith("stated") and s.meta["framework"] == "deepspeed"


def test_the_old_profiler_wording_and_padded_rows(tmp_path):
    # dalle_pytorch_302 lines 10-11: world size 1, data parallel size 1 ("model paralel size" on line 12); made
    # here: each row padded with spaces to the profiler's width ('{:<60}  {:<8}'), as DeepSpeed prints it
    rows = [ln.ljust(70) if ":  " in ln else ln for ln in text("dalle_pytorch_302_flops_profiler_paralel.log").splitlines()]
    s = load(tmp_path, "\n".join(rows) + "\n")
    assert (s.meta["world_size"], s.meta["data_parallel_size"]) == (1, 1)
    assert s.meta["facts_source"]["world_size"] == "capture.log:10"


# --- DeepSpeed's multi-node runner and GPT-NeoX -----------------------------------------------------------------
def test_the_multinode_runner_names_the_hosts(tmp_path):
    # ml_engineering line 2: "Running on the following workers: worker-0,worker-1"
    s = load(tmp_path, text("ml_engineering_emulate_multi_node_runner.log"))
    assert s.meta["hosts"] == ["worker-0", "worker-1"] and s.meta["nodes"] == 2
    assert s.meta["nodes_from"].startswith("stated")


def test_the_runner_line_behind_a_pdsh_prefix_names_ip_hosts(tmp_path):
    # made here: the runner line with IP workers (as in gpt-neox #88's, 4 workers), behind a pdsh host prefix
    line = ("10.0.0.1: [2022-08-03 06:37:21,466] [INFO] [multinode_runner.py:65:get_cmd] Running on the following "
            "workers: 10.0.0.1,10.0.0.2,10.0.0.3\n")
    s = load(tmp_path, line)
    assert s.meta["hosts"] == ["10.0.0.1", "10.0.0.2", "10.0.0.3"] and s.meta["nodes"] == 3


def test_gpt_neox_states_its_world_size_in_both_wordings(tmp_path):
    # made here from gpt-neox's two format strings (README): world size 16, then 8
    old = "NeoXArgs.configure_distributed_args() using world size: 16 and model-parallel size: 2 \n"
    new = ("NeoXArgs.configure_distributed_args() using world size: 8, pipe-parallel size: 2, context-parallel "
           "size: 1, and model-parallel size: 2 \n")
    assert load(tmp_path, old, "a.log").meta["world_size"] == 16
    s = load(tmp_path, new, "b.log")
    assert s.meta["world_size"] == 8 and s.meta["world_size_from"].startswith("stated")


# --- NCCL 2.4's Init COMPLETE -----------------------------------------------------------------------------------
def test_nccl_2_4_init_complete_lines_without_bus_id(tmp_path):
    # dlami_efa lines 1, 3, 4, 5: ranks 3, 8, 10, 1 of nranks 16 on ip-172-31-41-105 (3, 1) and ip-172-31-41-36 (8, 10)
    s = load(tmp_path, text("dlami_efa_nccl_2_4_init_complete.log"))
    inits = [e for e in events_of(s, "nccl_init") if e["init"] == "complete"]
    assert sorted(e["rank"] for e in inits) == [1, 3, 8, 10]
    assert s.meta["world_size"] == 16 and s.meta["world_size_from"].startswith("stated")
    assert s.meta["ranks_by_host"] == {"ip-172-31-41-105": [1, 3], "ip-172-31-41-36": [8, 10]}


# --- hosts a line's prefix names ------------------------------------------------------------------------------
def test_rays_actor_prefix_names_the_host(tmp_path):
    # lws_vllm line 2: "(RayWorkerWrapper pid=169, ip=10.20.0.197) INFO 05-08 ..."; line 1 (the head) names none
    s = load(tmp_path, text("lws_vllm_ray_worker_ip_prefix.log"))
    assert s.meta["hosts"] == ["10.20.0.197"] and s.meta["facts_source"]["hosts"] == "capture.log:2"
    assert s.meta["nodes"] == 1 and "lower bound" in s.meta["nodes_from"]


def test_rays_prefix_without_ip_names_no_host(tmp_path):
    # made here: the same line with Ray's prefix as a single-node run prints it, "(RayWorkerWrapper pid=169) "
    line = text("lws_vllm_ray_worker_ip_prefix.log").splitlines()[1].replace(", ip=10.20.0.197", "")
    assert load(tmp_path, line + "\n").meta.get("hosts") is None


# --- Slurm's srun -l task label before Lightning's start-up lines -------------------------------------------------
def test_lightning_lines_behind_srun_task_labels(tmp_path):
    # made here: lightning_nnue_352's (tests/data/frameworks) "Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/4"
    # with ranks 0-3, each behind `srun -l`'s task label ("0: ", "1: "): the label is no rank, MEMBER's /4 the world
    lines = [f"{r // 2}: Initializing distributed: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4" for r in range(4)]
    s = load(tmp_path, "\n".join(lines) + "\n")
    assert s.meta["world_size"] == 4 and s.meta["framework"] == "lightning"
    assert sorted(e["rank"] for e in events_of(s, "dist_init")) == [0, 1, 2, 3] and s.diagnostics.empty


# --- a traceback pasted from its frames on ----------------------------------------------------------------------
def test_a_traceback_cut_before_its_header_still_names_the_cause(tmp_path):
    # made here, in the shape of a paste that starts inside a rank's traceback (its "Traceback (most recent call
    # last):" line left above the paste): the exception line ends it, and is rank 1's cause
    lines = ['[rank1]:   File "/opt/train.py", line 88, in rollout',
             "[rank1]:     raise ValueError(f'bad reward: {r}')",
             "[rank1]: ValueError: bad reward: nan"]
    s = load(tmp_path, "\n".join(lines) + "\n")
    (c,) = events_of(s, "failure_cause")
    assert (c["rank"], c["cause"], c["source"]) == (1, "exception", "capture.log:3")


def test_a_frame_alone_at_the_end_is_a_cut_traceback(tmp_path):
    # made here: the paste ends in a frame, before any exception line: a traceback the log ends in, cut
    s = load(tmp_path, '[rank0]:   File "/opt/train.py", line 88, in rollout\n')
    assert events_of(s, "failure_cause") == []
    assert [e["subkind"] for e in events_of(s, "error")] == ["traceback_cut"]


# --- a rank's own summary lines behind mpirun's prefix --------------------------------------------------------
def test_a_ranks_training_time_and_throughput_are_one_row_of_that_rank(tmp_path):
    # made here: two ranks' summaries behind mpirun's "[1,N]<stdout>:" prefix, the second cut after its training
    # time; each rank is a row, so the world is at least the highest rank + 1 (a lower bound: nothing states it)
    lines = ["[1,7]<stdout>:Process 7 - Training time: 10.09 seconds",
             "[1,7]<stdout>:Process 7 - Throughput: 9.91 samples/second",
             "[1,12]<stdout>:Process 12 - Training time: 10.04 seconds"]
    s = load(tmp_path, "\n".join(lines) + "\n")
    rows = s.perf.sort_values("rank").to_dict("records")
    assert [(r["rank"], r["duration_s"]) for r in rows] == [(7, 10.09), (12, 10.04)]
    assert rows[0]["throughput_samples_s"] == 9.91
    assert s.meta["world_size"] == 13 and "lower bound" in s.meta["world_size_from"]
