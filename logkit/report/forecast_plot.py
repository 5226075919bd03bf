"""The forecast's plot (HTML report): per group, samples/s against ranks, the runs measured (dots), the
forecast (line and squares) with its 80% band, and linear scaling from the baseline (dashed)."""

from __future__ import annotations

import base64

from logkit.analysis.results import Analysis

CAPTION = ("dots: the runs measured (steady state where logged); squares: the forecast, the band its 80% interval; "
           "dashed: linear scaling from the baseline")


def _measured(analysis: Analysis, group: str) -> list[tuple[int, float]]:
    g = next((g for g in analysis.scaling.groups if g.label == group), None)
    points = []
    for sid in g.members if g is not None else ():
        s = analysis.scaling.session_summary(sid)
        rate = (s.steady_samples_per_second or s.samples_per_second) if s is not None else None
        if rate:
            points.append((s.world_size or 1, rate))
    return sorted(points)


def forecast_figure(analysis: Analysis):
    """The figure, or None when no group has a forecast."""
    rows = [r for r in analysis.rows("forecast") if r.samples_per_s is not None]
    groups = list(dict.fromkeys(r.group for r in rows))
    if not groups:
        return None
    from matplotlib.ticker import MaxNLocator

    from logkit.report.plots import _caption, _mpl

    Figure, sns = _mpl()
    fig = Figure(figsize=(10, 3.6 * len(groups)), layout="constrained")
    axes = fig.subplots(len(groups), 1, squeeze=False)[:, 0]
    for ax, group in zip(axes, groups, strict=True):
        measured = _measured(analysis, group)
        mine = sorted((r for r in rows if r.group == group), key=lambda r: r.world_size)
        start = [measured[-1]] if measured else []
        xs = [x for x, _ in start] + [r.world_size for r in mine]
        ax.fill_between(xs, [y for _, y in start] + [r.lo for r in mine], [y for _, y in start] + [r.hi for r in mine],
                        alpha=0.25, color="#0969da", label="forecast, 80% interval")
        ax.plot(xs, [y for _, y in start] + [r.samples_per_s for r in mine], "s-", color="#0969da", label="forecast")
        if measured:
            ax.plot([x for x, _ in measured], [y for _, y in measured], "o", color="#1a7f37", markersize=8,
                    label="measured")
            base_n, base_rate = measured[0]
            top = max(xs + [x for x, _ in measured])
            ax.plot([base_n, top], [base_rate, base_rate * top / base_n], "--", color="#57606a", linewidth=1,
                    label="linear scaling")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel("ranks")
        ax.set_ylabel("samples/s")
        ax.set_title(group, fontsize=10)
        ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("Forecast from the runs measured")
    _caption(fig, CAPTION)
    return fig


def forecast_png(analysis: Analysis) -> str | None:
    """The figure as base64 PNG for the HTML report, or None."""
    fig = forecast_figure(analysis)
    if fig is None:
        return None
    from logkit.report.plots import _png

    return base64.b64encode(_png(fig)).decode("ascii")
