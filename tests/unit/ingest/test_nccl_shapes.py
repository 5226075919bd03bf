"""Shapes of NCCL output logkit missed at first sight, each a class: NCCL 2.0-2.2's debug lines without the
word NCCL, another tool's log whose name happens to be our errors log's, an nccl-tests device table the file
ends inside, and nccl-tests output with NCCL's own lines (its init, its COLL lines inside the result rows).
On excerpts of real logs from public sources (``tests/data/nccl_shapes/``, each cited in its README) and on
variations of them said to be made here. Expected values are read off the excerpts by eye; each says where."""

from __future__ import annotations

import logkit
from logkit.ingest.discover import nothing_found
from logkit.ingest.readers.nccl import parse_nccl_debug
from logkit.ingest.readers.sniff import sniff
from tests.support.excerpts import events_of, load, reader

text = reader("nccl_shapes")


# --- NCCL 2.0-2.2: "host:pid:tid [dev] INFO ..." without the word NCCL ---------------------------------------
def test_an_old_info_line_without_the_word_nccl_is_an_nccl_line():
    # horovod_67 line 3: "cx50:18926:19004 [1] INFO Using internal Network Socket"
    n = parse_nccl_debug(text("horovod_67_nccl_2_1_info_without_nccl_word.log").splitlines()[2])
    assert (n["host"], n["pid"], n["dev"], n["level"], n["what"], n["network"]) == (
        "cx50", 18926, 1, "INFO", "network", "Socket")


def test_old_info_lines_alone_are_a_session_with_their_host_network_and_device(tmp_path):
    # horovod_67: nine lines of one process (pid 18926) on host cx50, device [1], "Using internal Network Socket"
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "train.log").write_text(text("horovod_67_nccl_2_1_info_without_nccl_word.log"))
    found = logkit.load_sessions(tmp_path / "run")
    assert len(found) == 1
    s = found[0]
    assert s.meta["hosts"] == ["cx50"] and s.meta["devices"] == {"cx50": [1]}
    assert s.meta["network"] == "Socket" and s.meta["network_from"].endswith("(train.log:3)")
    assert s.diagnostics.empty  # every line is NCCL's


def test_old_info_lines_behind_a_launcher_prefix_with_a_rank_line(tmp_path):
    # made here: the excerpt as mpirun --tag-output writes rank 1's lines, with NCCL 2.3's commAlloc line
    # ("comm %p rank %d nranks %d") in the old header: the rank and the world size it states
    lines = text("horovod_67_nccl_2_1_info_without_nccl_word.log").splitlines()
    lines.append("cx50:18926:19004 [1] INFO comm 0x7f2a20413010 rank 1 nranks 4")
    s = load(tmp_path, "".join(f"[1,1]<stderr>:{line}\n" for line in lines))
    assert s.meta["world_size"] == 4 and s.meta["world_size_from"].startswith("stated: NCCL init: nranks 4")
    assert [e["rank"] for e in events_of(s, "nccl_init")] == [1]


def test_old_info_lines_with_a_timestamp_among_deepspeed_lines(tmp_path):
    # made here: the excerpt's lines, each behind an ISO time stamp, between two DeepSpeed logging lines: every line
    # is read (NCCL's with its time stamp taken off), none "matches no known grammar"
    from logkit.ingest.readers.prefixes import peel
    lines = [f"2020-01-01T10:00:09 {line}" for line in text("horovod_67_nccl_2_1_info_without_nccl_word.log").splitlines()]
    stripped = peel(lines[2])
    assert stripped.stamp == "2020-01-01T10:00:09"
    assert stripped.text == "cx50:18926:19004 [1] INFO Using internal Network Socket"
    body = ("[2020-01-01 10:00:06,310] [INFO] [engine.py:120:_configure_distributed_model] Initializing distributed model\n"
            + "".join(f"{line}\n" for line in lines)
            + "[2020-01-01 10:00:10,410] [INFO] [logging.py:60:log_dist] [Rank 0] step=10, skipped=0, lr=[0.0001]\n")
    s = load(tmp_path, body, "train.log")
    assert s.diagnostics.empty
    assert s.meta["hosts"] == ["cx50"] and s.meta["network"] == "Socket"


def test_a_line_that_only_looks_alike_is_not_nccl():
    # made here: a Python logging line with a bracketed number is no NCCL header (no host:pid:tid)
    assert parse_nccl_debug("worker [1] INFO Using internal Network Socket") is None
    assert parse_nccl_debug("2024-01-01 10:00:00 [1] INFO loss 0.5") is None


# --- a log named like our errors log ------------------------------------------------------------------------
def test_another_tools_log_named_like_our_errors_log_is_read(tmp_path):
    # nccl_tests_227: NCCL lines of hosts ai-worker01 and ai-worker03, "Using network IBext_v8" (line 7), in a
    # file whose name ends in "_errors.log" as ours does
    (tmp_path / "run").mkdir()
    name = "nccl_tests_227_roce_bootstrap_errors.log"
    (tmp_path / "run" / name).write_text(text(name))
    found = logkit.load_sessions(tmp_path / "run")
    assert len(found) == 1
    assert found[0].meta["hosts"] == ["ai-worker01", "ai-worker03"] and found[0].meta["network"] == "IBext_v8"
    assert sniff(tmp_path / "run" / name) == "console"


def test_our_errors_log_is_still_read_only_with_its_session(tmp_path):
    # made here: our errors log's line (schema.lines' ERRORS_LINE) under the same name: ours, no session of its own
    path = tmp_path / "nccl_tests_227_roce_bootstrap_errors.log"
    path.write_text("2026-11-22T01:55:42.123456+00:00 | ERROR | cannot write logs/s/s_rank0.jsonl: OSError(28)\n")
    assert sniff(path) is None and logkit.load_sessions(tmp_path) == []
    assert "read with its session, none here" in nothing_found(tmp_path)


# --- an nccl-tests device table the file ends inside ------------------------------------------------------
def test_a_device_table_followed_by_other_lines_states_the_ranks_and_hosts(tmp_path):
    # nccl_tests_244: ranks 0 (ranokau) and 1 (lascar) at lines 5-6, then NCCL's line 7: the table is whole
    s = load(tmp_path, text("nccl_tests_244_two_hosts_device_table.log"))
    assert (s.meta["world_size"], s.meta["nodes"]) == (2, 2)
    assert s.meta["world_size_from"].startswith("stated: 2 rank(s)") and s.meta["nodes_from"].startswith("stated")


def test_a_device_table_the_file_ends_inside_gives_lower_bounds(tmp_path):
    # made here: the excerpt's lines 2-6, cut after the table's line 6 (a paste or capture ending inside the table)
    # and without the mpirun command of line 1 (whose -np states the size): at least 2 ranks on at least 2 hosts,
    # never said as the run's size
    body = "".join(text("nccl_tests_244_two_hosts_device_table.log").splitlines(keepends=True)[1:6])
    s = load(tmp_path, body)
    assert (s.meta["world_size"], s.meta["nodes"]) == (2, 2)
    assert s.meta["world_size_from"].startswith("inferred (lower bound)")
    assert s.meta["nodes_from"].startswith("inferred (lower bound)")


def test_a_device_line_cut_short_at_the_end_keeps_the_table_open(tmp_path):
    # made here: the excerpt's lines 2-6 (without the mpirun command that states the size) and the head of a third
    # device line (as a paste cut inside it): the ranks listed are a lower bound, and the torn line is a note, not a rank
    body = "".join(text("nccl_tests_244_two_hosts_device_table.log").splitlines(keepends=True)[1:6])
    s = load(tmp_path, body + "#  Rank  2 Group  0 Pid  7321\n")
    assert s.meta["world_size"] == 2 and s.meta["world_size_from"].startswith("inferred (lower bound)")
    assert list(s.diagnostics["line"]) == [6]


# --- nccl-tests output with NCCL's own lines -----------------------------------------------------------------
def test_nccl_tests_output_with_nccl_lines_gives_its_communicators(tmp_path):
    # nccl_1706 tail: line 1 the 128 MB row, lines 2-3 each device's communicator (rank 0 comm 0x55f6848de3b0, rank 1
    # comm 0x55f68495f4f0, nranks 2, Destroy COMPLETE), line 5 "# Avg bus bandwidth    : 8.62002"
    s = load(tmp_path, text("nccl_1706_nccl_tests_g2_tail.log"))
    assert s.meta["formats"] == ["nccl_tests"]
    assert [t["avg_busbw_gb_s"] for t in s.meta["nccl_tests"]] == [8.62002]
    inits = sorted(events_of(s, "nccl_init"), key=lambda e: e["rank"])
    assert [(e["rank"], e["nranks"], e["comm_id"], e["host"]) for e in inits] == [
        (0, 2, "0x55f6848de3b0", "deepseek"), (1, 2, "0x55f68495f4f0", "deepseek")]
    assert s.meta["world_size"] == 2 and s.meta["world_size_from"].startswith("stated: NCCL init: nranks 2")


def test_an_init_complete_before_the_table_is_that_communicators(tmp_path):
    # made here: nccl_1706's two excerpts as one file (its init lines, then its tail): rank 1's communicator
    # completed its init (init lines' line 6, commId 0x76b3b6be637caf1c); rank 0's init line is not in the excerpt
    body = text("nccl_1706_nccl_tests_g2_init_lines.log") + text("nccl_1706_nccl_tests_g2_tail.log")
    s = load(tmp_path, body)
    inits = {e["rank"]: e for e in events_of(s, "nccl_init")}
    assert (inits[1]["init"], inits[1]["comm_id"], inits[1]["source"]) == ("complete", "0x76b3b6be637caf1c",
                                                                            "capture.log:6")
    assert inits[0]["init"] is None  # no init line of rank 0 in the file: its Destroy line says nothing of its init
    assert s.meta["devices"] == {"deepseek": [0, 1]}


# --- a result row printed in pieces around NCCL's COLL lines ------------------------------------------------
_HEADER = ("#       size         count      type   redop    root     time   algbw   busbw #wrong     time   algbw   busbw "
           "#wrong\n")  # nccl-tests' column header (src/common.cu), as it prints it


def _split_row(host: str) -> str:
    """Made here: nccl_1706's 128 MB row (tail line 1) as nccl-tests prints it with NCCL_DEBUG_SUBSYS=COLL: its
    size ... root, then NCCL's "AllReduce: opCount ..." line glued on, the out-of-place part with another glued
    on, then the in-place part (the shape of a NCCL 2.27 capture's rows)."""
    row = text("nccl_1706_nccl_tests_g2_tail.log").splitlines()[0]
    cells = row.split()
    coll = (f"{host}:2081594:2081594 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x720000000 recvbuff 0x920000000 "
            "count 33554432 datatype 7 op 0 root 0 comm 0x55f6848de3b0 [nranks=2] stream 0x55b6a98daaf0\n")
    head = "   " + "      ".join(cells[:5])
    return (f"{head}{coll}{coll}   {'  '.join(cells[5:9])}{coll}{coll}   {'  '.join(cells[9:])}\n")


def test_a_row_printed_in_pieces_is_one_row(tmp_path):
    # nccl_1706 line 1: 134217728 B, 33554432 float sum -1; out-of-place 5190.8 us 25.86 25.86 0; in-place
    # 5186.6 us 25.88 25.88 0 -- here in pieces around host deepseek's COLL lines, after the header
    s = load(tmp_path, _HEADER + _split_row("deepseek") + "# Avg bus bandwidth    : 8.62002 \n")
    assert len(s.comm) == 2 and s.diagnostics.empty
    oop = s.comm[s.comm["placement"] == "out-of-place"].iloc[0]
    inp = s.comm[s.comm["placement"] == "in-place"].iloc[0]
    assert (oop["size_bytes"], oop["count"], oop["source"]) == (134217728, 33554432, "capture.log:2")
    assert (oop["duration_ms"], oop["busbw_mb_s"]) == (5.1908, 25860.0)
    assert (inp["duration_ms"], inp["busbw_mb_s"]) == (5.1866, 25880.0)
    assert {e["host"] for e in events_of(s, "nccl_init")} == {"deepseek"}  # the glued lines are NCCL's


def test_a_glued_record_whose_host_begins_with_digits(tmp_path):
    # made here: the same with a host named as nccl#1773's machine ("10-4-3-3"): glued to the root "-1" it reads
    # "-110-4-3-3:..."; read back as the root -1 and host 10-4-3-3 (the host NCCL's own line 1 names)
    host_line = "10-4-3-3:2081594:2081594 [0] NCCL INFO cudaDriverVersion 12080\n"
    s = load(tmp_path, host_line + _HEADER + _split_row("10-4-3-3"))
    assert len(s.comm) == 2 and s.diagnostics.empty
    assert s.meta["hosts"] == ["10-4-3-3"]
