"""Self-contained HTML report (jinja2, autoescaped, inline CSS, no network) of a comparison."""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

import logkit
from logkit.report.console import fmt

__all__ = ["TEMPLATE", "template_dir", "render_html", "write_html"]

TEMPLATE = "report.html.j2"


def template_dir() -> Path:
    """Where the templates are: inside the package (an installed wheel), else the repository's top level."""
    here = Path(logkit.__file__).resolve().parent
    for candidate in (here / "templates", here.parent / "templates"):
        if (candidate / TEMPLATE).is_file():
            return candidate
    raise FileNotFoundError(f"{TEMPLATE} is neither in {here / 'templates'} nor in {here.parent / 'templates'}")


def render_html(report, title: str = "logkit report") -> str:
    """The report as one HTML page (text only; every value escaped)."""
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(template_dir())),
        autoescape=True,  # log text is untrusted: a "<script>" in a message must stay text
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["fmt"] = fmt
    by_id = {s["session_id"]: s for s in report.sessions}
    return env.get_template(TEMPLATE).render(
        title=title,
        report=report,
        by_id=by_id,
        generated=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        version=logkit.__version__,
    )


def write_html(report, path: str | Path, title: str = "logkit report") -> Path:
    """Write the page to ``path`` (parent folders created); returns the path."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(render_html(report, title), encoding="utf-8")
    return path
