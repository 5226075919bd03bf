"""``analyze_logs``: compare logkit training sessions (console text, JSON, HTML report).

The CLI only wires: it loads sessions, builds the comparison, and hands it to a renderer.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

__all__ = ["main", "analyze_logs"]

PROG = "analyze_logs"
DEFAULT_LOG_DIR = "logs"
DEFAULT_REPORT = "logkit_report.html"
MAX_NOTES = 20


def _fail(message: str) -> None:
    """One line on stderr and exit status 2: a user's mistake, never a traceback."""
    click.echo(f"{PROG}: {message}", err=True)
    raise SystemExit(2)


def _notes(report) -> None:
    diags = report.diagnostics
    for d in diags[:MAX_NOTES]:
        where = d["file"] if d.get("line") is None else f"{d['file']}:{d['line']}"
        click.echo(f"note: {where}: {d['reason']}", err=True)
    if len(diags) > MAX_NOTES:
        click.echo(f"note: ... and {len(diags) - MAX_NOTES} more parse diagnostics (see --report)", err=True)


@click.command(name=PROG, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("log_dir_arg", metavar="[LOG_DIR]", required=False, type=click.Path(path_type=Path))
@click.option("--log-dir", "log_dir_opt", type=click.Path(path_type=Path), default=None,
              help=f"Folder of session folders (default: ./{DEFAULT_LOG_DIR}).")
@click.option("--compare", "do_compare", is_flag=True,
              help="Print the single- vs multi-process comparison (the default action).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON, and nothing else, on stdout.")
@click.option("--report", "report_path", is_flag=False, flag_value=DEFAULT_REPORT, default=None,
              type=click.Path(path_type=Path), metavar="[PATH]",
              help=f"Write a self-contained HTML report (default path: {DEFAULT_REPORT}).")
@click.option("--session-id", "session_ids", multiple=True, metavar="ID",
              help="Only this session (repeatable).")
@click.option("--progress", "progress", is_flag=True, default=None,
              help="Show a progress bar on stderr while reading (default: on a terminal, for large folders).")
@click.option("--no-cache", "no_cache", is_flag=True,
              help="Parse every file again instead of reusing the cache of parsed sessions.")
def analyze_logs(log_dir_arg, log_dir_opt, do_compare, as_json, report_path, session_ids, progress, no_cache):
    """Compare the logkit training sessions under LOG_DIR: throughput, speedup, scaling efficiency.

    Speedup is the ratio of training throughput (samples/s); scaling efficiency is speedup
    divided by the ratio of rank counts. Put LOG_DIR before a bare --report, or write
    --report=PATH.
    """
    if log_dir_arg is not None and log_dir_opt is not None and log_dir_arg != log_dir_opt:
        _fail(f"two log folders given ({log_dir_arg} and --log-dir {log_dir_opt}); give one")
    log_dir = log_dir_arg or log_dir_opt or Path(DEFAULT_LOG_DIR)
    if not log_dir.exists():
        _fail(f"no such folder: {log_dir}")

    from logkit.analysis.comparison import comparison_report
    from logkit.ingest import load_sessions

    try:
        sessions = load_sessions(log_dir, cache=not no_cache, progress=progress)
    except OSError as exc:
        _fail(str(exc))
    if not sessions:
        _fail(f"no logkit sessions found under {log_dir}")
    if session_ids:
        wanted = set(session_ids)
        missing = sorted(wanted - {s.session_id for s in sessions})
        if missing:
            found = ", ".join(s.session_id for s in sessions)
            _fail(f"no session {', '.join(missing)} under {log_dir} (found: {found})")
        sessions = [s for s in sessions if s.session_id in wanted]

    report = comparison_report(sessions)
    _notes(report)
    if as_json:
        from logkit.report.json_report import render_json

        click.echo(render_json(report))
    elif do_compare or report_path is None:
        from logkit.report.console import render_console

        click.echo(render_console(report))
    if report_path is not None:
        from logkit.report.html import write_html

        try:
            written = write_html(report, report_path)
        except OSError as exc:
            _fail(f"cannot write the report to {report_path}: {exc.strerror or exc}")
        # stderr when stdout carries JSON, so that stdout stays one document
        click.echo(f"HTML report written to {written}", err=as_json)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    # Emoji in the seed-style output must not crash a console that cannot show them.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError):
            pass
    analyze_logs.main(args=argv, prog_name=PROG)


if __name__ == "__main__":
    main()
