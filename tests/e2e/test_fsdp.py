"""A real 2-rank FSDP2 run (``fully_shard`` on gloo CPU ranks under torchrun, ``TrainingLogger``):
every all-gather and reduce-scatter is timed with its exact bytes, rank 1's slower data loading is
named as the straggler with its cause, and the session says how the model was wrapped.

The byte oracles are computed here from the model's parameter shapes and the shard count, padded as
FSDP2 pads (torch ``fsdp/_fully_shard/_fsdp_param.py``: each parameter is split on dim 0 with
``torch.chunk`` into ``n`` shards, every shard padded to the first's size, ceil(dim0 / n) rows; the
all-gather's output and the reduce-scatter's input are ``n`` such shards of every parameter of a unit).
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


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fsdp2")
    torchrun("tests/support/fsdp_train.py", ["--log-dir", str(tmp / "logs"), "--mode", "fsdp2", "--steps", str(STEPS),
                                             "--slow-rank", "1", "--slow-ms", str(SLOW_MS), "--sleep", "0.1"],
             RANKS, cwd=tmp)
    (session,) = session_dirs(tmp / "logs")
    files = SessionFiles(session.name)
    return tmp / "logs", {r: read_jsonl(session / files.rank_jsonl(r)) for r in range(RANKS)}


def unit_bytes(n: int) -> list[int]:
    """Per FSDP unit (each Linear of the model, as the script shards them): the padded bytes of its
    parameters gathered whole, from their shapes and the shard count ``n``."""
    out = []
    for layer in make_model():
        if isinstance(layer, nn.Linear):
            total = 0
            for p in layer.parameters():
                rows = math.ceil(p.shape[0] / n) * n  # every shard padded to ceil(dim0 / n) rows
                total += rows * math.prod(p.shape[1:]) * p.element_size()
            out.append(total)
    return out


def test_bytes_per_step_are_the_padded_parameters_of_every_unit(run):
    _, streams = run
    units = unit_bytes(RANKS)
    # the widths are odd: padding changes the figure (an unpadded oracle would differ)
    assert sum(units) != sum(p.numel() * 4 for p in make_model().parameters())
    for rank, records in streams.items():
        comm = collectives(records)
        assert {r["step"] for r in comm} == set(range(1, STEPS + 1)), rank
        for step in range(1, STEPS + 1):
            mine = [r for r in comm if r["step"] == step]
            gathered = sorted(r["size_bytes"] for r in mine if r["op"] == "all_gather")
            reduced = sorted(r["size_bytes"] for r in mine if r["op"] == "reduce_scatter")
            # each unit reshards after forward: gathered in forward and again in backward
            assert gathered == sorted(units * 2), (rank, step)
            assert reduced == sorted(units), (rank, step)
            phases = sorted((r["op"], r["phase"]) for r in mine)
            assert phases == sorted([("all_gather", "forward")] * len(units) + [("all_gather", "backward")]
                                    * len(units) + [("reduce_scatter", "backward")] * len(units))
        for r in comm:
            algbw = r["size_bytes"] / 1e6 / (r["duration_ms"] / 1e3)
            assert r["group_size"] == RANKS and r["timing_source"] == "wall"
            assert r["algbw_mb_s"] == pytest.approx(algbw, rel=1e-5, abs=5.1e-5)
            # (n-1)/n for all-gather and reduce-scatter: 1/2 on 2 ranks
            assert r["busbw_mb_s"] == pytest.approx(algbw * (RANKS - 1) / RANKS, rel=1e-5, abs=5.1e-5)


def test_the_session_says_fsdp2_with_its_facts(run, tmp_path):
    logs, streams = run
    for records in streams.values():
        (start,) = [r for r in records if r["type"] == "session_start"]
        assert start["strategy"] == "fsdp2"
        facts = start["strategy_facts"]
        assert facts["units"] == len(unit_bytes(RANKS)) and facts["shard_group_size"] == RANKS
        assert facts["reshard_after_forward"] is True and facts["offload"] == "none"
    doc = json.loads(analyze_logs(str(logs), "--json", cwd=tmp_path).stdout)
    (session,) = doc["sessions"]
    assert session["strategy"] == "fsdp2" and session["strategy_from"].startswith("stated: the session_start record")


def test_the_slow_data_rank_is_the_straggler_with_cause_data(run, tmp_path):
    logs, _ = run
    assert_slow_data_rank_1(logs, tmp_path, SLOW_MS)


def test_a_slow_backward_rank_is_the_straggler_with_cause_compute(tmp_path):
    """Rank 1's backward 50 ms slower (a sleep in its last Linear's backward hook): rank 0 waits in its
    backward collectives, and the time it spends in collectives, not its compute, says so."""
    torchrun("tests/support/fsdp_train.py", ["--log-dir", str(tmp_path / "logs"), "--mode", "fsdp2", "--steps",
                                             str(STEPS), "--slow-rank", "1", "--slow-backward-ms", str(SLOW_MS),
                                             "--sleep", "0.1"], RANKS, cwd=tmp_path)
    doc = json.loads(analyze_logs(str(tmp_path / "logs"), "--performance", "--json", cwd=tmp_path).stdout)
    by_rank = {row["rank"]: row for row in doc["stragglers"]}
    assert by_rank[1]["is_straggler"] and by_rank[1]["cause"] == "compute", by_rank
    parts = {row["rank"]: row for row in doc["step_breakdown"]}
    assert parts[1]["compute_s"] - parts[0]["compute_s"] >= 0.8 * SLOW_MS / 1e3  # the sleep is rank 1's compute
    assert parts[0]["wait_s"] >= 0.8 * SLOW_MS / 1e3 and parts[1]["data_s"] < SLOW_MS / 5e3


def test_the_communication_table_has_a_row_per_op(run, tmp_path):
    logs, streams = run
    doc = json.loads(analyze_logs(str(logs), "--communication", "--json", cwd=tmp_path).stdout)
    rows = {(row["rank"], row["op"]): row for row in doc["communication"]}
    assert set(rows) == {(r, op) for r in range(RANKS) for op in ("all_gather", "reduce_scatter")}
    units = unit_bytes(RANKS)
    for rank in range(RANKS):
        assert rows[(rank, "all_gather")]["count"] == STEPS * 2 * len(units)
        assert rows[(rank, "reduce_scatter")]["total_bytes"] == STEPS * sum(units)


def test_the_gradient_check_reads_a_sharded_models_whole_norms(tmp_path):
    """At ``ultra`` the gradient check of an FSDP2 model (its gradients are DTensors, each rank holding a
    shard) gives each layer's whole-gradient norm: the norms of the same model trained on one process
    (both ranks draw the same batch from the same seed, so the averaged gradient is that process's), and
    no fault of the logger."""
    import torch

    torchrun("tests/support/fsdp_train.py", ["--log-dir", str(tmp_path / "logs"), "--mode", "fsdp2", "--steps", "2",
                                             "--verbosity", "ultra", "--check-gradients"], RANKS, cwd=tmp_path)
    torch.manual_seed(0)  # the script's seed, model and first batch, on one process
    model = make_model()
    x = torch.randn(8, 37)
    model(x).pow(2).mean().backward()
    expected = {name: p.grad.norm().item() for name, p in model.named_parameters()}
    (folder,) = session_dirs(tmp_path / "logs")
    files = SessionFiles(folder.name)
    for rank in range(RANKS):
        (first,) = [r for r in read_jsonl(folder / files.rank_jsonl(rank))
                    if r["type"] == "training_step_complete" and r["step"] == 1]
        got = first["layer_grad_norms"]
        assert set(got) == set(expected)
        for name, norm in expected.items():
            assert got[name] == pytest.approx(norm, rel=1e-5, abs=1e-6), name
    errors = folder / files.errors_log
    assert not errors.exists() or "check_gradients" not in errors.read_text()


def test_a_nan_in_one_ranks_gradient_shard_is_reported_by_every_rank_and_hangs_none(tmp_path):
    """The gradient check reads each rank's own shards (their whole norms are combined on the writer
    thread): a NaN put into rank 1's shard of the first Linear's weight gradient at step 1 gives rank 1's
    NaN report naming that gradient, rank 0's nan_grad anomaly from the combined norms, a null norm for
    that layer on both ranks, and a run that finishes (a report that entered a collective on rank 1
    alone would hang both)."""
    torchrun("tests/support/fsdp_train.py", ["--log-dir", str(tmp_path / "logs"), "--mode", "fsdp2", "--steps", "3",
                                             "--verbosity", "ultra", "--check-gradients", "--nan-shard-rank", "1"],
             RANKS, cwd=tmp_path)
    (folder,) = session_dirs(tmp_path / "logs")
    files = SessionFiles(folder.name)
    streams = {r: read_jsonl(folder / files.rank_jsonl(r)) for r in range(RANKS)}
    for rank, records in streams.items():
        anomalies = [r for r in records if r["type"] == "anomaly" and r.get("kind") == "nan_grad"]
        assert [r["step"] for r in anomalies] == [1], rank
        (first,) = [r for r in records if r["type"] == "training_step_complete" and r["step"] == 1]
        norms = first["layer_grad_norms"]
        assert norms["0.weight"] is None, rank  # the script's first Linear: model[0]
        assert norms["0.bias"] is not None and norms["2.weight"] is not None, rank
        assert any(r["type"] == "session_end" for r in records), rank  # the run finished
    # (the optimizer then spreads the NaN to the parameters: later steps' losses are NaN on both ranks)
    (report,) = [r for r in streams[1] if r["type"] == "nan_detected" and r["step"] == 1]
    assert report["kind"] == "nan_grad"
    assert [(t["kind"], t["name"], t["nan_count"]) for t in report["tensors"]] == [("gradient", "0.weight", 1)]
    # rank 0's shards held no NaN at step 1
    assert not [r for r in streams[0] if r["type"] == "nan_detected" and r["step"] == 1]


def test_the_live_view_reads_the_sharded_steps_records_as_the_batch_analysis_does(run):
    """The streams fed to the live view as a follower reads them (one chunk per rank): rank 1, whose data came
    50 ms late every step, is its straggler with cause data, as ``--performance`` says of the same files."""
    from logkit.ingest.tail import Chunk, FollowedStream
    from logkit.run.live_state import LiveState

    logs, streams = run
    (session,) = session_dirs(logs)
    state = LiveState(0.0)
    for rank, records in streams.items():
        stream = FollowedStream(session / SessionFiles(session.name).rank_jsonl(rank), session.name, session.name, rank)
        state.feed(Chunk(stream, records=list(enumerate(records, start=1))), now=1.0)
    (live,) = state.snapshot(2.0).sessions
    assert live.straggler is not None and live.straggler.rank == 1 and live.straggler.cause == "data"
    assert live.straggler.is_straggler
