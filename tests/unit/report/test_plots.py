"""PNG plots: every file written, a valid PNG of the expected size; long lines thinned."""

from __future__ import annotations

import dataclasses
import struct

import numpy as np
import pandas as pd
import pytest

from logkit.analysis import analyze
from logkit.analysis.results import Comparison, Ratios, Scaling, SessionSummary
from logkit.ingest import Session
from logkit.report.plots import (
    EMPTY_GID,
    MAX_POINTS,
    PLOTS,
    figures,
    no_data,
    render_plots,
    report_plots,
    thin,
    write_plots,
)
from logkit.run.load import load_sessions
from tests.support.launch import REPO

SAMPLES = REPO / "sample_logs"


def _size(png: bytes) -> tuple[int, int]:
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and png[12:16] == b"IHDR"
    return struct.unpack(">II", png[16:24])


def _comparison(baseline, candidate, speedup, efficiency, steady, ci, rank_ratio) -> Comparison:
    return Comparison(baseline=baseline, candidate=candidate, group=None, regime="strong", basis="whole run",
                      basis_detail="", headline=Ratios(speedup, efficiency), whole_run=Ratios(speedup, efficiency),
                      steady=Ratios(steady, steady / rank_ratio), speedup_ci=ci, ci_level=0.95, rank_ratio=rank_ratio)


def _with_scaling(sessions, summaries, comparisons):
    """The analysis of ``sessions`` with a scaling section made here (figures chosen by the test)."""
    return dataclasses.replace(analyze(sessions), scaling=Scaling(sessions=tuple(summaries),
                                                                  comparisons=tuple(comparisons)))


def test_write_plots_on_real_runs(tmp_path):
    sessions = load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs") + load_sessions(SAMPLES / "legacy_summary" / "logs")
    summaries = [SessionSummary(s.session_id, world_size=s.meta["world_size"], duration_s=s.meta["duration_s"],
                                steps_per_second=1.0, final_loss=2.0) for s in sessions]
    # the interval is the steady-state speedup's: it need not contain the whole-run speedup
    analysis = _with_scaling(sessions, summaries, [_comparison(sessions[0].session_id, sessions[1].session_id, 1.3,
                                                               0.65, 1.6, (1.5, 1.7), 2.0)])
    paths = write_plots(analysis, tmp_path / "plots")
    assert [p.name for p in paths] == list(PLOTS)
    assert "training_comparison.png" in PLOTS  # the file name the comparison pipeline looks for
    for p in paths:
        w, h = _size(p.read_bytes())
        assert w >= 800 and h >= 400 and p.stat().st_size > 5000, p.name


def test_plots_without_data_still_written():
    out = render_plots(analyze([Session.empty({"session_id": "empty"})]))
    assert list(out) == list(PLOTS)
    for png in out.values():
        assert _size(png)[0] >= 800


def test_the_report_gets_a_sentence_for_a_plot_without_data():
    images, missing = report_plots(analyze([Session.empty({"session_id": "empty"})]))
    assert images == {} and list(missing) == list(PLOTS)
    assert missing["gpu_utilization.png"] == "no GPU snapshots in these sessions (CPU runs, or GPU sampling off)"
    assert missing["step_time_per_rank.png"] == "no step times logged"
    # CPU runs: every plot but the GPUs' has data
    cpu = analyze(load_sessions(SAMPLES / "why_slow" / "logs"))
    images, missing = report_plots(cpu)
    assert list(missing) == ["gpu_utilization.png"] and set(images) == set(PLOTS) - set(missing)
    for png in images.values():
        assert _size(png)[0] >= 800
    # a figure with one panel drawn is no placeholder
    fig = figures(cpu, ["training_comparison.png"])["training_comparison.png"]
    assert no_data(fig) is None


def test_thin_keeps_at_most_max_points_and_the_mean():
    n = 200_003
    frame = pd.DataFrame({"step": np.arange(n, dtype=float), "loss": np.linspace(3, 1, n)})
    frame.loc[5, "loss"] = np.nan
    out = thin(frame, "step", "loss")
    assert len(out) <= MAX_POINTS
    assert out["step"].is_monotonic_increasing
    assert abs(out["loss"].mean() - frame["loss"].mean()) < 1e-3
    small = thin(frame.head(100), "step", "loss")
    assert len(small) == 99  # the NaN row dropped, nothing else


def _drawn(ax) -> int:
    """Artists that carry data on an axes: lines with points, bars, scatter collections, boxes."""
    lines = sum(1 for line in ax.get_lines() if len(line.get_xdata()) > 0 and line.get_label()[:1] != "_")
    bars = sum(len(c) for c in ax.containers)
    scatter = sum(len(c.get_offsets()) for c in ax.collections if hasattr(c, "get_offsets"))
    return lines + bars + scatter + len(ax.patches)


def test_every_plot_has_data_for_the_real_fixtures():
    sessions = (load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs") + load_sessions(SAMPLES / "nccl_tests")
                + load_sessions(SAMPLES / "gpu_captures") + load_sessions(SAMPLES / "why_slow" / "logs"))
    figs = figures(analyze(sessions))
    assert list(figs) == list(PLOTS)
    for name, fig in figs.items():
        axes = [ax for ax in fig.axes if ax.get_gid() != EMPTY_GID or _drawn(ax)]
        assert not [ax for ax in fig.axes if ax.get_gid() == EMPTY_GID], name  # no "no data" placeholder
        assert sum(_drawn(ax) for ax in axes) > 0, name
    training = [s for s in sessions if s.session_id.startswith("training_")]
    # loss curves: one line per training run, x = samples seen (both runs log their global batch)
    (ax,) = figs["loss_curves.png"].axes
    lines = {line.get_label(): line for line in ax.get_lines()}
    for s in training:
        line = lines[f"{s.session_id} train"]
        rows = s.steps[s.steps["rank"] == s.steps["rank"].min()].sort_values("step")
        assert list(line.get_xdata()) == list((rows["step"] * rows["total_batch_size"]).astype(float))
        assert list(line.get_ydata()) == pytest.approx(list(rows["loss"]))
    assert ax.get_xlabel().startswith("samples seen")
    # bandwidth against size: the nccl-tests sweep and the 2-rank run's syncs
    (ax,) = [a for a in figs["bandwidth_vs_size.png"].axes if a.collections]
    points = sum(len(c.get_offsets()) for c in ax.collections)
    nccl = next(s for s in sessions if s.session_id.startswith("all_reduce"))

    def positive(comm):  # a log-log plot: sizes whose median bandwidth is 0 (8 B at 0.00 GB/s) cannot be drawn
        bw = comm["busbw_mb_s"].fillna(comm["algbw_mb_s"])
        med = bw.groupby([comm["op"], comm["size_bytes"]]).median()
        return int((med > 0).sum())

    multi = [s for s in training if s.meta["world_size"] == 2]
    assert points == positive(nccl.comm) + sum(positive(s.comm) for s in multi) and positive(nccl.comm) > 10
    # GPU utilization: one line per GPU of each capture
    (ax,) = figs["gpu_utilization.png"].axes
    gpus = sum(s.gpu.groupby(["host", "gpu"], dropna=False).ngroups for s in sessions if not s.gpu.empty)
    assert len([line for line in ax.get_lines() if line.get_label()[:1] != "_"]) == gpus
    # the step breakdown: one panel per session with timed phases, a stacked bar of 5 parts per rank
    phased = [s for s in training if not s.phases.empty]
    panels = [a for a in figs["step_breakdown.png"].axes if a.containers]
    assert len(panels) == len(phased) == 1 and [len(c) for c in panels[0].containers] == [2] * 5
    # the comparison's bars: one per training run, per panel (captures are not training runs)
    bars = [sum(len(c) for c in a.containers) for a in figs["training_comparison.png"].axes[:3]]
    assert bars == [len(training)] * 3


def test_loss_plot_draws_eval_loss():
    from logkit.analysis.analyze import analyze
    sessions = load_sessions(SAMPLES / "pipeline_sessions")
    (ax,) = figures(analyze(sessions), ["loss_curves.png"])["loss_curves.png"].axes
    labels = {line.get_label(): line for line in ax.get_lines()}
    for s in sessions:
        ev = s.evals[s.evals["name"] == "eval_loss"].sort_values("step")
        line = labels[f"{s.session_id} eval"]
        assert list(line.get_ydata()) == pytest.approx(list(ev["value"]))


def test_each_comparison_is_drawn_against_its_own_groups_ideal():
    # two comparison groups with baselines of different sizes: 2 -> 4 ranks (ideal 2), 1 -> 3 (ideal 3)
    sessions = load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs")
    ranks = {"a2": 2, "b4": 4, "c1": 1, "d3": 3}
    summaries = [SessionSummary(k, world_size=v, duration_s=10.0, steps_per_second=1.0, final_loss=1.0)
                 for k, v in ranks.items()]
    analysis = _with_scaling(sessions, summaries, [_comparison("a2", "b4", 1.8, 0.9, 1.9, (1.85, 1.95), 2.0),
                                                   _comparison("c1", "d3", 2.4, 0.8, 2.5, (2.3, 2.7), 3.0)])
    ax = figures(analysis)["training_comparison.png"].axes[3]
    dashed = [line.get_ydata()[0] for line in ax.get_lines() if line.get_linestyle() == "--"]
    assert dashed == [2.0, 3.0]
    assert ax.get_ylim()[1] >= 1.2 * 3.0  # room above the tallest of bars, intervals and ideals


def test_a_warm_up_max_does_not_flatten_the_step_time_boxes():
    (s,) = [x for x in load_sessions(SAMPLES / "gpu" / "qlora_single_gpu") if not x.steps.empty]
    times = s.steps["step_time_s"]
    assert times.max() > 10 * times.quantile(0.95)  # the real H100 run: its first step took seconds
    (ax,) = [a for a in figures(analyze([s]), ["step_time_per_rank.png"])["step_time_per_rank.png"].axes]
    assert ax.get_ylim()[1] == pytest.approx(1.5 * times.quantile(0.95))
    assert [t.get_text() for t in ax.texts] == [f"max {times.max():.3g} s ↑"]


def test_loss_curves_over_two_decades_get_a_log_axis():
    def loss_axis(folder):
        sessions = [s for s in load_sessions(folder) if not s.steps.empty]
        (ax,) = figures(analyze(sessions), ["loss_curves.png"])["loss_curves.png"].axes
        return ax, sessions

    ax, sessions = loss_axis(SAMPLES / "gpu" / "loop_monitored")  # a real regression: 54 down to 0.005
    losses = sessions[0].steps["loss"]
    assert losses.max() / losses.min() > 100 and ax.get_yscale() == "log"
    ax, sessions = loss_axis(SAMPLES / "qlora_tiny_cpu" / "logs")
    assert all(s.steps["loss"].max() / s.steps["loss"].min() < 100 for s in sessions)
    assert ax.get_yscale() == "linear"


def test_throughput_of_runs_two_decades_apart_gets_a_log_axis():
    sessions = [s for s in load_sessions(SAMPLES / "gpu") if not s.steps.empty]  # QLoRA ~130/s, the MLP ~19k/s
    rates = [float((s.steps["total_batch_size"] / s.steps["step_time_s"]).median()) for s in sessions]
    assert max(rates) / min(rates) > 100
    (ax,) = figures(analyze(sessions), ["throughput.png"])["throughput.png"].axes
    assert ax.get_yscale() == "log" and ax.get_ylabel() == "samples/s (log scale)"
