"""Facts with their provenance, the world size as the log states it, NCCL's initialisation output and
the cause of a failure, on excerpts of real logs from public issues (``tests/data/ncclfacts/``, each
cited in its README) and on variations of them said to be made here. Expected values are read off
the excerpts by eye; each says where."""

from __future__ import annotations

import pytest

from logkit.analysis import analyze
from logkit.schema.meta import SessionMeta, basis_of, contract_form, provenance
from tests.support.excerpts import load, reader

text = reader("ncclfacts")




def causes(s) -> list[dict]:
    ev = s.events
    return ev[ev["kind"] == "failure_cause"].to_dict("records")


# --- the mechanism: a stronger basis wins, whatever the order ------------------------------------------------
@pytest.mark.parametrize("order", [("inferred (lower bound)", "derived", "stated"),
                                   ("stated", "inferred (lower bound)", "derived"),
                                   ("derived", "stated", "inferred (lower bound)")])
def test_stated_beats_derived_beats_inferred_in_any_order(order):
    values = {"stated": 8, "derived": 4, "inferred (lower bound)": 3}
    meta = SessionMeta()
    for basis in order:
        meta.state("world_size", values[basis], basis, f"a {basis} value", f"f.log:{values[basis]}")
    assert (meta.world_size, meta.world_size_from) == (8, "stated: a stated value (f.log:8)")
    assert meta.facts_source == {"world_size": "f.log:8"}


def test_the_basis_of_a_from_and_the_contract_form_of_an_old_one():
    assert [basis_of(provenance(b, "x")) for b in ("inferred (lower bound)", "derived", "stated")] == [1, 2, 3]
    assert basis_of("nccl init (nranks)") == 0 and basis_of(None) == 0
    assert contract_form("rank streams found (a lower bound)").startswith("inferred (lower bound): ")
    assert contract_form("nccl-tests device table (ranks)") == "stated: nccl-tests device table (ranks)"
    with pytest.raises(ValueError):
        provenance("guessed", "x")


# --- world size from what the log states ------------------------------------------------------------------------
def test_an_all_gather_says_the_world_size_not_the_highest_rank(tmp_path):
    # trl_1099: rank 2's watchdog line, _ALLGATHER_BASE NumelIn=65539072, NumelOut=262156288: 262156288 / 65539072 = 4
    # ranks; the highest rank the line shows (2) would say 3
    s = load(tmp_path, text("trl_1099_allgather_4way.log"))
    assert s.meta["world_size"] == 4
    assert s.meta["world_size_from"] == ("derived: NumelOut / NumelIn of an all-gather (_ALLGATHER_BASE 65539072 -> "
                                         "262156288) (capture.log:1)")


def test_a_reduce_scatter_says_the_world_size(tmp_path):
    # llamafactory_6269: _REDUCE_SCATTER_BASE NumelIn=544997376, NumelOut=68124672 on ranks 0 and 4: 8 ranks
    s = load(tmp_path, text("llamafactory_6269_reduce_scatter_8way.log"))
    assert s.meta["world_size"] == 8 and s.meta["world_size_from"].startswith("derived: NumelIn / NumelOut")
    assert s.meta["facts_source"]["world_size"] == "capture.log:1"


def test_accelerate_states_its_processes(tmp_path):
    # lincir_14 line 10: "Num processes: 1" (accelerate's state); line 1: "--nproc_per_node 1 --nnodes 1"
    s = load(tmp_path, text("lincir_14_accelerate_state.log"))
    said = s.meta["world_size_from"]
    assert s.meta["world_size"] == 1 and said.startswith("stated: ") and "Num processes: 1" in said
    assert said.endswith("(capture.log:10)")
    assert s.meta["nodes"] == 1 and s.meta["nodes_from"] == "stated: --nnodes / NNODES 1 (capture.log:1)"


def test_quoted_launcher_flags_over_continued_lines(tmp_path):
    # r1v_42 lines 1-2: torchrun --nproc_per_node="1" \ / --nnodes="1" \: 1 x 1
    s = load(tmp_path, text("r1v_42_cant_open_file.log"))
    assert s.meta["world_size"] == 1 and s.meta["world_size_from"].startswith("derived: torchrun --nnodes x")
    assert s.meta["facts_source"]["world_size"] == "capture.log:1,2"


@pytest.mark.parametrize("line", ["world_size = 2", "WORLD_SIZE=2", "world_size: 2", "{'world_size': 2, 'rank': 0}",
                                  "accelerate launch --num_processes 2 train.py", "Num processes: 2"])
def test_a_stated_world_size_wins_over_an_all_gather_of_a_subgroup(tmp_path, line):
    # made here: each form of a stated world size, printed twice (once before, once after) around trl_1099's line,
    # which shows rank 2: a world of 2 ranks cannot hold a rank 2
    body = f"{line}\n" + text("trl_1099_allgather_4way.log") + f"{line}\n"
    s = load(tmp_path, body)
    # the file shows rank 2: a world of 2 cannot be; the floor is rank 2 + 1, a lower bound, and a diagnostic says so
    assert s.meta["world_size"] == 3 and s.meta["world_size_from"].startswith("inferred (lower bound)")
    assert s.diagnostics["reason"].str.contains("below rank 2").any()


@pytest.mark.parametrize("line", ["world_size = 8", "WORLD_SIZE=8", "'world_size': 8", "Num processes: 8",
                                  "accelerate launch --num_processes=8 train.py"])
def test_a_stated_world_size_is_taken_whatever_its_place(tmp_path, line):
    # made here: the same forms stating 8, after (and before) trl_1099's 4-way all-gather: stated beats derived
    for body in (text("trl_1099_allgather_4way.log") + line + "\n", line + "\n" + text("trl_1099_allgather_4way.log")):
        s = load(tmp_path, body)
        assert s.meta["world_size"] == 8 and s.meta["world_size_from"].startswith("stated: ")


def test_processes_per_node_alone_is_a_lower_bound(tmp_path):
    # lincir_14's command line without its "--nnodes 1" and without accelerate's block (made here)
    body = "python -m torch.distributed.run --nproc_per_node 4 --node_rank 0 train_phi.py\n"
    s = load(tmp_path, body + text("trl_1099_allgather_4way.log").replace("NumelOut=262156288", "NumelOut=65539072"))
    assert s.meta["world_size"] == 4 and s.meta["world_size_from"].startswith("inferred (lower bound): --nproc_per_node 4")


# --- NCCL initialisation ------------------------------------------------------------------------------------------
def test_nranks_and_nnodes_of_the_topology_line(tmp_path):
    # nccl_1189 line 4: "comm 0x5b0bc60 rank 3 nRanks 4 nNodes 2 localRanks 2 localRank 1 MNNVL 0"
    s = load(tmp_path, text("nccl_1189_nranks_nnodes.log"))
    assert (s.meta["world_size"], s.meta["nodes"]) == (4, 2)
    assert s.meta["world_size_from"] == "stated: NCCL init: nranks 4 (capture.log:4)"
    assert s.meta["nodes_from"] == "stated: NCCL init: nNodes 2 (capture.log:4)"
    assert s.meta["hosts"] == ["H20-GPU-05", "H20-GPU-06"]


def test_init_complete_nranks_and_the_transports(tmp_path):
    # nccl_429: "comm 0x7f4ce0006640 rank 5 nranks 16 ... - Init COMPLETE" (line 13); channel lines: three
    # "[receive] via NET/IB/0/GDRDMA" (lines 7, 9, 14), three "via P2P/direct pointer" (lines 8, 10, 16); two hosts
    s = load(tmp_path, text("nccl_429_ib_gdrdma_init_complete.log"))
    assert s.meta["world_size"] == 16 and s.meta["facts_source"]["world_size"] == "capture.log:13"
    assert s.meta["transports"] == {"NET/IB": 3, "P2P/direct pointer": 3}
    assert s.meta["network"] == "IB" and s.meta["network_from"].startswith("derived: the channels' transport")
    assert s.meta["nodes"] == 2 and s.meta["nodes_from"].startswith("inferred (lower bound): the distinct hosts")


def test_p2p_ipc_and_socket_transports_and_a_lower_bound(tmp_path):
    # nccl_952: four "via P2P/IPC/read" lines (1, 2, 3, 6), two "[send] via NET/Socket/3" (4, 5); rank 15 the highest
    s = load(tmp_path, text("nccl_952_p2p_ipc_socket.log"))
    assert s.meta["transports"] == {"P2P/IPC": 4, "NET/Socket": 2}
    assert s.meta["world_size"] == 16 and s.meta["world_size_from"].startswith("inferred (lower bound)")
    assert s.meta["network"] == "Socket"


def test_no_ib_device_then_sockets_is_a_fallback(tmp_path):
    # nccl_226: "NET/IB : No device found." (line 1) on three hosts, "NET/Socket : Using [0]ens3:..." on three, and
    # seven hosts in all (ip-172-31-12-21, -12-210, -5-233, -5-237, -8-153, -1-93, -0-110)
    s = load(tmp_path, text("nccl_226_ib_not_found_socket.log"))
    assert s.meta["network"] == "Socket" and s.meta["network_fallback"] == "IB: NET/IB : No device found. (capture.log:1)"
    assert "fell back from IB" in s.meta["network_from"]
    assert s.meta["nodes"] == 7 and "lower bound" in s.meta["nodes_from"]
    assert [n["name"] for n in s.meta["nics"]] == ["ens3"]


def test_using_network_is_stated_and_no_fallback_without_a_missing_ib(tmp_path):
    # made here: nccl_429's lines with a "Using network IB" line first (NCCL's words: init.cc "Using network %s")
    body = "machine-1:16194:18580 [0] NCCL INFO Using network IB\n" + text("nccl_429_ib_gdrdma_init_complete.log")
    s = load(tmp_path, body)
    assert s.meta["network_from"] == "stated: Using network IB (capture.log:1)" and s.meta.get("network_fallback") is None


# --- the cause of a failure ---------------------------------------------------------------------------------------
def test_a_script_that_cannot_be_opened(tmp_path):
    # r1v_42 line 10: "/root/miniconda3/bin/python: can't open file '/root/R1-V/src/open_r1/grpo.py': [Errno 2] ...";
    # line 11: torchrun's agent: "failed (exitcode: 2) local_rank: 0 (pid: 1464)"
    s = load(tmp_path, text("r1v_42_cant_open_file.log"))
    (c,) = causes(s)
    assert (c["cause"], c["error"], c["source"]) == ("file_not_found", "/root/R1-V/src/open_r1/grpo.py", "capture.log:10")
    assert s.diagnostics.empty  # python's message is read, not "not understood"
    (f,) = [f for f in analyze([s]).findings if f.kind == "child_failed"]
    assert f.detail.startswith("local rank 0 (pid 1464) failed: /root/miniconda3/bin/python: can't open file "
                               "'/root/R1-V/src/open_r1/grpo.py': [Errno 2] No such file or directory (capture.log:10).")
    assert f.evidence[0] == "capture.log:10" and f.extra["cause"]["cause"] == "file_not_found"


def test_a_missing_module_names_the_rank_that_failed(tmp_path):
    # made here: pytorch_77737's last line with a [rank3]: prefix (and flash_attn for tensorboard), before cppo_6's
    # failure block with its entry turned into rank 3, exit code 1
    block = (text("cppo_6_sigkill_root_cause.log").replace("rank      : 0 (local_rank: 0)", "rank      : 3 (local_rank: 3)")
             .replace("exitcode  : -9 (pid: 14750)", "exitcode  : 1 (pid: 14750)")
             .replace("traceback : Signal 9 (SIGKILL) received by PID 14750",
                      "traceback : To enable traceback see: https://pytorch.org/docs/stable/elastic/errors.html"))
    s = load(tmp_path, "[rank3]: ModuleNotFoundError: No module named 'flash_attn'\n" + block)
    (c,) = causes(s)
    assert (c["rank"], c["cause"], c["message"]) == (3, "module_not_found", "ModuleNotFoundError: No module named 'flash_attn'")
    (f,) = [f for f in analyze([s]).findings if f.kind == "child_failed"]
    assert f.detail.startswith("rank 3 failed: ModuleNotFoundError: No module named 'flash_attn' (capture.log:1).")


def test_a_stream_tag_is_not_part_of_the_message(tmp_path):
    # pytorch_77737 line 6: "[stderr]ModuleNotFoundError: No module named 'tensorboard'"
    s = load(tmp_path, text("pytorch_77737_module_not_found.log"))
    (c,) = causes(s)
    assert (c["cause"], c["error"], c["message"], c["source"]) == (
        "module_not_found", "tensorboard", "ModuleNotFoundError: No module named 'tensorboard'", "capture.log:6")


def test_a_signal_in_torchruns_failure_entry(tmp_path):
    # cppo_6 lines 11-15: rank 0, exitcode -9 (pid 14750), "traceback : Signal 9 (SIGKILL) received by PID 14750"
    s = load(tmp_path, text("cppo_6_sigkill_root_cause.log"))
    (c,) = causes(s)
    assert (c["rank"], c["cause"], c["error"], c["source"]) == (0, "signal", "SIGKILL", "capture.log:15")
    assert c["message"] == "Signal 9 (SIGKILL) received by PID 14750"


def test_an_nccl_error_and_its_nccl_error_class(tmp_path):
    # hkproj_1 line 1: "... NCCL error in: ...:1333, unhandled system error (...), NCCL version 2.18.6"; line 2:
    # "ncclSystemError: System call (e.g. socket, malloc) ..." (the same failure: one cause, the line read)
    s = load(tmp_path, text("hkproj_1_nccl_system_error.log"))
    (c,) = causes(s)
    assert (c["cause"], c["error"], c["source"]) == ("nccl_error", "unhandled system error", "capture.log:1")
    # lines 3-4: "Last error:" / "socketStartConnect: Connect to 192.168.19.14<52822> failed : No route to host"
    assert c["message"].endswith(" Last error: socketStartConnect: Connect to 192.168.19.14<52822> failed : No route to host")
    assert s.diagnostics.empty


def test_a_cuda_error(tmp_path):
    # nanogpt_470 line 2: "RuntimeError: CUDA error: device-side assert triggered"
    s = load(tmp_path, text("nanogpt_470_device_assert.log"))
    (c,) = causes(s)
    assert (c["cause"], c["error"], c["source"]) == ("cuda_error", "device-side assert triggered", "capture.log:2")
