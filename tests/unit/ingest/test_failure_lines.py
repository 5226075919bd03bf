"""Why processes failed and what a failed collective said, on excerpts of real logs from public issues
(``tests/data/failures/``, each cited in its README) and on variations of them said to be made here.
Expected values are read off the excerpts by eye; each says where."""

from __future__ import annotations

import pandas as pd

from logkit.ingest.readers import torch_lines as tl
from tests.support.excerpts import load, reader

text = reader("failures")




def kind(s, name: str) -> list[dict]:
    ev = s.events
    return ev[ev["kind"] == name].to_dict("records")


# --- python cannot open the script: once per process ------------------------------------------------------
def test_a_script_python_cannot_open_is_one_cause(tmp_path):
    # simmim_38 line 1: "/root/miniconda3/bin/python: can't open file 'main_simmim.py--cfg': [Errno 2] ..."
    s = load(tmp_path, text("simmim_38_cant_open_file.log"))
    (c,) = kind(s, "failure_cause")
    assert (c["cause"], c["error"], c["source"]) == ("file_not_found", "main_simmim.py--cfg", "capture.log:1")


def test_each_worker_that_cannot_open_the_script_is_a_cause_of_its_own(tmp_path):
    # made here: simmim_38's python line printed by three workers of one launch (CPython prints it once per
    # interpreter, then exits 2), before the agent's line: three failures, none of them ranked
    first, agent = text("simmim_38_cant_open_file.log").splitlines()
    s = load(tmp_path, "\n".join([first] * 3 + [agent]) + "\n")
    found = kind(s, "failure_cause")
    assert [c["source"] for c in found] == ["capture.log:1", "capture.log:2", "capture.log:3"]
    assert {c["cause"] for c in found} == {"file_not_found"} and all(pd.isna(c["rank"]) for c in found)


def test_a_missing_module_said_twice_by_one_rank_is_one_cause(tmp_path):
    # made here: a ranked exception line said twice (a rank's traceback, then its what(): echo) stays one cause
    line = "[rank1]: ModuleNotFoundError: No module named 'flash_attn'\n"
    (c,) = kind(load(tmp_path, line * 2), "failure_cause")
    assert (c["rank"], c["cause"], c["source"]) == (1, "module_not_found", "capture.log:1")


# --- a collective mismatch: the exception a process ends in, and two ranks of the run -------------------------
def test_a_collective_mismatch_is_the_cause_and_names_two_ranks(tmp_path):
    # lightning_19680 line 3: "RuntimeError: Detected mismatch between collectives on ranks. Rank 1 is running
    # collective: CollectiveFingerPrint(OpType=ALLGATHER, TensorShape=[6], ...), but Rank 0 is running collective:
    # CollectiveFingerPrint(OpType=_ALLGATHER_BASE)."
    s = load(tmp_path, text("lightning_19680_mismatch_allgather.log"))
    (mm,) = kind(s, "collective_mismatch")
    assert (mm["ranks"], mm["ops"], mm["shapes"], mm["source"]) == ("1,0", "ALLGATHER,_ALLGATHER_BASE", "[6];?",
                                                                     "capture.log:3")
    (c,) = kind(s, "failure_cause")
    assert (c["cause"], c["error"], c["source"]) == ("exception", "RuntimeError", "capture.log:3")
    assert pd.isna(c["rank"])  # no prefix names the rank that printed it
    # ranks 1 and 0 named, nothing states the world size: at least 2, said to be a lower bound
    assert s.meta["world_size"] == 2 and s.meta["world_size_from"].startswith("inferred (lower bound)")


def test_a_mismatch_of_many_dimensions_keeps_each_shape_whole(tmp_path):
    # made here: lightning_19680's line with rank 1's shape of four dimensions (as opendde_23 prints one,
    # "TensorShape=[359, 1, 1435, 16]"), rank 0's fingerprint given the same shape but 1436, under a "[rank5]:" prefix
    line = text("lightning_19680_mismatch_allgather.log").splitlines()[2]
    line = line.replace("TensorShape=[6]", "TensorShape=[359, 1, 1435, 16]").replace(
        "CollectiveFingerPrint(OpType=_ALLGATHER_BASE)", "CollectiveFingerPrint(OpType=ALLGATHER, TensorShape=[359, 1, "
        "1436, 16], TensorDtypes=Double)").replace("Rank 1 is", "Rank 5 is")
    s = load(tmp_path, f"[rank5]: {line}\n")
    (mm,) = kind(s, "collective_mismatch")
    assert (mm["ranks"], mm["shapes"], mm["dtypes"]) == ("5,0", "[359,1,1435,16];[359,1,1436,16]", "Double,Double")
    (c,) = kind(s, "failure_cause")
    assert (c["cause"], c["rank"]) == ("exception", 5)
    assert s.meta["world_size"] == 6 and "lower bound" in s.meta["world_size_from"]


def test_a_script_s_own_rank_prefix_gives_the_line_its_rank(tmp_path):
    # made here: simpletuner_2712's "[RANK 1] <date> [ERROR] ..." prefix (a training script's own) before
    # lightning_19680's exception line; torch's watchdog tag "[Rank 1]" (mixed case) is no prefix of this kind
    line = text("lightning_19680_mismatch_allgather.log").splitlines()[2]
    s = load(tmp_path, f"[RANK 1] 2026-05-19 10:10:29,701 [ERROR] GPU circuit breaker OPEN: cuda_error - {line}\n")
    (c,) = kind(s, "failure_cause")
    assert (c["cause"], c["rank"], c["source"]) == ("exception", 1, "capture.log:1")


# --- CUDA out of memory: sizes in bytes ---------------------------------------------------------------------
def test_an_oom_s_sizes_written_in_bytes_are_read(tmp_path):
    # ootdiffusion_167: "Tried to allocate 2.00 GiB. GPU 0 has a total capacty of 4.00 GiB of which 2.80 GiB is free.
    # Of the allocated memory 0 bytes is allocated by PyTorch"
    s = load(tmp_path, text("ootdiffusion_167_oom_zero_bytes.log"))
    (oom,) = kind(s, "cuda_oom")
    assert (oom["gpu"], oom["requested_gib"], oom["capacity_gib"], oom["free_gib"]) == (0, 2.0, 4.0, 2.8)
    assert oom["allocated_gib"] == 0.0


def test_a_rank_s_oom_with_no_memory_in_use_of_its_own(tmp_path):
    # made here: ootdiffusion_167's message in the newer wording ms_swift_5943 prints, under a "[rank15]:" prefix:
    # "Including non-PyTorch memory, this process has 0 bytes memory in use" and 512 bytes allocated
    line = ("[rank15]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total capacity "
            "of 4.00 GiB of which 2.80 GiB is free. Including non-PyTorch memory, this process has 0 bytes memory in "
            "use. Of the allocated memory 512 bytes is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
            "unallocated.\n")
    (oom,) = kind(load(tmp_path, line), "cuda_oom")
    assert (oom["rank"], oom["in_use_gib"]) == (15, 0.0)
    assert oom["allocated_gib"] == 512 / 2**30


# --- torchrun's agent: a local rank bounds the world, a cut block still names the script ----------------------
def test_a_failed_local_rank_gives_a_lower_bound_of_the_world(tmp_path):
    # egovlp_21 line 1: "failed (exitcode: -9) local_rank: 3 (pid: 407727)": local ranks 0..3 ran, so at least 4
    s = load(tmp_path, text("egovlp_21_local_rank3_sigkill.log"))
    (child,) = kind(s, "child_failed")
    assert (child["local_rank"], child["pid"], child["signal"]) == (3, 407727, "SIGKILL")
    assert s.meta["world_size"] == 4 and s.meta["world_size_from"].startswith("inferred (lower bound)")


def test_a_block_cut_after_its_header_still_names_the_script(tmp_path):
    # made here: egovlp_21 followed by the head of the block torchrun prints (robomamba_10's shape), cut before its
    # entries: "train.py FAILED" names the script the failed worker ran
    body = text("egovlp_21_local_rank3_sigkill.log") + "=" * 53 + "\ntrain.py FAILED\n" + "-" * 53 + "\nFailures:\n"
    (child,) = kind(load(tmp_path, body), "child_failed")
    assert (child["script"], child["local_rank"]) == ("train.py", 3)


def test_torch_2_s_nccl_error_colon_wording_is_the_cause(tmp_path):
    # deepep_106 line 1: "... exception: NCCL error: remote process exited or there was a network error, NCCL version
    # 2.20.5  ncclRemoteError: ..." glued on one line: torch 2.x writes the reason straight after "NCCL error: "
    # (read through the line grammar: loaded alone, a one-line file's prefix learning takes the head off this line)
    cause = tl.failure_cause(text("deepep_106_glued_watchdog_nccl_error_colon.log"))
    assert (cause["cause"], cause["what"]) == ("nccl_error", "remote process exited or there was a network error")
    # the same line after a real line of the same thread's kind (torch's "[E ProcessGroupNCCL.cpp:...]" error line,
    # made here): the file is read and the cause is its line 2
    s = load(tmp_path, "[E ProcessGroupNCCL.cpp:1316] [Rank 3] NCCL watchdog thread terminated with exception\n"
             + text("deepep_106_glued_watchdog_nccl_error_colon.log"))
    causes = kind(s, "failure_cause")
    assert [(c["cause"], c["error"], c["source"]) for c in causes] == [
        ("nccl_error", "remote process exited or there was a network error", "capture.log:2")]


def test_the_colon_wording_on_lines_of_its_own(tmp_path):
    # made here: deepep_106's error as torch prints it unglued, after a rank tag, with another reason (internal
    # error, as in "NCCL error in: ..., internal error"): the reason is read the same way
    body = ("[rank1]:[E ProcessGroupNCCL.cpp:1414] [PG 0 Rank 1] Process group watchdog thread terminated with exception: "
            "NCCL error: internal error, NCCL version 2.20.5\n"
            "ncclInternalError: Internal check failed.\n")
    s = load(tmp_path, body)
    causes = kind(s, "failure_cause")
    assert [(c["cause"], c["error"], c["rank"]) for c in causes] == [("nccl_error", "internal error", 1)]
