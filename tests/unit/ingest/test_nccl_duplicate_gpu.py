"""NCCL's ``Duplicate GPU detected : rank A and rank B`` under torch's DistBackendError: the cause of the failure
(an NCCL error, cited on a whole exception line where the processes' interleaved output tore the first one), and
the ranks the detail names as ranks of the run (world size at least the highest + 1, said as a lower bound). On
excerpts of real logs (``tests/data/nccl_duplicate_gpu/``, each cited in its README) and variations made here.
Expected values are read off the excerpts by eye; each says where."""

from __future__ import annotations

import pytest

from tests.support.excerpts import events_of, load, reader

text = reader("nccl_duplicate_gpu")


def _causes(s):
    return [(e["source"].rsplit(":", 1)[1], e["cause"]) for e in events_of(s, "failure_cause")]


def test_the_detail_s_ranks_bound_the_world_size(tmp_path):
    # mambair_39: line 3 torch.distributed.DistBackendError ... invalid usage; line 6 "rank 2 and rank 0"
    s = load(tmp_path, text("mambair_39_duplicate_gpu_ranks_2_0.log"))
    assert _causes(s) == [("3", "nccl_error")]
    assert "Duplicate GPU detected : rank 2 and rank 0" in events_of(s, "failure_cause")[0]["message"]
    assert s.meta["world_size"] == 3 and "lower bound" in s.meta["world_size_from"]


def test_two_processes_glued_character_by_character(tmp_path):
    # nccl_1241: line 3 "torch.distributedtorch.distributed.DistBackendError.: DistBackendErrorNCCL error in: ...,
    # invalid usage"; line 6 "rank 3 and rank 2": at least 4 ranks
    s = load(tmp_path, text("nccl_1241_glued_duplicate_gpu_ranks_3_2.log"))
    assert _causes(s) == [("3", "nccl_error")]
    assert s.meta["world_size"] == 4 and "lower bound" in s.meta["world_size_from"]


def test_a_torn_exception_line_yields_to_the_whole_one_after_it(tmp_path):
    # made here from mambair_39: its exception line torn as in Megatron-LM#661 (another process's frame took its head
    # "torch.distributed"), then the same error whole from another process: the cause cites the whole line (6)
    lines = text("mambair_39_duplicate_gpu_ranks_2_0.log").splitlines(keepends=True)
    torn = 'torch.distributed  File "train.py", line 130, in train_pipeline\n' + lines[2].replace("torch.distributed", "", 1)
    s = load(tmp_path, torn + "".join(lines[3:]) + lines[2] + "".join(lines[3:5])
             + "Duplicate GPU detected : rank 5 and rank 0 both on CUDA device 4000\n")
    assert _causes(s) == [("6", "nccl_error")]
    assert s.meta["world_size"] == 6 and "lower bound" in s.meta["world_size_from"]


def test_a_torn_exception_line_alone_keeps_its_cause(tmp_path):
    # made here: the torn line (2) and its detail, and no whole line after: the cause stays on the torn line
    lines = text("mambair_39_duplicate_gpu_ranks_2_0.log").splitlines(keepends=True)
    torn = 'torch.distributed  File "train.py", line 130, in train_pipeline\n' + lines[2].replace("torch.distributed", "", 1)
    s = load(tmp_path, torn + "".join(lines[3:]))
    assert _causes(s) == [("2", "nccl_error")]


@pytest.mark.parametrize("glued", ["torch.distributed.DistBackendError: Exception", "        work = default_pg", "42"])
def test_the_error_glued_after_any_text_keeps_its_cause_and_ranks(tmp_path, glued):
    # made here from nccl_1241: its line 3's "NCCL error in: ..., invalid usage" glued after other text than
    # "DistBackendError"; its detail (line 6) still names ranks 3 and 2: at least 4 ranks
    lines = text("nccl_1241_glued_duplicate_gpu_ranks_3_2.log").splitlines(keepends=True)
    error = lines[2][lines[2].index("NCCL error in:"):]
    s = load(tmp_path, "".join(lines[:2]) + glued + error + "".join(lines[3:]))
    assert _causes(s) == [("3", "nccl_error")]
    assert events_of(s, "failure_cause")[0]["error"] == "invalid usage"
    assert s.meta["world_size"] == 4 and "lower bound" in s.meta["world_size_from"]


@pytest.mark.parametrize(("line", "what"), [
    ("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.", "ncclInvalidUsage"),
    ("ncclInvalidArgument: Invalid value for an argument.", "ncclInvalidArgument"),
])
def test_torchs_detail_line_alone_names_the_nccl_error(tmp_path, line, what):
    # made here: torch's explanation of an NCCL result code without the "NCCL error in:" line before it
    s = load(tmp_path, "step 3 loss 1.25\n" + line + "\n")
    assert _causes(s) == [("2", "nccl_error")]
    assert events_of(s, "failure_cause")[0]["error"] == what


def test_other_words_before_nccl_error_are_no_cause(tmp_path):
    s = load(tmp_path, "step 3 loss 1.25\nNo NCCL error: all ranks reached the barrier\n")
    assert _causes(s) == []
