"""A renamed or missing column of a result frame fails every renderer that shows the frame (console
sections, HTML, JSON, plots, the TensorBoard export, the CLI's notes), never prints "n/a"; a
misspelled field fails too (typed rows in Python, StrictUndefined in the templates)."""

from __future__ import annotations

import dataclasses
import re

import jinja2
import pytest

from logkit.analysis import analyze
from logkit.analysis.results import MissingColumns
from logkit.analysis.results.curves import CURVE_COLUMNS
from logkit.analysis.results.frames import ROWS
from logkit.report.console import render_communication, render_compare, render_performance
from logkit.report.html import _environment, render_html
from logkit.report.json_report import analysis_document, render_json
from logkit.report.plots import figures
from logkit.run.load import load_sessions
from tests.support.launch import REPO

SAMPLES = REPO / "sample_logs"
# together, these fill every result frame and every curve with rows
FOLDERS = ("qlora_tiny_cpu/logs", "nccl_tests", "why_slow", "gpu_captures", "pipeline_sessions", "console")
# the console sections and the frames each one shows
CONSOLE = ((render_compare, {"gpus"}), (render_communication, {"communication", "nccl_tests"}),
           (render_performance, {"performance", "stragglers", "step_breakdown", "gpus"}))
# the plots drawn from a result frame or a curve
PLOT_OF = {"performance": "step_time_per_rank.png", "step_breakdown": "step_breakdown.png",
           "loss": "loss_curves.png", "eval_loss": "loss_curves.png", "throughput": "throughput.png",
           "gpu_utilization": "gpu_utilization.png", "bandwidth": "bandwidth_vs_size.png"}
FRAME_CASES = [(name, column) for name, row in ROWS.items() for column in row.COLUMNS]
CURVE_CASES = [(name, column) for name, columns in CURVE_COLUMNS.items() for column in columns]


@pytest.fixture(scope="module")
def sessions():
    return [s for folder in FOLDERS for s in load_sessions(SAMPLES / folder)]


@pytest.fixture(scope="module")
def analysis(sessions):
    return analyze(sessions)


def _renamed(analysis, name: str, column: str):
    """``analysis`` with ``column`` of its frame ``name`` renamed (nothing else changed)."""
    return dataclasses.replace(analysis, **{name: getattr(analysis, name).rename(columns={column: f"{column}_x"})})


def _renamed_curve(analysis, name: str, column: str):
    curves = analysis.curves
    renamed = getattr(curves, name).rename(columns={column: f"{column}_x"})
    return dataclasses.replace(analysis, curves=dataclasses.replace(curves, **{name: renamed}))


def _missing(column: str):
    return pytest.raises(MissingColumns, match=re.escape(f"no column '{column}'"))


def test_every_frame_has_rows_and_exactly_its_declared_columns(analysis):
    """The frames are full (so a renamed column below is one a renderer would have shown) and hold the
    columns declared where they are made, in that order (so nothing a renderer or the JSON needs is
    undeclared)."""
    for name, row in ROWS.items():
        frame = getattr(analysis, name)
        assert len(frame) and tuple(frame.columns) == row.COLUMNS, name
    for name, columns in CURVE_COLUMNS.items():
        frame = getattr(analysis.curves, name)
        assert len(frame) and tuple(frame.columns) == columns, name


def test_the_untouched_analysis_renders(analysis):
    for render, _ in CONSOLE:
        assert render(analysis)
    assert render_html(analysis, plots=False) and render_json(analysis)


@pytest.mark.parametrize(("name", "column"), FRAME_CASES, ids=[f"{n}.{c}" for n, c in FRAME_CASES])
def test_a_renamed_column_fails_every_renderer_of_its_frame(analysis, name, column):
    bad = _renamed(analysis, name, column)
    with _missing(column):
        render_html(bad, plots=False)  # every result frame is a table of the report
    if name == "diagnostics":  # shown by the report and the CLI's notes, not in the JSON
        from logkit.cli import _notes

        with _missing(column):
            _notes(bad, lambda text, err=False: None)
    else:
        with _missing(column):
            render_json(bad)
        with _missing(column):
            analysis_document(bad, ["diagnose"])  # any section: the document is a selection of to_dict()
    for render, shown in CONSOLE:
        if name in shown:
            with _missing(column):
                render(bad)
    if name in PLOT_OF:
        with _missing(column):
            figures(bad, [PLOT_OF[name]])


@pytest.mark.parametrize(("name", "column"), CURVE_CASES, ids=[f"{n}.{c}" for n, c in CURVE_CASES])
def test_a_renamed_curve_column_fails_its_plot(analysis, name, column):
    with _missing(column):
        figures(_renamed_curve(analysis, name, column), [PLOT_OF[name]])


def test_a_renamed_curve_column_fails_the_report_and_the_tensorboard_export(analysis, sessions, tmp_path):
    with _missing("loss"):
        render_html(_renamed_curve(analysis, "loss", "loss"))  # with its plots
    pytest.importorskip("tensorboard", reason="tensorboard not installed (pip install tensorboard)")
    from logkit.report.export import export_tensorboard

    with _missing("samples_per_s"):
        export_tensorboard(sessions, tmp_path, analysis=_renamed_curve(analysis, "throughput", "samples_per_s"))


def test_a_misspelled_field_fails_in_python_and_in_a_template():
    row = ROWS["communication"](busbw_mb_s=1.0)
    with pytest.raises(AttributeError):
        row.busbw_mbs  # noqa: B018
    template = _environment().from_string('{{ r.busbw_mb_s | fmt(".1f") }} {{ r.busbw_mbs | fmt(".1f") }}')
    with pytest.raises(jinja2.UndefinedError, match="busbw_mbs"):
        template.render(r=row)
    assert _environment().from_string('{{ r.busbw_mb_s | fmt(".1f") }} {{ r.p50_ms | fmt(".2f") }}').render(
        r=row) == "1.0 n/a"  # a missing value is a declared column without one: n/a is right there
