"""``analyze_logs``: compare logkit training sessions (console text, JSON, HTML report).

The CLI only wires: it loads sessions, runs the analyses (``logkit.analysis.analyze``), and
hands the results to the renderers (``logkit.report``): console text, JSON, HTML, PNG, exports.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from logkit.schema.findings import SEVERITIES

PROG = "analyze_logs"
DEFAULT_LOG_DIR = "logs"
DEFAULT_REPORT = "logkit_report.html"
DEFAULT_PLOT_DIR = "plots"
MAX_NOTES = 20


def _fail(message: str) -> None:
    """One line on stderr and exit status 2: a user's mistake, never a traceback."""
    click.echo(f"{PROG}: {message}", err=True)
    raise SystemExit(2)


class _Said:
    """What a run prints on stdout and stderr, printed and kept in order (``run.answers``)."""

    def __init__(self) -> None:
        self.said: list[list] = []

    def __call__(self, text: str, err: bool = False) -> None:
        click.echo(text, err=err)
        self.said.append([err, text])


def _skipped(notes: list, say) -> None:
    """Files found and not read (a FIFO, a device, a link out of the folder) where no session is."""
    for d in notes[:MAX_NOTES]:
        say(f"note: {d['file']}: {d['reason']}", err=True)
    if len(notes) > MAX_NOTES:
        say(f"note: ... and {len(notes) - MAX_NOTES} more files not read", err=True)


def _notes(analysis, say) -> None:
    """Parse diagnostics on stderr, at most ``MAX_NOTES`` of them (the rest are in --report and --json)."""
    for d in analysis.rows("diagnostics", head=MAX_NOTES):
        where = d.file if d.line is None else f"{d.file}:{d.line}"
        say(f"note: {where}: {d.reason}", err=True)
    if len(analysis.diagnostics) > MAX_NOTES:
        say(f"note: ... and {len(analysis.diagnostics) - MAX_NOTES} more parse diagnostics (see --report)", err=True)


def _report_file(path) -> Path:
    """The file to write: ``path``, or ``path/report.html`` when it is an existing folder or ends with a
    path separator."""
    text = str(path)
    target = Path(text)
    if text.endswith(("/", "\\")) or target.is_dir():
        return target / "report.html"
    return target


def _gate(result, say) -> int:
    for message in result.messages:
        say(f"{PROG}: {message}", err=True)
    return result.status


def _write(what: str, where, write) -> object:
    """``write()``, or one line and exit 2 when the file system says no."""
    try:
        return write()
    except OSError as exc:
        _fail(f"cannot write {what} to {where}: {exc.strerror or exc}")


def _outputs(analysis, sessions, *, as_json, report_path, plot_dir, export) -> None:
    """The files asked for: the HTML report, the PNG plots, the frames exported. What was written is said
    on stdout, or on stderr when stdout carries JSON (so that it stays one document)."""
    if report_path is not None:
        from logkit.report.html import write_html

        report_path = _report_file(report_path)
        written = _write("the report", report_path, lambda: write_html(analysis, report_path))
        click.echo(f"HTML report written to {written}", err=as_json)
    if plot_dir is not None:
        from logkit.report.plots import write_plots

        paths = _write("the plots", plot_dir, lambda: write_plots(analysis, plot_dir))
        click.echo(f"{len(paths)} plots written to {plot_dir}: {', '.join(p.name for p in paths)}", err=as_json)
    if export is not None:
        from logkit.report.export import export_sessions

        fmt, out_dir = export
        folders, notes = _write(f"the {fmt} export", out_dir,
                                lambda: export_sessions(sessions, fmt, out_dir, analysis=analysis))
        click.echo(f"{len(folders)} session(s) exported as {fmt} to {out_dir}", err=as_json)
        for note in notes:
            click.echo(f"note: {note}", err=True)


def _print(analysis, sections, *, as_json, verdict_only, say) -> None:
    """The console or JSON output asked for: the verdict's lines alone (``--verdict``), the JSON document,
    or the verdict followed by each section's block."""
    from logkit.report import console

    if verdict_only:
        if text := console.render_verdict(analysis):
            say(text)
    elif as_json:
        from logkit.report.json_report import analysis_document, render_json

        say(render_json(analysis_document(analysis, sections or ["compare"])))
    elif sections:
        renderers = {"compare": console.render_compare, "communication": console.render_communication,
                     "performance": console.render_performance, "diagnose": console.render_diagnose,
                     "ledger": console.render_ledger, "forecast": console.render_forecast}
        blocks = [console.render_verdict(analysis), *(renderers[name](analysis) for name in sections)]
        say("\n\n".join(b for b in blocks if b))


def _sizes(text: str | None) -> tuple[int, ...] | None:
    """``--forecast 4,8,16``: the world sizes, or exit 2 naming what is not a positive whole number."""
    if text is None or text.strip() in ("", "default"):
        return None
    sizes = []
    for part in text.split(","):
        part = part.strip()
        if not part.isdigit() or int(part) < 1:
            _fail(f"--forecast takes world sizes like 4,8,16 (or 'default'); {part!r} is not one")
        sizes.append(int(part))
    return tuple(dict.fromkeys(sizes))


def _run(loaded, *, as_json, sections, report_path, plot_dir, export, fail_under_efficiency, fail_on,
         say=click.echo, verdict_only=False, forecast=None, gpu_hour_price=None) -> int:
    """Analyse the sessions of ``loaded`` once and hand the results to each renderer asked for; the exit status.
    ``say(text, err=False)``: how it prints (``_Said``: what it prints is kept). ``verdict_only``: the
    verdict's lines and nothing else (``--verdict``: what a logged run prints when it ends)."""
    from logkit.analysis import analyze
    from logkit.analysis.findings.gates import efficiency_gate, severity_gate

    sessions = loaded.sessions
    analysis = analyze(sessions, comm_parts=loaded.comm_parts, forecast_sizes=_sizes(forecast),
                       gpu_hour_price=gpu_hour_price)
    _notes(analysis, say)
    if not verdict_only and not sections and report_path is None and plot_dir is None and export is None:
        sections = ["compare"]  # with no flag, the comparison (what analyze_logs is first for)
    _print(analysis, sections, as_json=as_json, verdict_only=verdict_only, say=say)
    _outputs(analysis, sessions, as_json=as_json, report_path=report_path, plot_dir=plot_dir, export=export)
    status = 0
    if fail_under_efficiency is not None:
        status = max(status, _gate(efficiency_gate(analysis, fail_under_efficiency), say))
    if fail_on is not None:
        status = max(status, _gate(severity_gate(analysis, fail_on), say))
    return status


def _follow(log_dir: Path, *, as_json, session_ids, timeout, refresh, alert_cmd, others: dict) -> None:
    """``--follow``: the live view until the sessions end (NDJSON with --json or without a terminal); a folder
    that does not exist yet is waited for."""
    given = [name for name, value in others.items() if value is not None and value is not False]
    if given:
        _fail(f"--follow shows the live view only; run {', '.join(given)} without it")
    if log_dir.exists() and not log_dir.is_dir():
        _fail(f"not a folder: {log_dir}")
    from logkit.report.live_view import NdjsonView, TerminalView
    from logkit.run.follow import follow

    view = NdjsonView() if as_json or not sys.stdout.isatty() else TerminalView(str(log_dir))
    raise SystemExit(follow(log_dir, view, refresh_s=refresh, timeout_s=timeout, session_ids=session_ids,
                            alert_cmd=alert_cmd))


def _verdict_alone(*, as_json, sections, report, plot, export) -> None:
    """``--verdict`` prints the verdict only: exit 2 naming any other output asked for beside it."""
    given = [name for name, on in (("--json", as_json), ("--report", report is not None),
                                   ("--plot", plot is not None), ("--export", export is not None),
                                   *((f"--{name}", True) for name in sections)) if on]
    if given:
        _fail(f"--verdict prints the verdict only; run {', '.join(given)} without it")


def _question(log_dir: Path, **options):
    """This run's question to the answers' cache (``run.answers``), or None when its answer is not kept:
    a run that writes files, or maps ranks on Dask."""
    import os

    if options["report"] is not None or options["plot"] is not None or options["export"] is not None \
            or options["dask"] or os.environ.get("LOGKIT_DASK_SCHEDULER"):
        return None
    from logkit.run.answers import Question

    try:
        return Question(log_dir, {k: v for k, v in options.items() if k not in ("report", "plot", "export", "dask")})
    except OSError:
        return None


def _replay(answer: dict) -> None:
    """Print a kept answer as its run printed it, and exit with its status."""
    for err, text in answer["said"]:
        click.echo(text, err=err)
    raise SystemExit(answer["status"])


def _load(log_dir: Path, *, cache, progress, dask_address, whole, sources=None, follow_links=False):
    """The sessions under ``log_dir`` (a ``run.engine.Loaded``), through the engine (each rank read and
    reduced here, in a local pool, or on a Dask cluster); ``whole``: every record kept (for --export)."""
    if whole and dask_address:
        _fail("--export writes every record: run it without --dask")
    try:
        from logkit.run.engine import Loaded
        from logkit.run.load import load_for_analysis, load_sessions

        if whole:
            sessions = load_sessions(log_dir, cache=cache, progress=progress, follow_links=follow_links)
            return Loaded(sessions, [None] * len(sessions))
        return load_for_analysis(log_dir, cache=cache, progress=progress, scheduler=dask_address, sources=sources,
                                 follow_links=follow_links)
    except OSError as exc:
        _fail(str(exc))
    except RuntimeError as exc:  # Dask missing or its scheduler unreachable
        _fail(str(exc))


def _only(loaded, wanted: set, log_dir: Path):
    """``loaded`` with only the sessions named (``--session-id``), or exit 2 naming the ones not found."""
    from logkit.run.engine import Loaded

    missing = sorted(wanted - {s.session_id for s in loaded.sessions})
    if missing:
        found = ", ".join(s.session_id for s in loaded.sessions)
        _fail(f"no session {', '.join(missing)} under {log_dir} (found: {found})")
    keep = [i for i, s in enumerate(loaded.sessions) if s.session_id in wanted]
    return Loaded([loaded.sessions[i] for i in keep], [loaded.comm_parts[i] for i in keep])


@click.command(name=PROG, context_settings={"help_option_names": ["-h", "--help"]})
@click.argument("log_dir_arg", metavar="[LOG_DIR]", required=False, type=click.Path(path_type=Path))
@click.option("--log-dir", "log_dir_opt", type=click.Path(path_type=Path), default=None,
              help=f"Folder of session folders (default: ./{DEFAULT_LOG_DIR}).")
@click.option("--compare", "do_compare", is_flag=True,
              help="Print the single- vs multi-process comparison (the default action).")
@click.option("--json", "as_json", is_flag=True, help="Print the comparison as JSON, and nothing else, on stdout.")
@click.option("--report", "report_path", is_flag=False, flag_value=DEFAULT_REPORT, default=None,
              type=click.Path(), metavar="[PATH]",
              help=f"Write a self-contained HTML report (default path: {DEFAULT_REPORT}; a folder, or a path "
                   "ending in /, gets report.html inside).")
@click.option("--session-id", "session_ids", multiple=True, metavar="ID",
              help="Only this session (repeatable).")
@click.option("--progress", "progress", is_flag=True, default=None,
              help="Show a progress bar on stderr while reading (default: on a terminal, for large folders).")
@click.option("--no-cache", "no_cache", is_flag=True,
              help="Parse every file again instead of reusing the cache of parsed sessions.")
@click.option("--communication", "do_communication", is_flag=True,
              help="Communication per session, rank and op: sizes, p50/p95 latency, algbw/busbw, share of "
                   "step time, share of the link's peak.")
@click.option("--performance", "do_performance", is_flag=True,
              help="Step-time spread per rank, stragglers, per-GPU utilization and memory, MFU.")
@click.option("--diagnose", "do_diagnose", is_flag=True,
              help="Findings ranked by severity, each with its evidence (file:line).")
@click.option("--ledger", "do_ledger", is_flag=True,
              help="Where each session's hours went: its wall-clock (first process start to last session end) split "
                   "into start-up, data wait, compute, exposed communication, waiting for other ranks, evaluation, "
                   "checkpoint saving, logging and the rest.")
@click.option("--verdict", "verdict_only", is_flag=True,
              help="Print only the verdict (the sentences every report opens with): what a run logged with "
                   "trainer_hooks prints when it ends.")
@click.option("--plot", "plot_dir", is_flag=False, flag_value=DEFAULT_PLOT_DIR, default=None,
              type=click.Path(path_type=Path), metavar="[DIR]",
              help=f"Write the PNG plots (training_comparison.png, ...) into DIR (default: ./{DEFAULT_PLOT_DIR}).")
@click.option("--session", "session_name", default=None, metavar="NAME",
              help="A pipeline's session folder sessions/NAME (its single_gpu and multi_gpu runs), under "
                   "LOG_DIR or the current folder.")
@click.option("--export", "export", nargs=2, default=None, metavar="FORMAT DIR",
              type=(click.Choice(["parquet", "csv"]), click.Path(path_type=Path)),
              help="Write every frame of every session as FORMAT (parquet or csv) under DIR/<session>/, "
                   "and TensorBoard scalars where tensorboard is installed.")
@click.option("--forecast", "forecast", is_flag=False, flag_value="default", default=None, metavar="[SIZES]",
              help="Forecast samples/s, step time and scaling efficiency at these world sizes (e.g. 4,8,16; default: "
                   "2x and 4x the largest measured) from the runs of a group at two or more sizes, with an 80% "
                   "interval; and what each size would cost in hours and GPU-hours.")
@click.option("--gpu-hour-price", "gpu_hour_price", type=click.FloatRange(min=0), default=None, metavar="PRICE",
              help="The price of one GPU-hour: the counterfactual (hours on the baseline against the run's, and the "
                   "forecast's sizes) in money too.")
@click.option("--fail-under-efficiency", "fail_under_efficiency", type=click.FloatRange(min=0), default=None,
              metavar="X", help="Exit 1 when a comparison's scaling efficiency (steady state where step times "
                                "exist, else whole run) is below X (e.g. 0.8); exit 2 when nothing can be compared.")
@click.option("--fail-on", "fail_on", type=click.Choice(SEVERITIES), default=None,
              help="Exit 1 when a finding is at this severity or worse.")
@click.option("--dask", "dask_address", default=None, metavar="ADDRESS",
              help="Read and reduce each rank's logs on this Dask scheduler's workers (e.g. tcp://host:8786; "
                   "default: $LOGKIT_DASK_SCHEDULER, else this machine). Needs pip install 'logkit[dask]'.")
@click.option("--follow", "follow", is_flag=True,
              help="Follow the sessions being written under LOG_DIR (waiting for it to appear): a live view with "
                   "alerts (one JSON object per refresh with --json or without a terminal) until every session "
                   "has ended, or Ctrl-C.")
@click.option("--follow-timeout", "follow_timeout", type=click.FloatRange(min=0, min_open=True), default=None,
              metavar="SECONDS", help="With --follow: stop (exit 1) when nothing is written for SECONDS (counted from "
                                         "the start while LOG_DIR does not exist yet).")
@click.option("--alert-cmd", "alert_cmd", default=None, metavar="CMD",
              help="With --follow: run the shell command CMD for each alert raised or cleared, the alert as one "
                   "JSON object on its standard input (e.g. 'notify-send logkit \"$(jq -r .alert.detail)\"').")
@click.option("--refresh", "refresh", type=click.FloatRange(min=0.1, max=2.0), default=1.0, show_default=True,
              metavar="SECONDS", help="With --follow: seconds between refreshes.")
@click.option("--follow-links", "follow_links", is_flag=True,
              help="Also read what links lead to outside LOG_DIR (by default a link out of the folder is noted and "
                   "not followed).")
def analyze_logs(log_dir_arg, log_dir_opt, do_compare, as_json, report_path, session_ids, progress, no_cache,
                 do_communication=False, do_performance=False, do_diagnose=False, plot_dir=None,
                 session_name=None, export=None, fail_under_efficiency=None, fail_on=None, follow=False,
                 follow_timeout=None, refresh=1.0, dask_address=None, verdict_only=False, alert_cmd=None,
                 follow_links=False, do_ledger=False, forecast=None, gpu_hour_price=None):
    """Compare the logkit training sessions under LOG_DIR: throughput, speedup, scaling efficiency.

    Speedup is the ratio of training throughput (samples/s); scaling efficiency is speedup
    divided by the ratio of rank counts. Put LOG_DIR before a bare --report, or write
    --report=PATH.
    """
    if log_dir_arg is not None and log_dir_opt is not None and log_dir_arg != log_dir_opt:
        _fail(f"two log folders given ({log_dir_arg} and --log-dir {log_dir_opt}); give one")
    log_dir = log_dir_arg or log_dir_opt or Path(DEFAULT_LOG_DIR)
    if session_name is not None:
        from logkit.ingest.discover import session_folder

        try:
            log_dir = session_folder(session_name, log_dir_arg or log_dir_opt)
        except FileNotFoundError as exc:
            _fail(str(exc))
    if alert_cmd is not None and not follow:
        _fail("--alert-cmd runs a command for each alert of the live view: give it with --follow")
    if not log_dir.exists() and not follow:
        _fail(f"no such folder: {log_dir}")
    if follow:
        _follow(log_dir, as_json=as_json, session_ids=session_ids, timeout=follow_timeout, refresh=refresh,
                alert_cmd=alert_cmd,
                others={"--compare": do_compare, "--report": report_path, "--plot": plot_dir, "--export": export,
                        "--communication": do_communication, "--performance": do_performance,
                        "--diagnose": do_diagnose, "--ledger": do_ledger, "--fail-under-efficiency": fail_under_efficiency,
                        "--fail-on": fail_on, "--verdict": verdict_only, "--forecast": forecast,
                        "--gpu-hour-price": gpu_hour_price})

    sections = [name for name, on in (("compare", do_compare), ("communication", do_communication),
                                      ("performance", do_performance), ("diagnose", do_diagnose),
                                      ("ledger", do_ledger), ("forecast", forecast is not None)) if on]
    if verdict_only:
        _verdict_alone(as_json=as_json, sections=sections, report=report_path, plot=plot_dir, export=export)
    question = None if no_cache else _question(
        log_dir, json=as_json, sections=sections, session_ids=sorted(set(session_ids)),
        fail_under_efficiency=fail_under_efficiency, fail_on=fail_on, report=report_path, plot=plot_dir,
        export=export, dask=dask_address, verdict=verdict_only, follow_links=follow_links, forecast=forecast,
        gpu_hour_price=gpu_hour_price)
    if question is not None and (answer := question.lookup()) is not None:
        _replay(answer)
    loaded = _load(log_dir, cache=not no_cache, progress=progress, dask_address=dask_address,
                   whole=export is not None, sources=None if question is None else question.sources,
                   follow_links=follow_links)
    skipped = loaded.notes or (question.notes if question is not None else [])
    if not loaded.sessions:
        from logkit.ingest.discover import nothing_found

        _skipped(skipped, click.echo)
        _fail(nothing_found(log_dir, follow_links))
    if session_ids:
        loaded = _only(loaded, set(session_ids), log_dir)

    say = _Said()
    _skipped(skipped, say)
    status = _run(loaded, as_json=as_json, sections=sections, report_path=report_path, plot_dir=plot_dir,
                  export=export, fail_under_efficiency=fail_under_efficiency, fail_on=fail_on, say=say,
                  verdict_only=verdict_only, forecast=forecast, gpu_hour_price=gpu_hour_price)
    if question is not None:
        question.keep(loaded.sessions, say.said, status)
    if status:
        raise SystemExit(status)


def main(argv: list[str] | None = None) -> None:
    """Console-script entry point."""
    # Emoji in the output must not crash a console that cannot show them.
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.reconfigure(errors="replace")
        except (AttributeError, ValueError):
            pass
    analyze_logs.main(args=argv, prog_name=PROG)


if __name__ == "__main__":
    main()
