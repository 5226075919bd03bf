"""A Slurm job's output: the node list a batch script prints under a header of its own, Slurm's node list in
the environment (its compressed form expanded), Open MPI's and PMIx's ``[host:pid]`` prefix, a program's own
``NumProcess::N``. A real excerpt (tests/data/launchers/README.md) and variations said to be made here;
expected values read off the lines by eye."""

from __future__ import annotations

import pytest

from logkit.ingest.readers.slurm_lines import expand_hostlist
from tests.support.excerpts import load, reader

text = reader("launchers")
# the header a batch script echoes before "srun hostname" ('echo "Allocated nodes: "'; the space is its own)
_HEADER = "Allocated nodes: \n"


def test_the_hosts_srun_hostname_prints_under_a_header_are_the_jobs_nodes(tmp_path):
    s = load(tmp_path, _HEADER + text("nrel_hpc_srun_hostname_two_nodes.out"), "job.out")
    # lines 2-9: r105u33 and r105u37, four times each (one line per task); line 10 is `date`'s
    assert s.meta.hosts == ["r105u33", "r105u37"]
    assert s.meta.nodes == 2 and s.meta.nodes_from.startswith("stated: 2 host(s) in the node list")
    assert s.meta.facts_source["nodes"].endswith(":1")


def test_host_names_without_a_header_are_no_node_list(tmp_path):
    s = load(tmp_path, text("nrel_hpc_srun_hostname_two_nodes.out"), "job.out")
    assert s.meta.hosts is None and s.meta.nodes is None


def test_a_list_ends_at_the_first_line_that_is_no_host_name(tmp_path):
    body = _HEADER + "gpu-a01\ngpu-a02\nsrun: lua: Submitted job 12168\nfinished\n"
    s = load(tmp_path, body, "job.out")
    assert s.meta.hosts == ["gpu-a01", "gpu-a02"]  # lines 2-3; "finished" (line 5) is no host of the list


def test_open_mpi_host_pid_prefixes_name_hosts_and_a_program_its_process_count(tmp_path):
    # variations on the shape of llm.c's Slurm output: PMIx's "[host:pid] PMIX ERROR" lines of the same length
    # (no terminal's wrap), then llm.c's set-up line (llmc/zero.cuh: "ProcessID:%d, NumProcess::%d, DeviceId:%d")
    pmix = "PMIX ERROR: ERROR in file ../src/mca/gds/ds12/gds_ds12_lock_pthread.c at line 169 in the job step"
    body = (f"[node11:4001] {pmix}\n[node12:5077] {pmix}\n[node12:5078] {pmix}\n[node11:4002] {pmix}\n"
            "Started Multi Node training managed by Slurm: ProcessID:0, NumProcess::4, DeviceId:0\n")
    s = load(tmp_path, body, "job.out")
    assert s.meta.world_size == 4 and s.meta.facts_source["world_size"].endswith(":5")
    assert s.meta.hosts == ["node11", "node12"]  # the prefixes' hosts: stated; their count a lower bound
    assert s.meta.nodes == 2 and "lower bound" in s.meta.nodes_from


def test_a_source_files_bracket_is_no_host_prefix(tmp_path):
    s = load(tmp_path, "[trainer.py:1234] >> loading the model\n", "job.out")
    assert s.meta.hosts is None


def test_slurms_environment_states_the_node_list_and_count(tmp_path):
    s = load(tmp_path, "SLURM_JOB_NODELIST=gpu[07-08,11]\nSLURM_NNODES=3\n", "job.out")
    assert s.meta.hosts == ["gpu07", "gpu08", "gpu11"] and s.meta.nodes == 3


@pytest.mark.parametrize(("compressed", "hosts"), [
    ("qbd[487-488]", ["qbd487", "qbd488"]),
    ("gpu[01-02,05],cpu7", ["gpu01", "gpu02", "gpu05", "cpu7"]),
    ("node9", ["node9"]),
    ("x[1-3]-ib", ["x1-ib", "x2-ib", "x3-ib"]),
])
def test_slurms_compressed_host_lists_expand(compressed, hosts):
    assert expand_hostlist(compressed) == hosts


def test_a_list_that_is_none_is_refused():
    assert expand_hostlist("gpu[a-b]") is None


@pytest.mark.parametrize("body", [
    "[train:45] step 0 loss 2.0\n[train:46] step 1 loss 1.5\n",  # a Python logger's "[name:lineno] "
    "[socket.cpp:436] [c10d] The server socket has failed to bind to [::]:29500\n",  # a C++ source file's
    "[PID:1] [RANK:0] step 0 loss 2.0\n",  # axolotl's process tag
])
def test_a_word_and_a_number_in_brackets_are_no_host_prefix(tmp_path, body):
    s = load(tmp_path, body, "job.out")
    assert s.meta.hosts is None and s.meta.nodes is None


def test_a_bracket_that_is_no_host_prefix_stays_on_its_line():
    from logkit.ingest.readers.prefixes import peel
    line = "[PID:1] [RANK:0] step 0 loss 2.0"
    assert peel(line).text == line and peel(line).host is None


def test_axolotls_rank_is_read_behind_its_logger_bracket(tmp_path):
    # axolotl's logger without Python logging's time in front: "[RANK:3]" names rank 3 of at least 4
    s = load(tmp_path, "[axolotl.train:45] [PID:343] [RANK:3] total_num_steps: 10116\n", "job.out")
    assert s.meta.hosts is None
    assert s.meta.world_size == 4 and s.meta.max_steps == 10116


@pytest.mark.parametrize("rest", [
    "*** Process received signal ***", "[[43105,1],0] ORTE_ERROR_LOG: Data unpack would read past end of buffer",
    "[ 0] /lib64/libpthread.so.0(+0xf5d0)[0x2b6bb8a545d0]", "Signal: Segmentation fault (11)",
    "mca_base_component_repository_open: unable to open mca_btl_openib: librdmacm.so.1",
    "3 more processes have sent help message help-mpi-btl-base.txt / btl:no-nics",
])
def test_open_mpis_own_messages_name_their_host(rest):
    from logkit.ingest.readers.prefixes import peel
    s = peel(f"[gpu-node07:28114] {rest}")
    assert s.host == "gpu-node07" and s.text == rest


@pytest.mark.parametrize("header", ["Nodelist: ", "Node list: ", "Allocated nodes: "])
def test_a_header_with_the_compressed_list_after_it_names_the_hosts(tmp_path, header):
    # made here: a batch script's 'echo "Nodelist: $SLURM_JOB_NODELIST"'
    s = load(tmp_path, f"{header}gpu[01-02,05]\nstarting training\n", "job.out")
    assert s.meta.hosts == ["gpu01", "gpu02", "gpu05"] and s.meta.nodes == 3
    assert s.meta.facts_source["hosts"].endswith(":1")


def test_a_header_with_a_count_after_it_names_no_host(tmp_path):
    s = load(tmp_path, "Nodes: 2\nstarting training\n", "job.out")
    assert s.meta.hosts is None
