"""The key figures through every way of running the analysis, each also against the JSONL files read
here (``tests/support/stream_oracles``): samples/s, step p50 / p95, data share, the gradient sync's
median busbw and share of step time, and the stragglers table, from

- the batch analysis (``analyze(load_sessions(root))``: every record in a frame);
- the engine in this process, on a local process pool (``LocalPool``) and on Dask (a
  ``LocalCluster(processes=False)``; skipped without ``distributed``): ``build_sessions`` then
  ``analyze(sessions, comm_parts=...)``;
- the TensorBoard export's scalars, read back (skipped without ``tensorboard``): per-step samples/s
  and each rank's step times, from which p50 / p95 are taken here.

Folders: the real runs of ``sample_logs/why_slow/logs`` (1 and 2 ranks) and a generated 4-rank fleet
whose records name no group size nor busbw (busbw derived from algbw at the world size).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pandas as pd
import pytest

from benchmarks.fleet import write_fleet
from logkit.analysis import analyze
from logkit.ingest.discover import discover
from logkit.run.engine import MANY_RANKS, InProcess, LocalPool, build_sessions, many_small_ranks
from logkit.run.load import load_sessions
from tests.support import stream_oracles as oracle
from tests.support.launch import REPO

WHY_SLOW = REPO / "sample_logs/why_slow/logs"
PERF = ["session_id", "rank", "step_p50_s", "step_p95_s", "data_share"]
COMM = ["session_id", "rank", "op", "busbw_mb_s", "sync_share_of_step_time", "matched_steps"]


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    root = tmp_path_factory.mktemp("fleet")
    write_fleet(root, 4, steps=15, buckets=3, keep_world_size=False)
    wide = tmp_path_factory.mktemp("wide")  # more small ranks than MANY_RANKS: read whole, not mapped
    write_fleet(wide, MANY_RANKS + 4, steps=15, buckets=3, keep_world_size=False)
    return {"why_slow": WHY_SLOW, "fleet": root, "wide fleet": wide}


def _engine(root, runner):
    loaded = build_sessions(discover(root), runner=runner)
    order = sorted(range(len(loaded.sessions)), key=lambda i: loaded.sessions[i].start_key())
    return analyze([loaded.sessions[i] for i in order], comm_parts=[loaded.comm_parts[i] for i in order])


def _figures(a) -> dict:
    return {
        "samples_per_second": {s.session_id: s.samples_per_second for s in a.scaling.sessions},
        "performance": a.performance[PERF].sort_values(["session_id", "rank"]).reset_index(drop=True),
        "communication": a.communication[COMM].sort_values(["session_id", "rank", "op"]).reset_index(drop=True),
        "stragglers": a.stragglers.sort_values(["session_id", "rank"]).reset_index(drop=True),
    }


@pytest.fixture(scope="module")
def runs(roots):
    """root name -> runner name -> (its Analysis, its figures)."""
    out = {name: {} for name in roots}
    for name, root in roots.items():
        whole = load_sessions(root)
        out[name]["batch"] = analyze(whole)
        out[name]["in-process"] = _engine(root, InProcess())
    pool = LocalPool(2)
    try:
        for name, root in roots.items():
            out[name]["local pool"] = _engine(root, pool)
    finally:
        pool.close()
    try:
        from distributed import LocalCluster
    except ImportError:
        return out
    from logkit.run.engine import DaskCluster

    with LocalCluster(processes=False, n_workers=1, threads_per_worker=2, dashboard_address=None) as cluster:
        runner = DaskCluster(cluster.scheduler_address)
        try:
            for name, root in roots.items():
                out[name]["dask"] = _engine(root, runner)
        finally:
            runner.close()
    return out


def test_the_wide_fleet_takes_the_whole_read_and_the_fleet_the_map(roots):
    assert [many_small_ranks(s) for s in discover(roots["wide fleet"])] == [True]
    assert [many_small_ranks(s) for s in discover(roots["fleet"])] == [False]


@pytest.mark.parametrize("root", ["why_slow", "fleet", "wide fleet"])
def test_every_runner_gives_the_batch_figures(runs, root):
    got = {runner: _figures(a) for runner, a in runs[root].items()}
    assert {"batch", "in-process", "local pool"} <= set(got)
    assert ("dask" in got) is (importlib.util.find_spec("distributed") is not None)
    ref = got.pop("batch")
    for runner, fig in got.items():
        assert fig["samples_per_second"] == ref["samples_per_second"], runner
        for name in ("performance", "communication", "stragglers"):
            pd.testing.assert_frame_equal(fig[name], ref[name], check_exact=True, obj=f"{runner}: {name}")


@pytest.mark.parametrize("root", ["why_slow", "fleet", "wide fleet"])
def test_the_figures_are_the_files_figures(runs, roots, root):
    data = oracle.streams(roots[root])
    for runner, a in runs[root].items():
        f = _figures(a)
        for sid, ranks in data.items():
            assert f["samples_per_second"][sid] == pytest.approx(oracle.samples_per_second(ranks), rel=1e-12), runner
            ws = len(ranks)
            perf = f["performance"][f["performance"]["session_id"] == sid].set_index("rank")
            strag = f["stragglers"][f["stragglers"]["session_id"] == sid].set_index("rank")
            assert sorted(perf.index) == sorted(ranks)
            medians = {}
            for rank, records in ranks.items():
                p50, p95 = oracle.step_percentiles(records)
                medians[rank] = p50
                row = perf.loc[rank]
                assert (row["step_p50_s"], row["step_p95_s"]) == pytest.approx((p50, p95), rel=1e-12), (runner, rank)
                assert row["data_share"] == pytest.approx(oracle.data_share(records), rel=1e-12)
                assert strag.loc[rank, "median_step_s"] == pytest.approx(p50, rel=1e-12)
            fastest = min(medians.values())
            for rank, p50 in medians.items():
                assert strag.loc[rank, "vs_fastest"] == pytest.approx(p50 / fastest, rel=1e-12)
            comm = f["communication"][f["communication"]["session_id"] == sid]
            if ws == 1:
                assert comm.empty
                continue
            assert sorted(comm["rank"]) == sorted(ranks)
            for row in comm.to_dict("records"):
                assert row["op"] == "gradient_sync"
                records = ranks[row["rank"]]
                assert row["busbw_mb_s"] == pytest.approx(oracle.busbw_median(records, ws), rel=1e-9), runner
                share, matched = oracle.sync_share(ranks, row["rank"])
                assert (row["sync_share_of_step_time"], row["matched_steps"]) == (pytest.approx(share, rel=1e-12),
                                                                                  matched)


def _scalars(path) -> dict[str, list[tuple[int, float]]]:
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(path))
    acc.Reload()
    return {tag: [(e.step, e.value) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}


@pytest.mark.parametrize("root", ["why_slow", "fleet"])
def test_the_tensorboard_scalars_are_the_files_figures(runs, roots, root, tmp_path):
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install tensorboard)")
    from logkit.report.export import export_tensorboard, folder_names

    data = oracle.streams(roots[root])
    whole = load_sessions(roots[root])
    loaded = build_sessions(discover(roots[root]), runner=InProcess())
    export_tensorboard(whole, tmp_path / "batch", analysis=runs[root]["batch"])
    export_tensorboard(loaded.sessions, tmp_path / "engine", analysis=runs[root]["in-process"])
    for s, name in zip(whole, folder_names(whole), strict=True):
        batch = _scalars(tmp_path / "batch" / "tensorboard" / name)
        assert _scalars(tmp_path / "engine" / "tensorboard" / name) == batch
        ranks = data[s.session_id]
        want = oracle.step_throughput(ranks[min(ranks)])
        got = batch["train/samples_per_s"]
        assert [st for st, _ in got] == [int(st) for st, _ in want]
        np.testing.assert_allclose([v for _, v in got], [v for _, v in want], rtol=1e-6)  # float32 scalars
        for rank, records in ranks.items():
            times = [v for _, v in batch[f"step_time_s/rank{rank}"]]
            p50, p95 = oracle.step_percentiles(records)
            assert len(times) == len(oracle.timed(records))
            assert (float(np.median(times)), float(np.percentile(times, 95))) == pytest.approx((p50, p95), rel=1e-6)
