"""A real 2-rank FSDP1 run (``FullyShardedDataParallel`` on gloo CPU ranks under torchrun, ``TrainingLogger``):
its collectives, which FSDP1 issues by direct torch.distributed calls, are timed by the ``torch_distributed``
source with their exact bytes, rank 1's slower data loading is named as the straggler with its cause, and
the session says how the collectives were timed.

FSDP1 on CPU: ``device_id=None`` fails here ("FSDP needs a non-CPU accelerator device, but no accelerator
device is detected", torch ``fsdp/_init_utils.py``); ``device_id=torch.device("cpu")`` trains. The script
wraps each Linear in a unit and the whole model in the root (which then holds no parameter).

The byte oracles are computed here from the model's parameter shapes, as FSDP1 flattens them (torch
``fsdp/_flat_param.py``, ``_init_flat_param_and_metadata``): a unit's parameters in order, concatenated
flat; with ``use_orig_params=True`` each parameter starts on a 16-byte boundary (padding of
``16 / element size`` elements before it, ``_get_aligned_numel``) and the total is padded to a multiple of
the world size; the flat parameter is then chunked into ``n`` shards, each padded to the first's size
(ceil(total / n)). The all-gather's output and the reduce-scatter's input are ``n`` such shards.
"""

from __future__ import annotations

import json
import math

import pytest
from torch import nn

from logkit.schema import SessionFiles
from tests.support.fsdp_train import make_model
from tests.support.launch import analyze_logs, read_jsonl, session_dirs, torchrun
from tests.support.straggler_checks import assert_slow_data_rank_1
from tests.support.stream_oracles import collectives

pytestmark = pytest.mark.slow

RANKS, STEPS, SLOW_MS = 2, 30, 50


def unit_bytes(n: int, orig_params: bool) -> list[int]:
    """Per FSDP1 unit (each Linear): the bytes of its flat parameter gathered whole (see the module doc)."""
    out = []
    for layer in make_model():
        if isinstance(layer, nn.Linear):
            total, size = 0, 4  # float32
            for p in layer.parameters():
                if orig_params and total % (16 // size):
                    total += 16 // size - total % (16 // size)  # the next parameter starts 16-byte aligned
                total += p.numel()
            if orig_params and total % n:
                total += n - total % n
            out.append(math.ceil(total / n) * n * size)
    return out


def _run(tmp, *extra: str, steps: int = STEPS) -> dict:
    torchrun("tests/support/fsdp_train.py", ["--log-dir", str(tmp / "logs"), "--mode", "fsdp1", "--steps", str(steps),
                                             *extra], RANKS, cwd=tmp)
    (session,) = session_dirs(tmp / "logs")
    files = SessionFiles(session.name)
    return {r: read_jsonl(session / files.rank_jsonl(r)) for r in range(RANKS)}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp1")
    streams = _run(tmp, "--use-orig-params", "--slow-rank", "1", "--slow-ms", str(SLOW_MS), "--sleep", "0.1")
    return tmp / "logs", streams


def _assert_bytes(streams: dict, units: list[int], steps: int) -> None:
    for rank, records in streams.items():
        comm = collectives(records)
        assert {r["step"] for r in comm} == set(range(1, steps + 1)), rank
        for step in range(1, steps + 1):
            mine = [r for r in comm if r["step"] == step]
            # FULL_SHARD: every unit below the root reshards after forward and is gathered again in backward
            assert sorted((r["op"], r["phase"], r["size_bytes"]) for r in mine) == sorted(
                [("all_gather", "forward", b) for b in units] + [("all_gather", "backward", b) for b in units]
                + [("reduce_scatter", "backward", b) for b in units]), (rank, step)
        for r in comm:
            algbw = r["size_bytes"] / 1e6 / (r["duration_ms"] / 1e3)
            assert r["group_size"] == RANKS and r["timing_source"] == "wall"
            assert r["algbw_mb_s"] == pytest.approx(algbw, rel=1e-5, abs=5.1e-5)
            assert r["busbw_mb_s"] == pytest.approx(algbw * (RANKS - 1) / RANKS, rel=1e-5, abs=5.1e-5)


def test_bytes_per_step_are_the_flat_parameters_with_alignment_and_shard_padding(run):
    _, streams = run
    units = unit_bytes(RANKS, orig_params=True)
    # the widths are odd: alignment and shard padding change the figures (unpadded ones would differ)
    assert units != [sum(p.numel() * 4 for p in m.parameters()) for m in make_model() if isinstance(m, nn.Linear)]
    _assert_bytes(streams, units, STEPS)


def test_without_orig_params_no_alignment_padding(tmp_path):
    units = unit_bytes(RANKS, orig_params=False)
    assert units != unit_bytes(RANKS, orig_params=True)
    _assert_bytes(_run(tmp_path, steps=3), units, 3)


def test_the_session_says_fsdp1_timed_at_torch_distributed(run, tmp_path):
    logs, streams = run
    for records in streams.values():
        (start,) = [r for r in records if r["type"] == "session_start"]
        assert start["strategy"] == "fsdp1" and start["timing_source"] == "torch_distributed"
        assert start["timing_note"] is None
        facts = start["strategy_facts"]
        # FullyShardedDataParallel's defaults: FULL_SHARD over the whole group; 3 Linears and the root
        assert (facts["sharding_strategy"], facts["shard_group_size"], facts["units"]) == ("FULL_SHARD", RANKS, 4)
        assert facts["use_orig_params"] is True
        assert not [r for r in records if r.get("kind") == "comm_not_timed"]
    doc = json.loads(analyze_logs(str(logs), "--json", cwd=tmp_path).stdout)
    (session,) = doc["sessions"]
    assert session["strategy"] == "fsdp1" and session["timing_source"] == "torch_distributed"


def test_the_slow_data_rank_is_the_straggler_with_cause_data(run, tmp_path):
    logs, _ = run
    assert_slow_data_rank_1(logs, tmp_path, SLOW_MS)


def test_the_communication_table_has_a_row_per_op(run, tmp_path):
    logs, _ = run
    doc = json.loads(analyze_logs(str(logs), "--communication", "--json", cwd=tmp_path).stdout)
    rows = {(row["rank"], row["op"]): row for row in doc["communication"]}
    assert set(rows) == {(r, op) for r in range(RANKS) for op in ("all_gather", "reduce_scatter")}
    units = unit_bytes(RANKS, orig_params=True)
    for rank in range(RANKS):
        assert rows[(rank, "all_gather")]["count"] == STEPS * 2 * len(units)
        assert rows[(rank, "reduce_scatter")]["total_bytes"] == STEPS * sum(units)
