"""Failures of sharded runs read as such, on real public excerpts (tests/data/sharded_failures/README.md)
and variations of them made here: a watchdog timeout in a sharded collective says what it does there and
on which ranks, an out-of-memory error raised through FSDP's code says the phase, an all-reduce timeout is
no sharded failure."""

from __future__ import annotations

from pathlib import Path

import pytest

import logkit
from logkit.analysis.findings.sharded_failures import sharded_failure_findings

DATA = Path(__file__).resolve().parents[2] / "data" / "sharded_failures"


def _findings(path: Path) -> list:
    return [f for f in sharded_failure_findings(logkit.load_session(path)) if f.kind == "sharded_failure"]


def _variant(tmp_path: Path, name: str, old: str, new: str) -> Path:
    text = (DATA / name).read_text()
    assert old in text
    out = tmp_path / name
    out.write_text(text.replace(old, new))
    return out


def test_an_allgather_base_timeout_says_it_gathers_parameters():
    (f,) = _findings(DATA / "fsdp_allgather_base_timeout.log")
    # the line: [Rank 3] ... WorkNCCL(SeqNum=3738254, OpType=_ALLGATHER_BASE, ...)
    assert f.title == "Sharded collective timed out: _ALLGATHER_BASE" and f.ranks == (3,)
    assert "#3738254" in f.detail and "gathers each rank's shard of the parameters" in f.detail
    assert "phase it was in is not in the logs" in f.detail and f.evidence == ("fsdp_allgather_base_timeout.log:1",)


def test_a_reduce_scatter_base_timeout_says_it_reduces_gradients_on_every_rank_named():
    (f,) = _findings(DATA / "reduce_scatter_base_timeout.log")
    # lines 1, 3, 5: ranks 0, 4 and 3 at SeqNum 7753
    assert f.title == "Sharded collective timed out: _REDUCE_SCATTER_BASE" and f.ranks == (0, 3, 4)
    assert "#7753" in f.detail and "sums the gradients of all ranks" in f.detail


@pytest.mark.parametrize(("op", "role"), [("ALLGATHER_INTO_TENSOR", "gathers each rank's shard"),
                                          ("REDUCE_SCATTER_TENSOR", "sums the gradients")])
def test_the_other_names_of_the_two_collectives(tmp_path, op, role):
    (f,) = _findings(_variant(tmp_path, "fsdp_allgather_base_timeout.log", "OpType=_ALLGATHER_BASE", f"OpType={op}"))
    assert f.title.endswith(op) and role in f.detail


@pytest.mark.parametrize("op", ["ALLGATHER", "REDUCE_SCATTER"])
def test_a_plain_gather_of_a_run_not_known_to_be_sharded_is_no_sharded_failure(tmp_path, op):
    # any code all-gathers: without a strategy or a sharded wrapper's frames the run is not called sharded
    assert _findings(_variant(tmp_path, "fsdp_allgather_base_timeout.log", "OpType=_ALLGATHER_BASE", f"OpType={op}")) == []


def test_an_allreduce_timeout_is_not_a_sharded_failure():
    assert _findings(DATA / "allreduce_timeout.log") == []


def test_an_oom_through_fsdp1_pre_backward_says_backward_and_where():
    (f,) = _findings(DATA / "fsdp1_oom_pre_backward.log")
    # line 1: File ".../torch/distributed/fsdp/_runtime_utils.py", line 683, in _pre_backward_hook
    assert f.title == "Out of memory inside a sharded step (backward)"
    assert "_pre_backward_hook (_runtime_utils.py:683)" in f.detail and "gathering a unit's parameters" in f.detail
    assert f.evidence == ("fsdp1_oom_pre_backward.log:11",)  # the OutOfMemoryError line


def test_an_oom_through_a_post_backward_hook_says_gradients(tmp_path):
    path = _variant(tmp_path, "fsdp1_oom_pre_backward.log", "line 683, in _pre_backward_hook",
                    "line 683, in _post_backward_hook")
    (f,) = _findings(path)
    assert "reducing a unit's gradients" in f.detail and "(backward)" in f.title


def test_an_oom_outside_a_sharded_wrappers_code_is_not_one(tmp_path):
    # the same frames in a user's own file: not FSDP's code, no sharded phase
    path = _variant(tmp_path, "fsdp1_oom_pre_backward.log", "torch/distributed/fsdp/", "my_project/")
    assert _findings(path) == []
