"""PNG plots (matplotlib Agg + seaborn) of sessions and their analysis.

    >>> from logkit.report.plots import write_plots                  # doctest: +SKIP
    >>> write_plots(sessions, analysis, "plots")                     # doctest: +SKIP
    [PosixPath('plots/training_comparison.png'), ...]

``PLOTS`` names every file and what it shows. Plots read Session frames (``steps``,
``gpu``, ``comm``) and the analysis' view; they compute no figure of their own beyond
thinning long lines for drawing: a line of more than ``MAX_POINTS`` points is drawn as the
means of consecutive equal-sized bins (its caption says so). A plot without data is still
written, saying what is missing, so that a caller always finds every file.
matplotlib and seaborn are imported when a plot is made, never at ``import logkit``.
"""

from __future__ import annotations

import io
import math
import sys
from pathlib import Path

from logkit.report.view import analysis_view

__all__ = ["PLOTS", "MAX_POINTS", "EMPTY_GID", "figures", "render_plots", "write_plots", "thin"]

MAX_POINTS = 5000
DPI = 100
MAX_PANELS = 6  # step_time_per_rank: one panel per session, at most this many
EMPTY_GID = "logkit-no-data"  # the gid of an axes that shows the "no data" placeholder

PLOTS: dict[str, str] = {
    "training_comparison.png": "duration, steps/s, final loss per session and speedup per comparison (seed 002)",
    "loss_curves.png": "training loss (lines) and eval loss (dashed, markers) of each training run against samples "
                       "seen (step x global batch) when every run's batch is known, else against step",
    "throughput.png": "samples/s against step (total_batch_size / step_time_s), lowest rank of each session",
    "gpu_utilization.png": "GPU utilization (%) against time since the session's start, per GPU",
    "bandwidth_vs_size.png": "bus bandwidth against message size per op (median per size)",
    "step_time_per_rank.png": "step time distribution per rank (box: p25-p75, line: p50, whiskers: p5-p95, dot: max)",
}


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


def _lowest_rank(frame):
    if frame.empty or "rank" not in frame or frame["rank"].dropna().empty:
        return frame
    return frame[frame["rank"] == frame["rank"].min()]


def _empty(ax, text: str) -> None:
    ax.set_gid(EMPTY_GID)
    ax.text(0.5, 0.5, text, ha="center", va="center", transform=ax.transAxes, fontsize=11, color="#57606a")
    ax.set_xticks([])
    ax.set_yticks([])


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    return buf.getvalue()


def _labels(sessions) -> dict[str, str]:
    return {s.session_id: str(s.session_id) for s in sessions}


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


def _ideal(by_id: dict, baseline, candidate) -> float | None:
    """The rank ratio of a comparison (its ideal speedup), when both runs logged their ranks."""
    base, cand = by_id.get(baseline, {}), by_id.get(candidate, {})
    if base.get("world_size") and cand.get("world_size"):
        return cand["world_size"] / base["world_size"]
    return None


def _training_comparison(sessions, view, Figure, sns):
    import pandas as pd

    training = [r for r in view["scaling"]["sessions"] or [] if r.get("kind") in (None, "training")]
    fig = Figure(figsize=(11, 7.5 if len(training) <= 6 else 9), layout="constrained")
    axes = fig.subplots(2, 2).ravel()
    rows = pd.DataFrame(training, columns=["session_id", "world_size", "duration_s", "steps_per_second",
                                           "final_loss"])
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
    comps = pd.DataFrame(view["scaling"]["comparisons"] or [], columns=[
        "baseline", "candidate", "speedup", "scaling_efficiency", "steady_speedup", "speedup_ci"])
    comps = comps.dropna(subset=["speedup"])
    if comps.empty:
        _empty(ax, "no comparison (one session, or throughput missing)")
    else:
        by_id = {s["session_id"]: s for s in view["scaling"]["sessions"]}
        ideals = [_ideal(by_id, c.baseline, c.candidate) for c in comps.itertuples()]  # each group's own baseline
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


def _line_plot(sessions, frame_name: str, x: str, y_fn, title: str, ylabel: str, xlabel: str, caption: str,
               Figure, sns, empty_text: str):
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.subplots()
    palette = sns.color_palette(n_colors=max(len(sessions), 1))
    thinned = False
    drawn = 0
    for i, s in enumerate(sessions):
        frame = _lowest_rank(getattr(s, frame_name))
        if frame.empty:
            continue
        part = frame.assign(_y=y_fn(frame))
        if part["_y"].notna().sum() == 0:
            continue
        pts = thin(part, x, "_y")
        thinned |= len(pts) < part["_y"].notna().sum()
        ax.plot(pts[x].to_numpy(), pts["_y"].to_numpy(), label=str(s.session_id), color=palette[i % len(palette)],
                lw=1.2, marker="o" if len(pts) < 40 else None, ms=3)
        drawn += 1
    log_y = False
    if not drawn:
        _empty(ax, empty_text)
    else:
        ax.legend(fontsize=8, loc="best")
        ax.set_xlabel(xlabel)
        ax.set_ylabel(ylabel)
        log_y = _log_y_if_wide(ax, ylabel)
    ax.set_title(title)
    _caption(fig, caption + (_LOG_NOTE if log_y else "")
             + (f"; lines of more than {MAX_POINTS} points drawn as bin means" if thinned else ""))
    return fig


def _loss_curves(sessions, view, Figure, sns):
    import numpy as np
    import pandas as pd

    from logkit.analysis.health import loss_curve

    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.subplots()
    batch = {r["session_id"]: r.get("total_batch_size") for r in view["scaling"]["sessions"] or []}
    kinds = {r["session_id"]: r.get("kind") for r in view["scaling"]["sessions"] or []}
    runs = [s for s in sessions if kinds.get(s.session_id) in (None, "training")]
    curves = {s.session_id: loss_curve(s, batch.get(s.session_id)) for s in runs}
    curves = {k: v for k, v in curves.items() if len(v[1])}
    by_samples = bool(curves) and all(basis == "samples seen" for _, _, basis in curves.values())
    palette = sns.color_palette(n_colors=max(len(runs), 1))
    thinned = drawn = evals = 0
    for i, s in enumerate(runs):
        color = palette[i % len(palette)]
        b = batch.get(s.session_id) or s.meta.get("total_batch_size")
        if s.session_id in curves:
            x, loss, basis = curves[s.session_id]
            if not by_samples and basis == "samples seen":  # back to steps, as every line must share its axis
                rows = s.steps[s.steps["rank"] == s.steps["rank"].min()] if s.steps["rank"].notna().any() \
                    else s.steps
                rows = rows[rows["step"].notna() & rows["loss"].notna()].sort_values("step", kind="stable")
                x, loss = rows["step"].to_numpy(dtype="float64"), rows["loss"].to_numpy(dtype="float64")
                ok = np.isfinite(loss)
                x, loss = x[ok], loss[ok]
            pts = thin(pd.DataFrame({"x": x, "y": loss}), "x", "y")
            thinned |= len(pts) < len(x)
            ax.plot(pts["x"].to_numpy(), pts["y"].to_numpy(), label=f"{s.session_id} train", color=color, lw=1.2,
                    marker="o" if len(pts) < 40 else None, ms=3)
            drawn += 1
        ev = s.evals
        if not ev.empty:
            ev = ev[(ev["name"] == "eval_loss") & ev["step"].notna() & ev["value"].notna()]
            if len(ev):
                ex = ev["step"].to_numpy(dtype="float64") * (float(b) if by_samples and b else 1.0)
                if by_samples and not b:
                    continue
                order = np.argsort(ex, kind="stable")
                ax.plot(ex[order], ev["value"].to_numpy(dtype="float64")[order], ls="--", marker="s", ms=4,
                        color=color, lw=1.0, label=f"{s.session_id} eval")
                evals += 1
    log_y = False
    if not drawn and not evals:
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


def _throughput_values(frame):
    derived = frame["total_batch_size"].astype("float64") / frame["step_time_s"].where(frame["step_time_s"] > 0)
    return frame["samples_per_s"].astype("float64").fillna(derived)


def _throughput(sessions, view, Figure, sns):
    return _line_plot(sessions, "steps", "step", _throughput_values, "Training throughput", "samples/s", "step",
                      "samples/s per optimizer step: logged samples_per_s, else total_batch_size / step_time_s "
                      "(lowest rank)", Figure, sns, "no step times logged")


def _gpu_utilization(sessions, view, Figure, sns):
    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.subplots()
    series = []
    for s in sessions:
        g = s.gpu
        if g.empty or g["utilization_pct"].notna().sum() == 0:
            continue
        hosts = g["host"].dropna().unique()
        for (host, gpu), part in g.groupby(["host", "gpu"], dropna=False, sort=True):
            label = f"{s.session_id} " + (f"{host} " if len(hosts) > 1 and host else "") + f"GPU {gpu}"
            series.append((label, part))
    palette = sns.color_palette(n_colors=max(len(series), 1))
    thinned = False
    for i, (label, part) in enumerate(series):
        pts = thin(part.sort_values("time_s", kind="stable"), "time_s", "utilization_pct")
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


def _bandwidth_vs_size(sessions, view, Figure, sns):
    import pandas as pd

    fig = Figure(figsize=(10, 5.5), layout="constrained")
    ax = fig.subplots()
    parts = []
    for s in sessions:
        c = s.comm
        if c.empty:
            continue
        bw = c["busbw_mb_s"].astype("float64").fillna(c["algbw_mb_s"].astype("float64"))
        part = pd.DataFrame({"op": c["op"].astype("object").fillna("?").astype(str),
                             "size_mb": c["size_bytes"].astype("float64") / 1e6, "bw": bw})
        part = part.dropna()
        part = part[(part["size_mb"] > 0) & (part["bw"] > 0)]
        if part.empty:
            continue
        agg = part.groupby(["op", "size_mb"], sort=True)["bw"].agg(["median", "size"]).reset_index()
        agg["series"] = f"{s.session_id}: " + agg["op"]
        parts.append(agg)
    if not parts:
        _empty(ax, "no communication records with sizes and bandwidths")
    else:
        data = pd.concat(parts, ignore_index=True)
        sns.scatterplot(data=data, x="size_mb", y="median", hue="series", size="size", sizes=(20, 200), ax=ax,
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


def _step_time_per_rank(sessions, view, Figure, sns):
    with_steps = [s for s in sessions if not s.steps.empty and s.steps["step_time_s"].notna().any()]
    shown = with_steps[:MAX_PANELS]
    n = max(len(shown), 1)
    fig = Figure(figsize=(min(max(5 * n, 10), 16), 5), layout="constrained")
    axes = fig.subplots(1, n, squeeze=False)[0]
    palette = sns.color_palette()
    for ax, s in zip(axes, shown, strict=False):
        st = s.steps[["rank", "step_time_s"]].dropna()
        st = st[st["step_time_s"] > 0]
        q = st.groupby("rank", sort=True)["step_time_s"].quantile([0.05, 0.25, 0.5, 0.75, 0.95]).unstack()
        mx = st.groupby("rank", sort=True)["step_time_s"].max()
        stats = [{"label": str(int(r)), "whislo": row[0.05], "q1": row[0.25], "med": row[0.5], "q3": row[0.75],
                  "whishi": row[0.95], "fliers": []} for r, row in q.iterrows()]
        ax.bxp(stats, showfliers=False, patch_artist=True,
               boxprops={"facecolor": palette[0], "alpha": 0.5}, medianprops={"color": "black"})
        # a max far above the spread (the first step: compilation, allocator warm-up) would flatten
        # the boxes: the axis stops at 1.5x the highest p95 and such a max is written at the top
        top = 1.5 * float(q[0.95].max())
        inside = mx <= top
        ax.scatter([i + 1 for i, ok in enumerate(inside) if ok], mx[inside].to_numpy(), marker="o",
                   color=palette[3], s=14, zorder=3, label="max")
        for i, (ok, value) in enumerate(zip(inside, mx.to_numpy(), strict=True)):
            if not ok:
                ax.annotate(f"max {value:.3g} s ↑", (i + 1, top), xytext=(0, -2), textcoords="offset points",
                            ha="center", va="top", fontsize=8, color=palette[3])
        if top > 0:
            ax.set_ylim(0, top)  # step times are positive (filtered above)
        ax.set_title(str(s.session_id), fontsize=10)
        ax.set_xlabel("rank")
        ax.set_ylabel("step time (s)")
        if inside.any():
            ax.legend(fontsize=8, loc="upper left")
    if not shown:
        _empty(axes[0], "no step times logged")
    fig.suptitle("Step time per rank")
    more = len(with_steps) - len(shown)
    _caption(fig, "box: p25-p75 of step_time_s, line: p50, whiskers: p5-p95, dot: max (written at the top when "
                  "above 1.5x the p95)"
             + (f"; {more} more session(s) not shown" if more > 0 else ""))
    return fig


_MAKERS = {
    "training_comparison.png": _training_comparison,
    "loss_curves.png": _loss_curves,
    "throughput.png": _throughput,
    "gpu_utilization.png": _gpu_utilization,
    "bandwidth_vs_size.png": _bandwidth_vs_size,
    "step_time_per_rank.png": _step_time_per_rank,
}


def figures(sessions, analysis, names=None) -> dict:
    """matplotlib ``Figure`` of each plot in ``names`` (default: every one of ``PLOTS``), in that order;
    an axes without data has the gid ``EMPTY_GID``."""
    Figure, sns = _mpl()
    view = analysis_view(analysis)
    out = {}
    with sns.axes_style("whitegrid"):
        for name in names or PLOTS:
            out[name] = _MAKERS[name](list(sessions), view, Figure, sns)
    return out


def render_plots(sessions, analysis, names=None) -> dict[str, bytes]:
    """PNG bytes of each plot in ``names`` (default: every one of ``PLOTS``), in that order."""
    _, sns = _mpl()
    with sns.axes_style("whitegrid"):
        return {name: _png(fig) for name, fig in figures(sessions, analysis, names).items()}


def write_plots(sessions, analysis, out_dir, names=None) -> list[Path]:
    """Write the plots as PNG files into ``out_dir`` (created); returns their paths."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in render_plots(sessions, analysis, names).items():
        path = out_dir / name
        path.write_bytes(data)
        paths.append(path)
    return paths
