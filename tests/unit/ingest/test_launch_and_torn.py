"""Shapes logkit missed at first sight, each a class: the world size a launcher's command line states where
nccl-tests' device table is cut; nccl-tests' closing ``# Out of bounds values`` line after NCCL's own lines;
an NCCL record glued onto another's line with that line's torn tail before its host; a GPU query capture a
script wrote with epoch-second times and no units. On excerpts of real logs (``tests/data/launch_and_torn/``,
each cited in its README) and variations said to be made here; expected values are read off them by eye."""

from __future__ import annotations

import re

import pytest

from logkit.ingest.readers.launch_command import launched, option
from logkit.ingest.readers.sniff import sniff
from tests.support.excerpts import events_of, load, reader

text = reader("launch_and_torn")
PERF = re.compile(r"_perf(?:_mpi)?\b")
MIB = 2**20 / 1e6


# --- a launcher's command line ------------------------------------------------------------------------------
def test_the_process_count_is_the_launchers_own_option():
    # nccl-tests_322 line 1: "... -c 0 -np 1024 ... all_reduce_perf -b 1g -e 32g -f 2 -g 1" (a quoted "-p 22" and
    # an mpirun "-c 0" before it: a count of 0 is none)
    launch = launched(text("nccl_tests_322_mpirun_np_1024_device_table_cut.log").splitlines()[0], PERF)
    assert (launch.name, launch.processes) == ("mpirun", 1024)
    assert option(launch.args, ("-g", "--ngpus")) == 1


def test_a_programs_option_may_have_its_value_attached():
    # made here: nccl-tests' "-g8" / "-t2" as getopt reads them; the last of an option repeated counts
    assert option(("-b", "8", "-g8", "-t2"), ("-g", "--ngpus")) == 8
    assert option(("-b", "8", "-g8", "-t2"), ("-t", "--nthreads")) == 2
    assert option(("-g", "2", "--ngpus=4"), ("-g", "--ngpus")) == 4
    assert option(("-b", "8"), ("-g", "--ngpus")) is None


@pytest.mark.parametrize(("line", "expected"), [
    # nccl-tests issue 254: "-n 50" after the program is its iterations, not a process count
    ("mpirun --allow-run-as-root -np 16  -N 8 --host dgx01:8,dgx02:8 ./build/all_reduce_perf -b 128 -e 16G -f 2 "
     "-g 1 -n 50 -w 100 -p 0 -z 0 -t 1 -c 1", 16),
    # nccl-tests issue 1: "-n 2 -npernode 2"
    ("mpirun -n 2 -npernode 2 -hostfile ./hosts -x LD_LIBRARY_PATH=/opt/nccl2/lib:$LD_LIBRARY_PATH "
     "./build/all_reduce_perf -g 2 -c 0", 2),
    # nccl-tests issue 190: srun's "-n 8", the program inside bash -c's quoted script
    ('$ srun -N 2 -n 8 --gpus-per-node 4 -p gpu bash -c "module load 2023; ./build/hypercube_perf --nthreads 1 '
     '--ngpus 1 --minbytes 8"', 8),
    # nebius/soperator PR 428: srun with tasks per node only: no total on the line
    ("srun --exclusive --mem=0 --nodes=2 --ntasks-per-node=8 --gpus-per-node=8 --mpi=pmix all_reduce_perf_mpi "
     "-b 512M -e 8G -f 2 -g 1", None),
    # made here: Open MPI's "--np=N" spelling
    ("mpirun --np=4 ./build/all_gather_perf -b 8 -e 128M", 4),
    # made here: a count only after the program (nccl-tests' own -n)
    ("mpirun -N 8 --host a:8 ./build/all_reduce_perf -n 50", None),
    # made here: a one-letter option's value attached ("-n8", "-N2 -n16"), and a count of 0 after a count
    ("srun -n8 ./build/all_reduce_perf -b 8 -e 128M -g 1", 8),
    ("srun -N2 -n16 --gpus-per-node=8 ./build/all_reduce_perf -b 8 -e 128M", 16),
    ("mpirun -n4 -c0 ./build/all_reduce_perf -b 8", 4),
])
def test_launch_lines(line, expected):
    launch = launched(line, PERF)
    assert (launch.processes if launch else None) == expected


def test_a_cut_device_table_takes_the_world_size_the_command_states(tmp_path):
    # nccl-tests_322: "-np 1024" (line 1) x "nThread 1 nGpus 1" (line 3); the table ends after rank 0 (line 6)
    s = load(tmp_path, text("nccl_tests_322_mpirun_np_1024_device_table_cut.log"))
    assert s.meta["world_size"] == 1024
    assert s.meta["world_size_from"].startswith("stated: 1024 rank(s): mpirun's 1024 process(es) (capture.log:1)")
    assert s.meta["facts_source"]["world_size"] == "capture.log:1"
    assert s.meta["hosts"] == ["HCA-32"] and "lower bound" in s.meta["nodes_from"]


def test_without_the_header_the_programs_gpus_per_process_count(tmp_path):
    # made here: the excerpt without its header line (3), and "-g 2" for "-g 1": 1024 processes x 2 GPUs each
    lines = text("nccl_tests_322_mpirun_np_1024_device_table_cut.log").splitlines(keepends=True)
    body = lines[0].replace("-g 1", "-g 2") + "".join(lines[3:])
    s = load(tmp_path, body)
    assert s.meta["world_size"] == 2048 and "-t x -g 2 on the command line" in s.meta["world_size_from"]


def test_a_command_without_a_count_leaves_a_lower_bound(tmp_path):
    # made here: the excerpt with "-np 1024" taken off its command line: nothing states the size
    body = text("nccl_tests_322_mpirun_np_1024_device_table_cut.log").replace(" -np 1024", "")
    s = load(tmp_path, body)
    assert s.meta["world_size"] == 1 and s.meta["world_size_from"].startswith("inferred (lower bound)")



def test_without_a_device_table_the_command_and_header_state_the_size(tmp_path):
    # nccl-tests_1: "mpirun -n 2 ... all_reduce_perf -g 2 -c 0" (line 1), "nThread 1 nGpus 2" (line 2), then a CUDA
    # failure before any device table: 2 processes x 2 GPUs each
    s = load(tmp_path, text("nccl_tests_1_mpirun_n_2_ngpus_2_no_device_table.log"))
    assert s.meta["world_size"] == 4
    assert s.meta["world_size_from"] == ("stated: 4 rank(s): mpirun's 2 process(es) (capture.log:1) x nThread x nGpus "
                                         "2 (capture.log:2)")

# --- nccl-tests' closing line after NCCL's own ---------------------------------------------------------------
def test_destroy_lines_then_out_of_bounds_are_nccl_tests_output(tmp_path):
    # nccl_1706: two Destroy COMPLETE lines of host deepseek (nranks 2), then "# Out of bounds values : 0 OK" (line 3)
    path = tmp_path / "run.log"
    path.write_text(text("nccl_1706_destroy_then_out_of_bounds.log"))
    assert sniff(path) == "nccl_tests"
    s = load(tmp_path, text("nccl_1706_destroy_then_out_of_bounds.log"))
    assert s.diagnostics.empty
    assert s.meta["world_size"] == 2 and s.meta["hosts"] == ["deepseek"]


def test_the_same_behind_an_indented_mpirun_prefix(tmp_path):
    # made here: each line indented and behind mpirun's "[1,R]<stdout>:" (the ranks of its own lines; rank 0 the last)
    lines = text("nccl_1706_destroy_then_out_of_bounds.log").splitlines()
    body = "".join(f"    [1,{r}]<stdout>:{line}\n" for r, line in zip((0, 1, 0), lines, strict=True))
    s = load(tmp_path, body)
    assert s.diagnostics.empty
    assert s.meta["world_size"] == 2 and s.meta["hosts"] == ["deepseek"]


# --- a torn NCCL line -----------------------------------------------------------------------------------------
def test_a_record_glued_into_a_torn_line_keeps_its_host(tmp_path):
    # made here: nccl_tests_252's line 3 cut after "rank 4 nr" and line 4 (kolyoz1, pid 27255, rank 0) glued on
    # after it, as two processes writing without line buffering leave it
    lines = text("nccl_tests_252_two_hosts_init_start.log").splitlines()
    torn = lines[2][: lines[2].index("nranks") + 2] + lines[3]
    s = load(tmp_path, "\n".join([lines[0], lines[1], torn]) + "\n")
    assert s.meta["hosts"] == ["kolyoz1", "kolyoz2"]
    inits = {(e["host"], e["pid"], e["rank"]) for e in events_of(s, "nccl_init")}
    assert ("kolyoz1", 27255, 0) in inits


def test_hosts_whose_names_end_alike_stay_apart(tmp_path):
    # made here: the excerpt with kolyoz2 renamed xkolyoz1: both hosts begin lines of their own, so neither is
    # the other behind a torn tail
    s = load(tmp_path, text("nccl_tests_252_two_hosts_init_start.log").replace("kolyoz2", "xkolyoz1"))
    assert s.meta["hosts"] == ["kolyoz1", "xkolyoz1"]


# --- a query-style capture with epoch seconds and no units ---------------------------------------------------
def test_epoch_seconds_and_bare_numbers(tmp_path):
    # made here, in the shape a script writes (its own header of query field names over "nounits" rows, the time
    # as int(time.time())): three samples of one GPU, 30 s apart
    body = ("timestamp,index,memory.used,memory.total,utilization.gpu\n"
            "1700000000,0, 512, 81920, 0\n1700000030,0, 40960, 81920, 97\n1700000060,0, 40962, 81920, 95\n")
    s = load(tmp_path, body, "gpu_usage.csv")
    assert list(s.gpu["time_s"].diff().dropna()) == [30.0, 30.0]
    assert s.gpu["memory_used_mb"].tolist() == pytest.approx([512 * MIB, 40960 * MIB, 40962 * MIB])
    assert s.gpu["memory_total_mb"].iloc[0] == pytest.approx(81920 * MIB)
    assert s.gpu["utilization_pct"].tolist() == [0, 97, 95]
    assert s.diagnostics.empty


def test_a_header_that_states_its_units_keeps_them(tmp_path):
    # made here: the same with nvidia-smi's own "nounits" header ("memory.used [MiB]") and its time stamps
    body = ("timestamp, memory.used [MiB], utilization.gpu [%]\n"
            "2023/11/14 22:13:20.000, 512, 0\n2023/11/14 22:13:50.000, 40960, 97\n")
    s = load(tmp_path, body, "gpu_usage.csv")
    assert s.gpu["memory_used_mb"].tolist() == pytest.approx([512 * MIB, 40960 * MIB])
    assert s.gpu["time_s"].diff().iloc[1] == pytest.approx(30.0)


def test_epoch_milliseconds(tmp_path):
    # made here: the script's header over rows timed in epoch milliseconds (13 digits), the samples 2 s apart
    body = ("timestamp,memory.used,utilization.gpu\n"
            "1700000000000, 1024, 35\n1700000002000, 2048, 40\n1700000004000, 2048, 42\n")
    s = load(tmp_path, body, "gpu_usage.csv")
    assert list(s.gpu["time_s"].diff().dropna()) == [2.0, 2.0]
    assert s.gpu["memory_used_mb"].iloc[1] == pytest.approx(2048 * MIB)
