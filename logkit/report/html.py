"""Self-contained HTML report (jinja2, autoescaped, inline CSS, plots as base64 PNG, no network).

    >>> from logkit.report import write_html                            # doctest: +SKIP
    >>> write_html(analyze(sessions), "report.html")                    # doctest: +SKIP

Sections: overview, comparison, communication, performance and stragglers, GPUs, training
curves, where the hours went (the ledger: a stacked bar per session), diagnosis, parse diagnostics (``logkit/templates/report.html.j2`` and its includes
under ``report/``). Every value from the logs is escaped by jinja2's autoescape: a
``<script>`` in a log line or a session id shows as text.

Made to be read at a laptop's width (1280 px): each table shows the columns a reader looks for
first and folds the rest into a "More columns" table (``<details>``); a column head carries its
figure's definition as a tooltip, and each section's definitions are folded; a plot with
nothing to draw is a sentence, not an empty chart; the link peaks shown are those of the links
the run's sessions were judged against (``Analysis.run_links``), the reference table folded.
"""

from __future__ import annotations

import base64
import functools
import re
from datetime import datetime, timezone
from pathlib import Path

from logkit.analysis.results import Analysis
from logkit.analysis.results.frames import ROWS
from logkit.report.format import LEDGER_LABELS, fmt
from logkit.schema.vocab import Status

TEMPLATE = "report.html.j2"
MAX_DIAGNOSTICS = 1000  # rows of the parse-diagnostics table; the total is always stated
LONG_WORD = 24  # a part of a session id longer than this may wrap after its "_" and "-"
_JOINT = re.compile(r"([_-])")
_TABLES = ("communication", "nccl_tests", "communication_peaks", "run_links", "performance", "stragglers",
           "step_breakdown", "gpus")


def breakable(text):
    """``text`` escaped, with a line break allowed after each "/", and after each "_" or "-" of a part longer
    than ``LONG_WORD`` characters: a session id that is a path, or a long name, wraps there instead of
    widening its column (``training_20261123_074804`` stays whole)."""
    from markupsafe import Markup, escape

    parts = [escape(part) for part in str(text).split("/")]
    parts = [Markup(_JOINT.sub(r"\1<wbr>", str(part))) if len(part) > LONG_WORD else part for part in parts]
    return Markup("/<wbr>").join(parts)


@functools.lru_cache(maxsize=1)
def _environment():
    """The templates' environment, made once (its templates are compiled once)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("logkit", "templates"),  # importlib.resources: works from a wheel too
        autoescape=True,  # log text is untrusted: a "<script>" in a message must stay text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    env.filters["breakable"] = breakable
    env.globals["Status"] = Status  # the run statuses, as the schema spells them
    return env


def render_html(analysis: Analysis, title: str = "logkit report", plots: bool = True) -> str:
    """The report of ``analysis`` as one HTML page (``plots=False``: tables only)."""
    from logkit import __version__
    from logkit.report.forecast_plot import CAPTION as FORECAST_CAPTION
    from logkit.report.forecast_plot import forecast_png
    from logkit.report.plots import PLOTS, report_plots

    tables = {name: analysis.rows(name) for name in _TABLES}  # typed rows: a renamed column raises
    pngs, no_plot = report_plots(analysis) if plots else ({}, {})
    images = {name: base64.b64encode(data).decode("ascii") for name, data in pngs.items()}
    captions = dict(PLOTS)
    if plots and (forecast := forecast_png(analysis)) is not None:  # the forecast section's plot (not a --plot file)
        images["forecast.png"], captions["forecast.png"] = forecast, FORECAST_CAPTION
    return _environment().get_template(TEMPLATE).render(
        title=title, a=analysis, t=tables, definitions=analysis.definitions, plots=images, plot_captions=captions,
        no_plot=no_plot,
        stragglers={(r.session_id, r.rank): r for r in tables["stragglers"]}, no_straggler=ROWS["stragglers"](),
        diagnostics=analysis.rows("diagnostics", head=MAX_DIAGNOSTICS), diagnostics_total=len(analysis.diagnostics),
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"), version=__version__,
        ledger_labels=LEDGER_LABELS,
    )


def write_html(analysis: Analysis, path: str | Path, title: str = "logkit report", plots: bool = True) -> Path:
    """Write the page to ``path`` (parent folders created); returns the path."""
    path = Path(path)
    html = render_html(analysis, title=title, plots=plots)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
