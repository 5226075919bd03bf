"""The defects logs written by others showed, each with an excerpt of a real log (lines of a file
of ``sample_logs/real_world/``, cut by the test) or, for a shape the corpus lacks, a line made
here and said to be made. Expected values are read off the excerpt by the test."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest

import logkit
from logkit.analysis import analyze
from logkit.analysis.kernels.peaks import network_link
from logkit.ingest.readers.base import KEEP_NOTES, UNMATCHED
from logkit.ingest.readers.console_shapes import GRAMMAR
from logkit.ingest.readers.normalise import Layout
from tests.support.launch import REPO

CORPUS = REPO / "sample_logs" / "real_world"


def excerpt(path: str, first: int = 1, last: int | None = None) -> str:
    """Lines ``first``..``last`` (1-based, inclusive) of a corpus file, as they are (CRLF kept)."""
    raw = (CORPUS / path).read_bytes().decode("utf-8").splitlines(keepends=True)
    return "".join(raw[first - 1:last])


def load(tmp_path, text: str, name: str = "capture.log", binary: bool = False):
    path = tmp_path / name
    path.write_bytes(text if binary else text.encode("utf-8"))
    return logkit.load_session(path)


def events(s, kind: str):
    return s.events[s.events["kind"] == kind].reset_index(drop=True)


def findings(s) -> dict:
    return {f.kind: f for f in analyze([s]).findings}


# --- 1. prefixes before the grammars ----------------------------------------------------------------------
def test_a_timestamp_before_the_rank_prefix_keeps_the_rank(tmp_path):
    # ms_swift_8307 lines 2-14: "2026-09-17 13:40:02 [rank2]: Traceback ..." (the log ends inside it)
    s = load(tmp_path, excerpt("console/ms_swift_8307_timestamp_before_rank_prefix.log", 2, 14))
    (ev,) = events(s, "error").to_dict("records")
    assert (ev["rank"], ev["source"], ev["subkind"]) == (2, "capture.log:2", "traceback_cut")
    assert s.diagnostics.empty


@pytest.mark.parametrize("stamp", [
    "2024-05-01T10:00:00.123456Z ",  # ISO 8601, as a log shipper writes it (constructed: the corpus has none)
    "2024-05-01T10:00:00.123456789Z stderr F ",  # a Kubernetes container log line (constructed)
    "May  1 10:00:00 node7 train.sh[4242]: ",  # syslog (constructed)
])
def test_an_iso_k8s_or_syslog_stamp_before_rank_prefix_gives_the_oom_its_rank(tmp_path, stamp):
    # the OOM line of llamafactory_9510 (line 1, "[rank5]: torch.OutOfMemoryError ..."), with a stamp put before it
    line = excerpt("tracebacks/llamafactory_9510_rank_prefixed_oom_new_shape.log", 1, 1)
    s = load(tmp_path, stamp + line)
    (oom,) = events(s, "cuda_oom").to_dict("records")
    assert (oom["rank"], oom["gpu"]) == (5, 5)  # "[rank5]" and "GPU 5" of the line
    assert "rank 5" in findings(s)["cuda_oom"].detail


def test_pasted_line_numbers_keep_the_watchdog_work_lines_and_the_stuck_rank(tmp_path):
    # llamafactory_7396 lines 1-5: "[80746] [rank0]:..." (timeouts on ranks 0, 4, 2; a work line of rank 3)
    s = load(tmp_path, excerpt("console/llamafactory_7396_line_numbered_watchdog.log"))
    work = events(s, "watchdog_work")
    assert work[["rank", "seq", "last_enqueued", "last_completed"]].values.tolist() == [
        [0, 1580, 1582, 1579], [3, 1580, 1582, 1579]]
    timeouts = events(s, "nccl_timeout")
    assert timeouts["rank"].tolist() == [0, 4, 2] and timeouts["truncated"].tolist() == [False, False, True]
    finding = findings(s)["nccl_timeout"]
    assert 3 in finding.ranks and "rank 3 at work 1580" in finding.detail


def test_bare_pasted_line_numbers(tmp_path):
    # espnet_1940 lines 1-12: "451 tj1-asr-train-v100-11:41449:41449 [6] NCCL INFO ..."
    s = load(tmp_path, excerpt("nccl_debug/espnet_1940_pasted_line_numbers_nccl_2_4_8.log"))
    assert s.meta["nccl_version"] == "2.4.8+cuda10.0" and s.meta["hosts"] == ["tj1-asr-train-v100-11"]
    assert s.meta["devices"] == {"tj1-asr-train-v100-11": [6]} and s.meta["network"] == "Socket"
    assert s.diagnostics.empty


def test_pdsh_host_prefixes_are_read(tmp_path):
    # accelerate_1317: "104.171.201.172: lambda-scalar03:148966:148966 [0] NCCL INFO Using network Socket"
    s = load(tmp_path, excerpt("nccl_debug/accelerate_1317_pdsh_host_prefix_socket.log"))
    assert s.meta["hosts"] == ["lambda-scalar02", "lambda-scalar03"] and s.meta["network"] == "Socket"
    assert s.meta["nodes"] == 2 and "lower bound" in s.meta["nodes_from"]
    assert s.meta["devices"] == {"lambda-scalar02": [3, 6], "lambda-scalar03": [0]}
    assert s.diagnostics.empty


def test_launcher_prefixes_nest_and_stdout_is_taken_off(tmp_path):
    # flagscale line 14: "[default0]:[rank0]:[W530 17:28:20...] Warning: ..."; llamafactory_163: "stderr: ..."
    s = load(tmp_path, excerpt("console/flagscale_torchrun_default0_prefix_megatron_iteration.log", 14, 14)
             + excerpt("console/llamafactory_163_stderr_prefix_teardown.log", 1, 4))
    warn = events(s, "warning")
    assert warn["rank"].tolist()[0] == 0 and warn["message"].iloc[0].startswith("Warning: WARNING: destroy")
    assert events(s, "child_failed")[["local_rank", "pid", "exitcode"]].values.tolist() == [[7, 153932, 1]]


def test_mpirun_prefixes(tmp_path):
    # horovod_3751: "[1,0]<stdout>:j66d10267:290:422 [0] NCCL INFO NET/IB : Using [0]mlx5_bond_0:1/RoCE ..."
    s = load(tmp_path, excerpt("nccl_debug/horovod_3751_mpirun_prefix_two_hosts_roce.log"))
    assert s.meta["ranks_by_host"] == {"j66d10267": [0, 1], "j63g01247": [2, 3]}
    assert s.meta["nics"] == [{"name": "mlx5_bond_0", "port": 1, "link": "RoCE"}] and s.meta["network"] == "IB"


def test_colour_codes_without_their_esc_byte(tmp_path):
    # vllm_6042 line 1 starts "[36m(RayWorkerWrapper pid=4009) [rank1]:"; pytorch_68893 lines start "[0m "
    s = load(tmp_path, excerpt("console/vllm_6042_ray_prefix_gather_timeout.log", 1, 1))
    (t,) = events(s, "nccl_timeout").to_dict("records")
    assert (t["rank"], t["seq"], t["op"]) == (1, 158046, "GATHER") and "[36m" not in t["message"]
    s = load(tmp_path, excerpt("nccl_debug/pytorch_68893_ansi_reset_prefix_socket_init.log", 2, 15))
    assert s.meta["nccl_version"] == "2.7.8+cuda11.1" and s.diagnostics.empty


def test_real_esc_bytes_and_crlf(tmp_path):
    # constructed: the corpus lost its ESC bytes; a CRLF line with a real colour code around the rank prefix
    line = excerpt("console/basicsr_737_watchdog_pg_guid.log", 1, 1).rstrip("\n")
    s = load(tmp_path, f"\x1b[36m{line}\x1b[0m\r\n")
    (t,) = events(s, "nccl_timeout").to_dict("records")
    assert (t["rank"], t["seq"], t["elapsed_ms"]) == (1, 808, 600020) and s.diagnostics.empty


def test_crlf_capture(tmp_path):
    # checkpoint_of_cpt (a Windows capture, CRLF) lines 318-324: the training header and the first loss
    text = excerpt("console/checkpoint_of_cpt_windows_crlf_cmd.log", 318, 324)
    assert "\r\n" in text
    s = load(tmp_path, text)
    assert s.steps[["loss", "epoch"]].values.tolist() == [[1.1409, 0.91]]
    assert (s.meta["total_batch_size"], s.meta["max_steps"]) == (6, 5490)


def test_prefixes_are_not_taken_from_a_lines_own_text():
    lines = ["2024-11-22 11:00:00,101 - INFO - train - Starting", "RuntimeError: boom", "  File \"x\"",
             "    self.pid = os.fork()"]
    got = [r.text for r in Layout.learn(lines, GRAMMAR).records(enumerate(lines, start=1))]
    assert got == lines


def test_wrapped_watchdog_lines_are_joined(tmp_path):
    # milabench_269: the WorkNCCL(...) half of each message on the next line; ms_swift_5409: NumelIn cut as 3106|28352
    s = load(tmp_path, excerpt("console/milabench_269_host_stderr_prefix_wrapped_watchdog.log"))
    assert events(s, "nccl_timeout")[["rank", "seq", "op", "elapsed_ms"]].values.tolist() == [
        [14, 2070, "REDUCE", 600034], [12, 2070, "REDUCE", 600036], [11, 2070, "REDUCE", 600036],
        [15, 2070, "REDUCE", 600040]]
    assert s.diagnostics.empty
    s = load(tmp_path, excerpt("console/ms_swift_5409_terminal_wrapped_watchdog.log", 5, 8))
    (t,) = events(s, "nccl_timeout").to_dict("records")
    assert (t["numel"], t["numel_out"], t["source"]) == (310628352, 310628352, "capture.log:1")


# --- 2. a folder is read like a file ----------------------------------------------------------------------
def test_a_folder_holding_one_bare_mismatch_traceback(tmp_path):
    folder = tmp_path / "run"
    folder.mkdir()
    name = "spa_vl_rlhf_2_mismatch_broadcast_rank_prefix.log"
    (folder / name).write_bytes((CORPUS / "tracebacks" / name).read_bytes())
    proc = subprocess.run([sys.executable, "-m", "logkit.cli", str(folder), "--json", "--diagnose", "--no-cache"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(proc.stdout)
    (mm,) = [f for f in doc["findings"] if f["kind"] == "collective_mismatch"]
    assert mm["seq"] == 14370 and mm["ranks"] == [0, 2]  # "SequenceNumber=14370", "Rank 0 ... Rank 2"


# --- 3. signals are not set-up failures ---------------------------------------------------------------------
def test_sigkill_of_a_worker_is_no_initialisation_failure(tmp_path):
    # firefly_171: the whole teardown on one line: five SIGTERMs, then "failed (exitcode: -9) local_rank: 4 (pid: 899509)"
    s = load(tmp_path, excerpt("console/firefly_171_records_glued_on_one_line.log"))
    (child,) = events(s, "child_failed").to_dict("records")
    assert (child["local_rank"], child["pid"], child["exitcode"], child["signal"], child["root_cause"]) == (
        4, 899509, -9, "SIGKILL", True)
    found = findings(s)
    assert "distributed_init_failed" not in found
    assert "dmesg" in found["killed_by_signal"].detail and "out-of-memory killer" in found["killed_by_signal"].detail
    assert found["child_failed"].extra["torn_down_pids"] == [899505, 899506, 899507, 899508, 899510]
    assert "local rank 4 (pid 899509)" in found["child_failed"].detail


@pytest.mark.parametrize("path, code, signal", [
    ("tracebacks/ms_swift_4302_sigterm_teardown_then_sigsegv.log", -11, "SIGSEGV"),
    ("tracebacks/colossalai_3514_sigterm_others_then_sigkill_rank3.log", -9, "SIGKILL"),
])
def test_the_agents_failure_line_after_its_sigterms(tmp_path, path, code, signal):
    s = load(tmp_path, excerpt(path))
    (child,) = events(s, "child_failed").to_dict("records")
    assert (child["exitcode"], child["signal"], child["root_cause"]) == (code, signal, True)
    sent = s.events[s.events["subkind"] == "sigterm_sent"]
    line = int(child["source"].rsplit(":", 1)[1])
    assert len(sent) and all(int(x.rsplit(":", 1)[1]) < line for x in sent["source"])  # the SIGTERMs came first
    assert findings(s)["killed_by_signal"].extra["signal"] == signal


def test_sigabrt_in_a_childfailederror_block(tmp_path):
    # mmsegmentation_3106: ranks 1, 2 (Failures) and the root cause rank 0, all exitcode -6; rank 0's
    # traceback line is not in the excerpt: its signal comes from the exit code
    s = load(tmp_path, excerpt("tracebacks/mmsegmentation_3106_childfailed_sigabrt.log"))
    children = events(s, "child_failed").sort_values("rank")
    assert children[["rank", "exitcode", "signal", "root_cause"]].values.tolist() == [
        [0, -6, "SIGABRT", True], [1, -6, "SIGABRT", False], [2, -6, "SIGABRT", False]]
    found = findings(s)
    assert "killed_by_signal" not in found and "Root cause: rank 0" in found["child_failed"].detail
    (root,) = [x for x in found["child_failed"].extra["signals"] if x["process"] == "rank 0"]
    assert "watchdog" in root["meaning"]


def test_sigterm_in_a_childfailederror_block(tmp_path):
    # constructed: the corpus has no exit code -15 in a ChildFailedError block; this one follows cppo_6's layout
    text = excerpt("tracebacks/cppo_6_childfailed_sigkill.log", 10, 14) + (
        "[1]:\n  time      : 2025-05-21_15:43:04\n  host      : worker-1\n  rank      : 1 (local_rank: 1)\n"
        "  exitcode  : -15 (pid: 14751)\n  error_file: <N/A>\n  traceback : Signal 15 (SIGTERM) received by PID 14751\n"
    ) + excerpt("tracebacks/cppo_6_childfailed_sigkill.log", 16, 25)
    s = load(tmp_path, text)
    children = events(s, "child_failed").sort_values("rank")
    assert children[["rank", "exitcode", "signal", "root_cause"]].values.tolist() == [
        [0, -9, "SIGKILL", True], [1, -15, "SIGTERM", False]]
    found = findings(s)
    assert found["killed_by_signal"].ranks == (0,)  # the SIGTERMed rank was torn down, not killed from outside
    assert "Root cause: rank 0" in found["child_failed"].detail
    (term,) = [x for x in found["child_failed"].extra["signals"] if x["signal"] == "SIGTERM"]
    assert "torn down" in term["meaning"]


# --- 4. a collective mismatch says what differs -------------------------------------------------------------
def test_mismatch_names_the_field_and_both_values(tmp_path):
    # ms_swift_9443: "...Collectives differ in the following aspects: ... Tensor shapes: 195812480vs 51123456"
    text = excerpt("tracebacks/ms_swift_9443_mismatch_tensor_shapes.log")
    a, b = re.search(r"Tensor shapes: (\d+)vs (\d+)", text).groups()
    s = load(tmp_path, text)
    finding = findings(s)["collective_mismatch"]
    assert f"shape {a} vs {b}" in finding.title and f"shape {a} vs {b}" in finding.detail
    assert "different collectives" not in finding.detail
    assert finding.extra["differs"] == "shape" and finding.extra["dtypes"] == "BFloat16,BFloat16"


# --- 5 and 6. NCCL init facts, several nodes ---------------------------------------------------------------
def test_init_start_and_the_topology_line_before_init_complete(tmp_path):
    # alcf_polaris lines 1-47: rank 1's and rank 3's "Init START" and "nRanks 8 nNodes 2 localRanks 4" lines
    # (rank 1's glued to the next record), no Init COMPLETE yet
    s = load(tmp_path, excerpt("nccl_debug/alcf_polaris_resnet50_ddp_2node.log", 1, 47))
    inits = events(s, "nccl_init").sort_values("rank")
    ranked = inits.dropna(subset=["rank"])
    assert ranked[["rank", "nranks", "nnodes", "local_ranks", "local_rank", "init"]].values.tolist() == [
        [1, 8, 2, 4, 1, "start"], [3, 8, 2, 4, 3, "start"]]
    # pid 21530 (lines 1-5) has said no rank yet: a process with its host and device, rank unknown
    assert inits[inits["rank"].isna()][["pid", "device"]].values.tolist() == [[21530, 0]]
    # line 20: rank 1's "comm 0x55fb9af3cf70 rank 1 nranks 8 ... - Init START", the first to state nranks 8
    assert (s.meta["world_size"], s.meta["world_size_from"]) == (8, "stated: NCCL init: nranks 8 (capture.log:20)")
    assert s.meta["facts_source"]["world_size"] == "capture.log:20"
    assert s.meta["nodes"] == 2 and s.meta["nodes_from"].startswith("stated: NCCL init: nNodes 2")
    assert (s.meta["network"], s.meta["nic_provider"], s.meta["nic_count"]) == ("AWS Libfabric", "cxi", 4)


def test_a_log_that_stops_before_init_complete(tmp_path):
    # nccl_634: channel lines of ranks 4, 7 (gcn14) and 10 (gcn15); it ends at "Connected all rings"
    s = load(tmp_path, excerpt("nccl_debug/nccl_634_init_hang_tail_no_init_complete.log"))
    assert s.meta["ranks_by_host"] == {"gcn14": [4, 7], "gcn15": [10]} and s.meta["nodes"] == 2
    assert s.meta["world_size"] == 11 and "lower bound" in s.meta["world_size_from"]  # rank 10 is the highest named
    assert not (events(s, "nccl_init")["init"] == "complete").any()


def test_ib_nics_and_a_link_rate(tmp_path):
    # nccl_948 lines 1-5 (NET/IB : Using [0]mlx5_0:1/IB ... [3]mlx5_3:1/IB), and an ibstatus rate line (constructed)
    text = excerpt("nccl_debug/nccl_948_ib_connection_refused_retrying.log", 1, 5)
    s = load(tmp_path, text)
    names = re.findall(r"\[\d\](mlx5_\d):1/IB", text)
    assert [n["name"] for n in s.meta["nics"]] == names and s.meta["network"] == "IB"
    assert network_link(s.meta)["peak_busbw_gb_s"] is None  # no rate in the log: the peak is unknown
    s = load(tmp_path, text + "        rate:            200 Gb/sec (4X HDR)\n")
    link = network_link(s.meta)
    # what 4 x 200 Gb/s HDR achieve, not their 4 x 25 GB/s line rate: 91 GB/s busbw over 4 HDR NICs between
    # 2 HGX A100 nodes (NVIDIA/nccl-tests#100, the source the peak table cites)
    assert s.meta["link_speed_gbps"] == 200.0 and link["nic_peak_gb_s"] == pytest.approx(25.0 * 0.91)
    assert link["peak_busbw_gb_s"] == pytest.approx(91.0) and "nccl-tests#100" in link["source"]


def test_nccl_tests_over_two_hosts(tmp_path):
    # alcf_sophia all_gather: 16 ranks over sophia-gpu-09 and sophia-gpu-13, redop "none", no command line
    text = excerpt("nccl_tests/alcf_sophia_2node_16rank_all_gather.log")
    s = load(tmp_path, text, name="alcf_sophia_2node_16rank_all_gather.log")
    hosts = sorted(set(re.findall(r" on\s+(\S+) device", text)))
    assert s.meta["hosts"] == hosts and s.meta["nodes"] == len(hosts) == 2
    assert set(s.comm["op"]) == {"allgather"} and set(s.comm["group_size"]) == {16}


# --- 7. facts versus guesses ---------------------------------------------------------------------------------
def test_a_trainer_state_alone_does_not_say_how_many_gpus(tmp_path):
    folder = tmp_path / "checkpoint"
    folder.mkdir()
    (folder / "trainer_state.json").write_bytes((CORPUS / "trainer_state" / "nsllm_full_sft" / "trainer_state.json")
                                                .read_bytes())
    s = logkit.load_session(folder / "trainer_state.json")
    assert s.meta["world_size"] is None and s.meta["world_size_from"] is None and s.meta["gpu_count"] is None
    assert len(s.steps) == 435  # facts.json: 435 train log entries


def test_a_reduce_scatter_says_the_world_size(tmp_path):
    # llamafactory_6269: timeouts on ranks 0, 4, 3 of _REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672:
    # each rank keeps 1/8 of the input, so the world is 8 ranks (544997376 / 68124672 = 8), not 5 (rank 4 + 1)
    s = load(tmp_path, excerpt("console/llamafactory_6269_reduce_scatter_timeout.log"))
    assert s.meta["world_size"] == 8 and s.meta["world_size_from"].startswith(
        "derived: NumelIn / NumelOut of a reduce-scatter")


def test_the_highest_rank_seen_is_a_lower_bound(tmp_path):
    # the same timeouts without their element counts: only the ranks (0, 4, 3) are left to go by
    text = re.sub(r"NumelIn=\d+, NumelOut=\d+, ", "", excerpt("console/llamafactory_6269_reduce_scatter_timeout.log"))
    s = load(tmp_path, text)
    assert s.meta["world_size"] == 5 and s.meta["world_size_from"].startswith(
        "inferred (lower bound): highest rank seen + 1 (capture.log:")


# --- 9. nvidia-smi dmon's temp column ------------------------------------------------------------------------
def test_dmon_temp_column_is_the_gpu_temperature(tmp_path):
    # gpu_monitoring_tools_12: "# gpu pwr temp sm ..." and two rows "0 43 48 0 1 ..."
    text = excerpt("gpu_captures/gpu_monitoring_tools_12_dcgm_dmon_temp_column.txt")
    s = load(tmp_path, text, name="dmon.txt")
    temps = [float(line.split()[2]) for line in text.splitlines() if line.strip()[:1].isdigit()]
    assert s.gpu["temperature_c"].tolist() == temps and "temp" not in s.gpu.columns


# --- memory: what is skipped costs nothing ---------------------------------------------------------------------
def test_unmatched_lines_are_counted_past_the_first_thousand(tmp_path):
    n = KEEP_NOTES + 500
    s = load(tmp_path, "".join(f"junk line {i} that no grammar reads\n" for i in range(1, n + 1)))
    diag = s.diagnostics
    kept = diag[diag["reason"] == UNMATCHED]
    assert kept["line"].tolist() == list(range(1, KEEP_NOTES + 1))
    (summary,) = diag[diag["reason"] != UNMATCHED].to_dict("records")
    assert summary["reason"].startswith(f"500 more of: {UNMATCHED} (lines {KEEP_NOTES + 1}-{n}")
    assert summary["line"] == KEEP_NOTES + 1


# --- what the launchers and NCCL say when the group cannot form or breaks ---------------------------------------
@pytest.mark.parametrize("path, kind, said, words", [
    ("tracebacks/pytorch_69197_rendezvous_connect_timed_out.log", "distributed_init_failed",
     "Original timeout was 60000 ms", "within 60 s"),
    ("tracebacks/pytorch_85604_address_already_in_use.log", "distributed_init_failed",
     "[::]:47531 (errno: 98 - Address already in use)", "port 47531"),
    ("tracebacks/nccl_875_all_gather_unhandled_system_error.log", "nccl_error",
     "dist.all_gather(", "in all_gather (NCCL 2.10.3)"),
    ("console/ms_swift_7992_clock_prefix_watchdog_hang_sigterm.log", "watchdog_hang",
     "[PG ID 17 PG GUID 137(INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP) Rank 2]",
     "rank 2 (process group 17 INTRA_DISTRIBUTED_OPTIMIZER_INSTANCE_GROUP)"),
])
def test_setup_failures_nccl_errors_and_watchdog_hangs(tmp_path, path, kind, said, words):
    text = excerpt(path)
    assert said in text  # what the finding's words rest on, in the excerpt
    found = findings(load(tmp_path, text))
    assert kind in found and words in found[kind].detail
