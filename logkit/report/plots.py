"""PNG plots (matplotlib Agg + seaborn) of an analysis.

    >>> from logkit.report import write_plots                        # doctest: +SKIP
    >>> write_plots(analysis, "plots")                               # doctest: +SKIP
    [PosixPath('plots/training_comparison.png'), ...]

``PLOTS`` names every file and what it shows. Plots draw the analysis' results (its scaling
section, performance table and ``curves``); they compute no figure of their own beyond
thinning long lines for drawing: a line of more than ``MAX_POINTS`` points is drawn as the
means of consecutive equal-sized bins (its caption says so). A plot without data is still
written, saying what is missing, so that a caller always finds every file; the HTML report
shows that sentence instead of the empty chart (``report_plots``).
matplotlib and seaborn are imported when a plot is made, never at ``import logkit``.
"""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

from logkit.analysis.results import Analysis, plain
from logkit.schema.vocab import LossAxis

MAX_POINTS = 5000
DPI = 100
MAX_PANELS = 6  # step_time_per_rank: one panel per session, at most this many
EMPTY_GID = "logkit-no-data"  # the gid of an axes that shows the "no data" placeholder

PLOTS: dict[str, str] = {
    "training_comparison.png": "duration, steps/s, final loss per session and speedup per comparison",
    "loss_curves.png": "training loss (lines) and eval loss (dashed, markers) of each training run against samples "
                       "seen (step x global batch) when every run's batch is known, else against step",
    "throughput.png": "samples/s against step (total_batch_size / step_time_s), lowest rank of each session",
    "gpu_utilization.png": "GPU utilization (%) against time since the session's start, per GPU",
    "bandwidth_vs_size.png": "bus bandwidth against message size per op (median per size)",
    "step_time_per_rank.png": "step time distribution per rank (box: p25-p75, line: p50, whiskers: p5-p95, dot: max)",
    "step_breakdown.png": "where each rank's step goes (medians over the synced steps): data, forward/backward, "
                          "exposed gradient sync, waiting for the last rank, optimizer and host work",
}
# the step breakdown's parts: (column, label), stacked in this order
BREAKDOWN_PARTS = (("data_s", "data"), ("compute_s", "forward/backward"), ("comm_exposed_s", "exposed sync"),
                   ("wait_s", "waiting for the last rank"), ("other_s", "optimizer / host"))


def _mpl():
    """matplotlib's Figure and seaborn, on the Agg backend where pyplot is not in use yet."""
    import matplotlib

    if "matplotlib.pyplot" not in sys.modules:
        matplotlib.use("Agg")
    import seaborn as sns
    from matplotlib.figure import Figure

    return Figure, sns


def thin(frame, x: str, y: str, max_points: int = MAX_POINTS):
    """``frame[[x, y]]`` without missing values, as at most ``max_points`` bin means (in order)."""
    import numpy as np

    part = frame[[x, y]].astype("float64").dropna()
    n = len(part)
    if n <= max_points:
        return part
    k = math.ceil(n / max_points)
    return part.groupby(np.arange(n) // k, sort=True).mean()


def _empty(ax, text: str) -> None:
    ax.set_gid(EMPTY_GID)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#57606a")
    ax.set_xticks([])
    ax.set_yticks([])


def no_data(fig) -> str | None:
    """The sentence of a figure that draws nothing (every axes a "no data" placeholder), else None."""
    axes = fig.axes
    if not axes or any(ax.get_gid() != EMPTY_GID for ax in axes):
        return None
    return "; ".join(text.get_text() for ax in axes for text in ax.texts) or "no data"


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _caption(fig, text: str) -> None:
    # keep a strip at the bottom for the caption (the definition of what is drawn)
    fig.set_layout_engine("constrained", rect=(0, 0.045, 1, 0.955))
    fig.text(0.01, 0.008, text, fontsize=8, color="#57606a", ha="left", va="bottom", wrap=True)


def _session_ticks(ax, n: int) -> None:
    """Session ids under bars: slanted and anchored at their bar's end when there are many."""
    if n <= 4:
        ax.tick_params(axis="x", labelrotation=20)
        return
    ax.tick_params(axis="x", labelrotation=40, labelsize=8)
    for label in ax.get_xticklabels():
        label.set_horizontalalignment("right")
        label.set_rotation_mode("anchor")


def _headroom(ax, top: float) -> None:
    """Room above the tallest bar for its label (a value, or two lines of speedup and efficiency)."""
    if top == top and top > 0:
        ax.set_ylim(top=top * 1.25)


def _ideal(analysis: Analysis, c) -> float | None:
    """The rank ratio of a comparison (its ideal speedup), when both runs logged their ranks."""
    base, cand = analysis.scaling.session_summary(c.baseline), analysis.scaling.session_summary(c.candidate)
    return c.rank_ratio if base and cand and base.world_size and cand.world_size else None


def _training_comparison(analysis: Analysis, Figure, sns):
    import pandas as pd

    training = analysis.scaling.training
    fig = Figure(figsize=(11, 7.5 if len(training) <= 6 else 9), layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    rows = pd.DataFrame([(s.session_id, s.world_size, s.duration_s, s.steps_per_second, s.final_loss)
                         for s in training],
                        columns=["session_id", "world_size", "duration_s", "steps_per_second", "final_loss"])
    rows["ranks"] = rows["world_size"].fillna(1).astype(int).astype(str) + " rank(s)"
    panels = (("duration_s", "Training duration (s)"), ("steps_per_second", "Steps per second"),
              ("final_loss", "Final loss"))
    for ax, (col, title) in zip(axes, panels, strict=False):
        data = rows.dropna(subset=[col])
        if data.empty:
            _empty(ax, f"no {title.lower()} logged")
        else:
            sns.barplot(data=data, x="session_id", y=col, hue="ranks", ax=ax, dodge=False)
            for container in ax.containers:
                ax.bar_label(container, fmt="%.3g", fontsize=8)
            if col != "duration_s" and ax.get_legend() is not None:
                ax.get_legend().remove()  # one legend (the first panel's) is enough
            ax.set_xlabel("")
            ax.set_ylabel("")
            _session_ticks(ax, len(data))
            _headroom(ax, float(data[col].max()))
        ax.set_title(title)
    ax = axes[3]
    drawn = [c for c in analysis.scaling.comparisons if c.speedup is not None]
    comps = pd.DataFrame(plain([(c.baseline, c.candidate, c.speedup, c.scaling_efficiency,
                                 c.steady.speedup if c.steady else None, c.speedup_ci) for c in drawn]),
                         columns=["baseline", "candidate", "speedup", "scaling_efficiency", "steady_speedup",
                                  "speedup_ci"])
    if comps.empty:
        _empty(ax, "no comparison (one session, or throughput missing)")
    else:
        ideals = [_ideal(analysis, c) for c in drawn]  # each comparison against its own group's baseline
        sns.barplot(data=comps, x="candidate", y="speedup", ax=ax, color=sns.color_palette()[2])
        for i, c in enumerate(comps.itertuples()):
            ci, steady = c.speedup_ci, c.steady_speedup
            if isinstance(ci, list) and len(ci) == 2 and None not in ci and steady == steady and steady is not None:
                # the interval is the steady-state speedup's, so it is drawn around that point
                ax.errorbar(i, steady, yerr=[[max(steady - ci[0], 0)], [max(ci[1] - steady, 0)]], fmt="D",
                            color="black", capsize=4, markersize=4)
            eff = c.scaling_efficiency
            ax.annotate(f"{c.speedup:.2f}x" + (f"\n{eff * 100:.1f}% eff." if eff is not None and eff == eff else ""),
                        (i, c.speedup), ha="center", va="bottom", fontsize=8, xytext=(0, 3),
                        textcoords="offset points")
            if ideals[i] is not None:
                ax.plot([i - 0.4, i + 0.4], [ideals[i], ideals[i]], ls="--", color="#57606a", lw=1)
        ax.set_xlabel("")
        ax.set_ylabel("speedup (x)")
        _session_ticks(ax, len(comps))
        uppers = [c[1] for c in comps["speedup_ci"] if isinstance(c, list) and len(c) == 2 and c[1] is not None]
        _headroom(ax, max([float(comps["speedup"].max()), *uppers, *(v for v in ideals if v is not None)]))
    ax.set_title("Speedup vs baseline (dashed: ideal = rank ratio)")
    fig.suptitle("Training comparison")
    _caption(fig, "speedup = candidate samples/s / baseline samples/s; efficiency = speedup / rank ratio; "
                  "diamond and error bar: steady-state speedup and its bootstrap interval")
    return fig


def _log_y_if_wide(ax, ylabel: str) -> bool:
    """A log y axis when the positive values drawn span more than two decades (runs of different
    sizes or tasks, a first step far above the rest): a linear axis would flatten all curves but one."""
    import numpy as np

    lines = [line.get_ydata() for line in ax.get_lines() if len(line.get_ydata())]
    if not lines:
        return False
    ys = np.concatenate(lines).astype("float64")
    ys = ys[np.isfinite(ys)]
    if len(ys) and ys.min() > 0 and ys.max() / ys.min() > 100:
        ax.set_yscale("log")
        ax.set_ylabel(f"{ylabel} (log scale)")
        return True
    return False


_LOG_NOTE = "; log y: values span > 2 decades"


def _series_plot(frame, x: str, y: str, title: str, ylabel: str, xlabel: str, caption: str, Figure, sns,
                 empty_text: str, label_suffix: str = "", marker_under: int = 40):
    """One line per session of ``frame`` (session_id, x, y), thinned to ``MAX_POINTS``."""
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.subplots()
    ids = list(dict.fromkeys(frame["session_id"]))
    palette = sns.color_palette(n_colors=max(len(ids), 1))
    thinned = False
    for i, sid in enumerate(ids):
        part = frame[frame["session_id"] == sid]
        pts = thin(part, x, y)
        thinned |= len(pts) < len(part)
        ax.plot(pts[x].to_numpy(), pts[y].to_numpy(), label=f"{sid}{label_suffix}", color=palette[i % len(palette)],
                lw=1.2, marker="o" if len(pts) < marker_under else None, ms=3)
    log_y = False
    if not ids:
        _empty(ax, empty_text)
    else:
        ax.legend(fontsize=8, loc="best")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        log_y = _log_y_if_wide(ax, ylabel)
    ax.set_title(title)
    _caption(fig, caption + (_LOG_NOTE if log_y else "")
             + (f"; lines of more than {MAX_POINTS} points drawn as bin means" if thinned else ""))
    return fig, ax


def _loss_curves(analysis: Analysis, Figure, sns):
    curves = analysis.curves
    loss, eval_loss = curves.frame("loss"), curves.frame("eval_loss")
    by_samples = curves.loss_axis == LossAxis.SAMPLES_SEEN
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.subplots()
    ids = list(dict.fromkeys([*loss["session_id"], *eval_loss["session_id"]]))
    order = [s.session_id for s in analysis.scaling.training if s.session_id in ids]
    order += [i for i in ids if i not in order]
    palette = sns.color_palette(n_colors=max(len(analysis.scaling.training), 1))
    thinned = False
    for i, sid in enumerate(order):
        color = palette[i % len(palette)]
        part = loss[loss["session_id"] == sid]
        if len(part):
            pts = thin(part, "x", "loss")
            thinned |= len(pts) < len(part)
            ax.plot(pts["x"].to_numpy(), pts["loss"].to_numpy(), label=f"{sid} train", color=color, lw=1.2,
                    marker="o" if len(pts) < 40 else None, ms=3)
        ev = eval_loss[eval_loss["session_id"] == sid]
        if len(ev):
            ax.plot(ev["x"].to_numpy(), ev["value"].to_numpy(), ls="--", marker="s", ms=4, color=color, lw=1.0,
                    label=f"{sid} eval")
    log_y = False
    if not order:
        _empty(ax, "no loss logged")
    else:
        ax.legend(fontsize=8, loc="best")
        ax.set_xlabel("samples seen (step x global batch)" if by_samples else "step")
        ax.set_ylabel("loss")
        log_y = _log_y_if_wide(ax, "loss")
    ax.set_title("Training and eval loss")
    _caption(fig, "lowest rank's training loss; eval_loss of evaluation records; x = samples seen when every run's "
                  "global batch is known (runs with different batches line up), else step"
             + (_LOG_NOTE if log_y else "")
             + (f"; lines of more than {MAX_POINTS} points drawn as bin means" if thinned else ""))
    return fig


def _throughput(analysis: Analysis, Figure, sns):
    fig, _ = _series_plot(analysis.curves.frame("throughput"), "step", "samples_per_s", "Training throughput",
                          "samples/s", "step", "samples/s per optimizer step: logged samples_per_s, else "
                          "total_batch_size / step_time_s (lowest rank)", Figure, sns, "no step times logged")
    return fig


def _gpu_utilization(analysis: Analysis, Figure, sns):
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.subplots()
    data = analysis.curves.frame("gpu_utilization")
    series = []
    for sid in dict.fromkeys(data["session_id"]):
        g = data[data["session_id"] == sid]
        hosts = g["host"].dropna().unique()
        for (host, gpu), part in g.groupby(["host", "gpu"], dropna=False, sort=True):
            gpu_text = int(gpu) if gpu == gpu else gpu
            label = f"{sid} " + (f"{host} " if len(hosts) > 1 and host else "") + f"GPU {gpu_text}"
            series.append((label, part))
    palette = sns.color_palette(n_colors=max(len(series), 1))
    thinned = False
    for i, (label, part) in enumerate(series):
        pts = thin(part, "time_s", "utilization_pct")
        thinned |= len(pts) < len(part)
        ax.plot(pts["time_s"].to_numpy(), pts["utilization_pct"].to_numpy(), label=label,
                color=palette[i % len(palette)], lw=1.1)
    if not series:
        _empty(ax, "no GPU snapshots in these sessions (CPU runs, or GPU sampling off)")
    else:
        ax.set_ylim(-2, 102)
        ax.set_xlabel("time since the session's start (s)")
        ax.set_ylabel("utilization (%)")
        ax.legend(fontsize=8, loc="best", ncol=2 if len(series) > 8 else 1)
    ax.set_title("GPU utilization over time")
    _caption(fig, "utilization_pct of each gpu_snapshot device (nvidia-smi's utilization.gpu)"
             + (f"; lines of more than {MAX_POINTS} points drawn as bin means" if thinned else ""))
    return fig


def _bandwidth_vs_size(analysis: Analysis, Figure, sns):
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.subplots()
    data = analysis.curves.frame("bandwidth")
    if data.empty:
        _empty(ax, "no communication records with sizes and bandwidths")
    else:
        data = data.assign(series=data["session_id"].astype(str) + ": " + data["op"].astype(str))
        sns.scatterplot(data=data, x="size_mb", y="busbw_mb_s", hue="series", size="records", sizes=(20, 200), ax=ax,
                        alpha=0.8)
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("message size (MB, 10^6 bytes)")
        ax.set_ylabel("bus bandwidth (MB/s)")
        ax.legend(fontsize=7, loc="best")
    ax.set_title("Bandwidth against message size")
    _caption(fig, "busbw (algbw where busbw is missing) per op and size: median over the records of that size; "
                  "dot size: number of records")
    return fig


def _step_time_per_rank(analysis: Analysis, Figure, sns):
    perf = analysis.frame("performance")
    ids = list(dict.fromkeys(perf["session_id"]))
    shown = ids[:MAX_PANELS]
    n = max(len(shown), 1)
    fig = Figure(figsize=(min(max(5 * n, 10), 16), 5), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    palette = sns.color_palette()
    for ax, sid in zip(axes, shown, strict=False):
        q = perf[perf["session_id"] == sid].sort_values("rank")
        stats = [{"label": str(int(r.rank)), "whislo": r.step_p5_s, "q1": r.step_p25_s, "med": r.step_p50_s,
                  "q3": r.step_p75_s, "whishi": r.step_p95_s, "fliers": []} for r in q.itertuples()]
        ax.bxp(stats, showfliers=False, patch_artist=True,
               boxprops={"facecolor": palette[0], "alpha": 0.5}, medianprops={"color": "black"})
        # a max far above the spread (the first step: compilation, allocator warm-up) would flatten
        # the boxes: the axis stops at 1.5x the highest p95 and such a max is written at the top
        top = 1.5 * float(q["step_p95_s"].max())
        mx = q["step_max_s"].to_numpy(dtype="float64")
        inside = mx <= top
        ax.scatter([i + 1 for i, ok in enumerate(inside) if ok], mx[inside], marker="o", color=palette[3], s=14,
                   zorder=3, label="max")
        for i, (ok, value) in enumerate(zip(inside, mx, strict=True)):
            if not ok:
                ax.annotate(f"max {value:.3g} s ↑", (i + 1, top), xytext=(0, -2), textcoords="offset points",
                            ha="center", va="top", fontsize=8, color=palette[3])
        if top > 0:
            ax.set_ylim(0, top)  # step times are positive
        ax.set_title(str(sid), fontsize=10)
        ax.set_xlabel("rank")
        ax.set_ylabel("step time (s)")
        if inside.any():
            ax.legend(fontsize=8, loc="upper left")
    if not shown:
        _empty(axes[0], "no step times logged")
    fig.suptitle("Step time per rank")
    more = len(ids) - len(shown)
    _caption(fig, "box: p25-p75 of step_time_s, line: p50, whiskers: p5-p95, dot: max (written at the top when "
                  "above 1.5x the p95)"
             + (f"; {more} more session(s) not shown" if more > 0 else ""))
    return fig


def _step_breakdown(analysis: Analysis, Figure, sns):
    frame = analysis.frame("step_breakdown")
    ids = list(dict.fromkeys(frame["session_id"]))[:MAX_PANELS]
    n = max(len(ids), 1)
    fig = Figure(figsize=(10, max(4.0, 1.2 + 1.6 * n)), layout="constrained")
    axes = fig.subplots(n, 1, squeeze=False)[:, 0]
    colors = sns.color_palette("colorblind", len(BREAKDOWN_PARTS))
    for ax, sid in zip(axes, ids, strict=False):
        rows = frame[frame["session_id"] == sid].sort_values("rank")
        labels = [f"rank {int(r)}" for r in rows["rank"]]
        left = [0.0] * len(rows)
        for (col, label), color in zip(BREAKDOWN_PARTS, colors, strict=True):
            ms = [0.0 if v != v else v * 1e3 for v in rows[col].astype("float64")]
            ax.barh(labels, ms, left=left, color=color, label=label)
            left = [a + b for a, b in zip(left, ms, strict=True)]
        ax.invert_yaxis()
        ax.set_title(str(sid), fontsize=10)
        ax.set_xlabel("ms per step (median)")
    if ids:
        axes[0].legend(fontsize=8, loc="lower right", ncols=len(BREAKDOWN_PARTS))
    else:
        _empty(axes[0], "no per-step phases logged (multi-rank DDP runs with gradient sync timed)")
    fig.suptitle("Where each rank's step goes")
    _caption(fig, "medians over the steps every rank synchronised; a rank's wait is the time its last gradient "
                  "all-reduce spent waiting for the last rank to arrive")
    return fig


_MAKERS = {
    "training_comparison.png": _training_comparison,
    "loss_curves.png": _loss_curves,
    "throughput.png": _throughput,
    "gpu_utilization.png": _gpu_utilization,
    "bandwidth_vs_size.png": _bandwidth_vs_size,
    "step_time_per_rank.png": _step_time_per_rank,
    "step_breakdown.png": _step_breakdown,
}


def figures(analysis: Analysis, names=None) -> dict:
    """matplotlib ``Figure`` of each plot in ``names`` (default: every one of ``PLOTS``), in that order;
    an axes without data has the gid ``EMPTY_GID``."""
    Figure, sns = _mpl()
    out = {}
    with sns.axes_style("whitegrid"):
        for name in names or PLOTS:
            out[name] = _MAKERS[name](analysis, Figure, sns)
    return out


def render_plots(analysis: Analysis, names=None) -> dict[str, bytes]:
    """PNG bytes of each plot in ``names`` (default: every one of ``PLOTS``), in that order."""
    _, sns = _mpl()
    with sns.axes_style("whitegrid"):
        return {name: _png(fig) for name, fig in figures(analysis, names).items()}


def report_plots(analysis: Analysis, names=None) -> tuple[dict[str, bytes], dict[str, str]]:
    """The plots in ``names`` (default: every one of ``PLOTS``) as the HTML report shows them: the PNG
    bytes of each one that draws something, and the "no data" sentence of each one that draws nothing."""
    _, sns = _mpl()
    images, missing = {}, {}
    with sns.axes_style("whitegrid"):
        for name, fig in figures(analysis, names).items():
            text = no_data(fig)
            if text is None:
                images[name] = _png(fig)
            else:
                missing[name] = text
    return images, missing


def write_plots(analysis: Analysis, out_dir, names=None) -> list[Path]:
    """Write the plots as PNG files into ``out_dir`` (created); returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in render_plots(analysis, names).items():
        path = out_dir / name
        path.write_bytes(data)
        paths.append(path)
    return paths
