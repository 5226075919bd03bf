"""Self-contained HTML report (jinja2, autoescaped, inline CSS, plots as base64 PNG, no network).

    >>> from logkit.report.html import write_html                       # doctest: +SKIP
    >>> write_html(analyze(sessions), "report.html", sessions=sessions)  # doctest: +SKIP

Sections: overview, comparison, communication, performance and stragglers, GPUs, training
curves, diagnosis, parse diagnostics (``templates/report.html.j2`` and its includes under
``templates/report/``). Every value from the logs is escaped by jinja2's autoescape: a
``<script>`` in a log line or a session id shows as text.
"""

from __future__ import annotations

import base64
from datetime import datetime, timezone
from pathlib import Path

import logkit
from logkit.report.console import fmt
from logkit.report.view import analysis_view, plain

__all__ = ["TEMPLATE", "MAX_DIAGNOSTICS", "template_dir", "render_html", "write_html"]

TEMPLATE = "report.html.j2"
MAX_DIAGNOSTICS = 1000  # rows of the parse-diagnostics table; the total is always stated


def template_dir() -> Path:
    """Where the templates are: inside the package (an installed wheel), else the repository's top level."""
    here = Path(logkit.__file__).resolve().parent
    for candidate in (here / "templates", here.parent / "templates"):
        if (candidate / TEMPLATE).is_file():
            return candidate
    raise FileNotFoundError(f"{TEMPLATE} is neither in {here / 'templates'} nor in {here.parent / 'templates'}")


def _diagnostics(analysis, sessions) -> tuple[list[dict], int]:
    """The parse diagnostics of the sessions (or of a ``ComparisonReport``), the first
    ``MAX_DIAGNOSTICS`` of them, and their total."""
    rows: list[dict] = []
    total = 0
    if sessions is not None:
        for s in sessions:
            frame = s.diagnostics
            total += len(frame)
            room = MAX_DIAGNOSTICS - len(rows)
            if room > 0 and len(frame):
                for r in frame.head(room).to_dict("records"):
                    rows.append({**plain(r), "session_id": s.session_id})
        return rows, total
    old = getattr(analysis, "diagnostics", None)
    if isinstance(old, list):
        return [plain(d) for d in old[:MAX_DIAGNOSTICS]], len(old)
    return rows, total


def render_html(analysis, sessions=None, title: str = "logkit report", plots: bool = True) -> str:
    """The report as one HTML page.

    ``analysis``: an ``Analysis`` (or its dict, or a ``ComparisonReport``); ``sessions``: the
    sessions it was made from, for the plots, the parse diagnostics and each session's
    status (without them the page has tables only).
    """
    import jinja2

    view = analysis_view(analysis)
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        autoescape=True,  # log text is untrusted: a "<script>" in a message must stay text
        undefined=jinja2.ChainableUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    images: dict[str, str] = {}
    if plots and sessions is not None:
        from logkit.report.plots import render_plots

        images = {name: base64.b64encode(data).decode("ascii")
                  for name, data in render_plots(sessions, view).items()}
    from logkit.report.plots import PLOTS

    meta = {}
    for s in sessions or []:
        meta[s.session_id] = {k: plain(s.meta.get(k)) for k in ("status", "model", "start_time", "duration_from")}
    if sessions is None and hasattr(analysis, "meta") and isinstance(analysis.meta, dict):
        meta = plain(analysis.meta)
    diagnostics, total = _diagnostics(analysis, sessions)
    severity_counts: dict[str, int] = {}
    for f in view["findings"]:
        key = str(f.get("severity") or "info").lower()
        severity_counts[key] = severity_counts.get(key, 0) + 1
    stragglers = {(r.get("session_id"), r.get("rank")): r for r in view["stragglers"]}
    comparisons = view["scaling"]["comparisons"]
    return env.get_template(TEMPLATE).render(
        title=title,
        v=view,
        definitions=view["definitions"],
        baseline=view["scaling"].get("baseline") or (comparisons[0].get("baseline") if comparisons else None),
        by_id={s["session_id"]: s for s in view["scaling"]["sessions"]},
        meta=meta,
        plots=images,
        plot_captions=PLOTS,
        stragglers=stragglers,
        diagnostics=diagnostics,
        diagnostics_total=total,
        severity_counts=severity_counts,
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        version=logkit.__version__,
    )


def write_html(analysis, path: str | Path, title: str = "logkit report", sessions=None, plots: bool = True) -> Path:
    """Write the page to ``path`` (parent folders created); returns the path."""
    path = Path(path)
    html = render_html(analysis, sessions=sessions, title=title, plots=plots)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(html, encoding="utf-8")
    return path
