"""What only the plots draw (``Analysis.curves``: loss, eval loss, throughput, GPU utilization,
bandwidth), each series checked against the JSONL files read here (``tests/support/stream_oracles``),
and the bandwidth curve the same whether the records are read whole (``load_sessions``) or reduced
rank by rank by the engine (``load_for_analysis``): equal frames, each point the record-weighted median
of the ranks' medians (``kernels/curves.py``, ``comm_reduce.merged_points``) computed by hand.

Folders: the real 1- and 2-rank runs of ``sample_logs/why_slow/logs``, the real single-GPU run of
``sample_logs/gpu/qlora_single_gpu`` (GPU utilization), a generated 6-rank fleet whose ranks kept
different numbers of communication records (so the median is weighted), one whose records name no
busbw (the curve then draws algbw as logged), and a synthetic 2-rank GPU run with evaluations.
"""

from __future__ import annotations

import statistics

import orjson
import pandas as pd
import pytest

from benchmarks.fleet import write_fleet
from logkit.analysis import analyze
from logkit.run.load import load_for_analysis, load_sessions
from tests.support import stream_oracles as oracle
from tests.support.launch import REPO
from tests.support.synth import rank_file, write_session

WHY_SLOW = REPO / "sample_logs/why_slow/logs"
GPU_RUN = REPO / "sample_logs/gpu/qlora_single_gpu/logs"


def _thin(folder, keep: dict[int, int]) -> None:
    """Keep the communication records of rank r's first ``keep[r]`` steps only."""
    for rank, steps in keep.items():
        path = rank_file(folder, folder.name, rank)
        lines = [x for x in path.read_bytes().splitlines() if x.strip()]
        out = [x for x in lines if not (b'"communication"' in x and orjson.loads(x)["step"] > steps)]
        path.write_bytes(b"\n".join(out) + b"\n")


@pytest.fixture(scope="module")
def fleet(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    weighted = write_fleet(root, 6, steps=20, buckets=3)
    _thin(weighted, {0: 3, 1: 20, 2: 7, 3: 11, 4: 2, 5: 16})  # unequal weights per rank
    write_fleet(root, 3, steps=12, buckets=2, sid="training_20270101_000500", keep_world_size=False)
    return root


@pytest.fixture(scope="module")
def gpu_evals(tmp_path_factory):
    root = tmp_path_factory.mktemp("gpu_evals")
    folder = write_session(root, "training_20261122_010000", world_size=2, gpu_count=2,
                           step_times=[0.5, 0.4, 0.6, 0.5, 0.45, 0.5], gpu_util=(35.0, 80.5, 91.0))
    for rank in (0, 1):  # the two GPUs' snapshots interleaved in time (rank r at r + 1, r + 3, r + 5 s)
        path = rank_file(folder, folder.name, rank)
        records = [orjson.loads(x) for x in path.read_bytes().splitlines() if x.strip()]
        snaps = [r for r in records if r["type"] == "gpu_snapshot"]
        for k, r in enumerate(snaps):
            r["elapsed_s"] = float(rank + 1 + 2 * k)
        path.write_bytes(b"\n".join(orjson.dumps(r) for r in records) + b"\n")
    path = rank_file(folder, folder.name, 0)
    extra = [{"timestamp": "2026-11-22T01:00:02+00:00", "elapsed_s": 2.0, "type": "evaluation", "level": "INFO",
              "message": "Evaluation", "session_id": folder.name, "rank": 0, "world_size": 2, "step": s,
              "metrics": {"eval_loss": v}} for s, v in ((4, 2.4), (2, 2.9))]
    path.write_bytes(path.read_bytes() + b"\n".join(orjson.dumps(r) for r in extra) + b"\n")
    return root


def _both(root):
    whole = analyze(load_sessions(root))
    loaded = load_for_analysis(root)
    return whole, analyze(loaded.sessions, comm_parts=loaded.comm_parts)


def _bandwidth_oracle(root, whole) -> pd.DataFrame:
    data = oracle.streams(root)
    rows = []
    for s in whole.scaling.sessions:
        for op, size, med, n in oracle.bandwidth_curve(data[s.session_id]):
            rows.append({"session_id": s.session_id, "op": op, "size_mb": size, "busbw_mb_s": med, "records": n})
    return pd.DataFrame(rows, columns=["session_id", "op", "size_mb", "busbw_mb_s", "records"])


def _check_bandwidth(root):
    whole, engine = _both(root)
    a, b = whole.curves.frame("bandwidth"), engine.curves.frame("bandwidth")
    pd.testing.assert_frame_equal(a.reset_index(drop=True), b.reset_index(drop=True))
    want = _bandwidth_oracle(root, whole)
    assert len(want) > 0
    got = a.reset_index(drop=True)
    assert got[["session_id", "op"]].values.tolist() == want[["session_id", "op"]].values.tolist()
    for col in ("size_mb", "busbw_mb_s"):
        assert got[col].tolist() == pytest.approx(want[col].tolist(), rel=1e-12), col
    assert got["records"].astype(int).tolist() == want["records"].tolist()
    return got, want


def test_the_bandwidth_curve_of_a_fleet_with_unequal_ranks(fleet):
    got, want = _check_bandwidth(fleet)
    # the weighting shows: each point is one rank's median, not their mean, and at some size not the
    # plain (unweighted) lower median of the six
    data = oracle.streams(fleet)["training_20270101_000000"]
    unweighted = []
    for row in want[want["session_id"] == "training_20270101_000000"].to_dict("records"):
        meds = sorted(statistics.median(r["busbw_mb_s"] for r in oracle.comm_records(records)
                                        if r["size_bytes"] / 1e6 == row["size_mb"]) for records in data.values())
        assert len(meds) == 6 and row["busbw_mb_s"] in meds and row["busbw_mb_s"] != statistics.mean(meds)
        assert row["records"] == 3 + 20 + 7 + 11 + 2 + 16
        unweighted.append(row["busbw_mb_s"] == meds[2])
    assert len(unweighted) == 3 and not all(unweighted)
    # and the fleet without busbw draws algbw as logged
    no_bus = got[got["session_id"] == "training_20270101_000500"]
    assert len(no_bus) == 2


def test_the_bandwidth_curve_of_the_real_two_rank_run():
    got, want = _check_bandwidth(WHY_SLOW)
    assert set(got["session_id"]) == {"training_20261123_074813"}
    # two ranks with 40 records each at one size: the weighted median is the lower rank median
    (row,) = want.to_dict("records")
    data = oracle.streams(WHY_SLOW)["training_20261123_074813"]
    meds = sorted(oracle.busbw_median(data[r], 2) for r in (0, 1))
    assert row["records"] == 80 and row["busbw_mb_s"] == pytest.approx(meds[0])


@pytest.mark.parametrize("root", [WHY_SLOW, "fleet", "gpu_evals"])
def test_loss_and_throughput_curves(root, request):
    root = request.getfixturevalue(root) if isinstance(root, str) else root
    whole, engine = _both(root)
    data = oracle.streams(root)
    for name in ("loss", "eval_loss", "throughput", "gpu_utilization"):
        pd.testing.assert_frame_equal(whole.curves.frame(name).reset_index(drop=True),
                                      engine.curves.frame(name).reset_index(drop=True), obj=name)
    c = whole.curves
    # every run's global batch is known in these folders: x = samples seen = step x global batch
    assert c.loss_axis == "samples seen"
    for s in whole.scaling.sessions:
        ranks = data[s.session_id]
        lowest = ranks[min(ranks)]
        batch = {st["step"]: st["batch"] for st in oracle.step_rows(lowest)}
        want = sorted((step * batch[step], loss) for step, loss in oracle.loss_points(lowest))
        assert len(want) >= 6
        _same(c.loss[c.loss["session_id"] == s.session_id], "x", "loss", want)
        _same(c.throughput[c.throughput["session_id"] == s.session_id], "step", "samples_per_s",
              oracle.step_throughput(lowest))
        evals = sorted((step * s.total_batch_size, v) for step, v in oracle.eval_points(lowest))
        _same(c.eval_loss[c.eval_loss["session_id"] == s.session_id], "x", "value", evals)


def _same(frame, x, y, want):
    assert len(frame) == len(want)
    assert frame[x].tolist() == pytest.approx([a for a, _ in want], rel=1e-12)
    assert frame[y].tolist() == pytest.approx([b for _, b in want], rel=1e-12)


def test_the_eval_loss_curve_is_on_the_samples_axis(gpu_evals):
    whole, _ = _both(gpu_evals)
    ev = whole.curves.eval_loss
    # rank 0's records at steps 4, 2 and 6 (write_session's own, eval_loss 2.0), batch 8, ordered by x;
    # rank 1's copy of the step-6 evaluation (every rank logs it) is not drawn a second time
    assert len(load_sessions(gpu_evals)[0].evals.query("name == 'eval_loss'")) == 4
    assert list(zip(ev["x"], ev["value"], strict=True)) == [(16.0, 2.9), (32.0, 2.4), (48.0, 2.0)]


@pytest.mark.parametrize("root", [GPU_RUN, "gpu_evals"])
def test_gpu_utilization_curve(root, request):
    root = request.getfixturevalue(root) if isinstance(root, str) else root
    whole, engine = _both(root)
    data = oracle.streams(root)
    g = whole.curves.frame("gpu_utilization")
    pd.testing.assert_frame_equal(g.reset_index(drop=True), engine.curves.frame("gpu_utilization").reset_index(drop=True))
    for sid, ranks in data.items():
        want = oracle.gpu_points(ranks)
        assert len(want) >= 3
        got = g[g["session_id"] == sid]
        got = list(zip(got["host"], got["gpu"], got["time_s"], got["utilization_pct"], strict=True))
        assert got == want
