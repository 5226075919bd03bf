"""``--forecast``: per group, the sizes asked with samples/s, its 80% interval, step time, scaling
efficiency and the component that dominates; then the counterfactual in hours, GPU-hours and money."""

from __future__ import annotations

from logkit.analysis.results import Analysis
from logkit.report.console.common import RULE, definitions_footer
from logkit.report.format import fmt, pct

_KEYS = ["forecast", "forecast interval", "dominant", "no forecast", "counterfactual"]


def _rate(x) -> str:
    """samples/s: whole numbers from 100 up (4,030, not 4.03e+03), three significant digits below."""
    return fmt(x, ",.0f" if x is not None and x >= 100 else ".3g")


def _forecast_lines(analysis: Analysis) -> list[str]:
    rows = analysis.rows("forecast")
    if not rows:
        return ["  No group has runs at two world sizes: nothing to forecast from."]
    out, group = [], None
    for r in rows:
        if r.group != group:
            group = r.group
            out += ["", f"📈 {group} (measured at {r.measured_sizes or '?'} ranks"
                        + (f", {r.regime} regime)" if r.regime else ")")]
        if r.samples_per_s is None:
            out.append(f"  {fmt(r.world_size, 'd')} ranks: {r.basis}")
            continue
        out.append(f"  {fmt(r.world_size, 'd')} ranks: {_rate(r.samples_per_s)} samples/s "
                   f"(80%: {_rate(r.lo)} to {_rate(r.hi)}), step {fmt(r.step_s * 1e3, '.3g', ' ms')}, "
                   f"scaling efficiency {pct(r.scaling_efficiency, '.0f')}; {r.note}")
    basis = next((r.basis for r in rows if r.samples_per_s is not None), None)
    if basis:
        out += ["", f"  Basis: {basis}"]
    return out


def render_forecast(analysis: Analysis) -> str:
    """The forecast block (see module doc)."""
    out = ["FORECAST", RULE, *_forecast_lines(analysis)]
    said = analysis.rows("counterfactual")
    if said:
        out += ["", "⏱ Hours and GPU-hours (the run's samples at each rate):"]
        out += [f"  {r.sentence}" for r in said]
    out += definitions_footer(analysis, _KEYS)
    return "\n".join(out)
