"""HTML report: self-contained, escaped, every section, the figures and their definitions."""

from __future__ import annotations

import base64
import dataclasses
import re
import struct
from pathlib import Path

import pytest

from logkit.analysis import analyze
from logkit.analysis.results import Finding
from logkit.report.html import render_html, write_html
from logkit.report.json_report import render_json
from logkit.run.load import load_sessions
from tests.support.synth import append_bytes, rank_file, write_session

SECTIONS = ["Overview", "Comparison", "Forecast and counterfactual", "Communication", "Performance and stragglers", "GPUs",
            "Training curves", "Where the hours went", "Diagnosis", "Parse diagnostics"]


@pytest.fixture(scope="module")
def sessions(tmp_path_factory):
    root = tmp_path_factory.mktemp("html") / "logs"
    write_session(root, "base", world_size=1, gpu_count=1, step_times=[0.5] * 4)
    evil = "x<script>alert(1)"  # a session id is a folder name: no slash
    folder = write_session(root, evil, world_size=2, gpu_count=2, step_times=[0.3] * 4,
                           start="2026-11-22T03:00:00+00:00", message_extra="<script>bad()</script>")
    append_bytes(rank_file(folder, evil, 0), b'{"type": "<script>torn')
    return load_sessions(root)


@pytest.fixture(scope="module")
def page(sessions):
    return render_html(analyze(sessions))  # with its plots


def test_html_escapes_log_text(sessions, page):
    assert "<script" not in page.lower()
    assert "x&lt;script&gt;alert(1)" in page
    assert "&lt;script&gt;torn" in page  # the torn line text, shown as text


def test_html_escapes_a_finding(sessions):
    finding = Finding.make("critical", "nccl_timeout", "s<b>", "<script>alert(2)</script>",
                           "a <img src=x onerror=alert(3)>", ["f<i>.log:3"], [0])
    fake = dataclasses.replace(analyze(sessions[:1]), findings=(finding,))
    html = render_html(fake, plots=False)
    assert "<script" not in html.lower() and "<img" not in html.lower() and "<i>" not in html
    assert "&lt;script&gt;alert(2)&lt;/script&gt;" in html and "f&lt;i&gt;.log:3" in html


def test_html_is_self_contained(page):
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", page, re.I)
    assert not re.search(r"url\(\s*['\"]?\s*(https?:)?//", page, re.I)
    assert "http://" not in page and "https://" not in page
    assert "<link" not in page and "<style>" in page
    images = re.findall(r'<img alt="([^"]+)" src="data:image/png;base64,([^"]+)"', page)
    # synth sessions time no per-step phases: a sentence instead of an empty step_breakdown chart
    assert {name for name, _ in images} == {"training_comparison.png", "loss_curves.png", "throughput.png",
                                            "gpu_utilization.png", "bandwidth_vs_size.png", "step_time_per_rank.png"}
    assert "Where each rank's step goes: no per-step phases" in page
    for _, data in images:
        png = base64.b64decode(data)
        assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] >= 500


def test_html_sections_and_figures(page):
    assert re.findall(r"<h2>([^<]+)</h2>", page) == SECTIONS
    speedup = (8 / 0.3) / (8 / 0.5)  # samples/s of the candidate over the baseline's
    assert f"{speedup:.2f}x" in page and f"{speedup / 2 * 100:.1f}%" in page
    assert "candidate samples/s / baseline samples/s (throughput ratio)" in page  # its definition
    assert "torn last line" in page and "_rank0.jsonl:" in page
    # GPU table: synth writes util 80 and 90, memory 50%
    assert re.search(r"<td>85\.0</td>\s*<td>90\.0</td><td>50\.0</td>", page)


def test_html_without_plots_has_its_tables(sessions):
    html = render_html(analyze(sessions), plots=False)
    assert "<img" not in html and re.findall(r"<h2>([^<]+)</h2>", html) == SECTIONS


def test_write_html_and_template_lookup(sessions, tmp_path):
    from importlib.resources import files

    assert files("logkit").joinpath("templates", "report.html.j2").is_file()  # inside the package
    path = write_html(analyze(sessions), tmp_path / "out" / "r.html", plots=False)
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_json_nan_is_null():
    assert '"final_loss": null' in render_json({"sessions": [{"final_loss": float("nan")}]})


SAMPLES = Path(__file__).resolve().parents[3] / "sample_logs"
MAX_COLUMNS = 10  # a table of more columns than this does not fit a laptop's width: fold the rest


def _section(page: str, sid: str) -> str:
    return page[page.index(f'<section id="{sid}">'):].split("</section>", 1)[0]


def _link_peaks(page: str) -> list[str]:
    """The Link column of the "Link peaks of this run" table (its rows' first cells)."""
    part = _section(page, "communication").split("Link peaks of this run", 1)[1].split("</table>", 1)[0]
    return re.findall(r'<tr><td class="text">([^<]*)</td>', part)


@pytest.fixture(scope="module")
def cpu_run():
    """The two CPU runs of why_slow (1 rank, and 2 ranks whose rank 1 loads its data slowly), with plots."""
    a = analyze(load_sessions(SAMPLES / "why_slow" / "logs"))
    return a, render_html(a)


def test_a_cpu_run_says_it_has_no_gpu_instead_of_an_empty_chart(cpu_run):
    _, page = cpu_run
    gpus = _section(page, "gpus")
    assert "No GPU snapshots: CPU runs, no GPU to sample." in gpus
    assert "<img" not in gpus and "<table" not in gpus and "gpu_utilization.png" not in page
    images = re.findall(r'<img alt="([^"]+)"', page)
    assert "step_breakdown.png" in images and "bandwidth_vs_size.png" in images  # the runs' own charts stay


def test_a_cpu_run_shows_the_peaks_of_its_own_links_only(cpu_run):
    a, page = cpu_run
    links = sorted(set(a.communication["link"].dropna()))
    assert links == ["loopback/gloo (CPU)"]  # gloo on CPU ranks
    assert _link_peaks(page) == links
    shown = _section(page, "communication").split("Link peaks of this run", 1)[1]
    folded, _, _ = shown.partition("</details>")
    # the whole reference table only inside a closed fold, after the run's links
    assert re.search(r'<details class="more">\s*<summary>Reference table', folded)
    assert "NVLink 4 (H100 SXM)" not in folded.split("<details", 1)[0] and "NVLink 4 (H100 SXM)" in folded


def test_a_gpu_run_shows_the_peaks_of_its_own_links_only():
    from logkit.run.load import load_session

    sessions = load_sessions(SAMPLES / "qlora_tiny_cpu" / "logs") + [
        load_session(SAMPLES / "nccl_tests" / "all_reduce_all_gather_8xA100.log")]
    a = analyze(sessions)
    page = render_html(a, plots=False)
    judged = set(a.communication["link"].dropna()) | set(a.nccl_tests["link"].dropna())
    assert sorted(_link_peaks(page)) == sorted(judged) and "NVLink 3 (A100 SXM)" in judged


def test_no_communication_no_peaks_table(sessions):
    page = render_html(analyze(sessions[:1]), plots=False)  # one rank: nothing was judged against a link
    assert "Link peaks of this run" not in page and "Reference table" not in page


def test_tables_fold_their_columns_and_definitions(cpu_run, page):
    for html in (cpu_run[1], page):
        for table in re.findall(r"<table>.*?</table>", html, re.S):
            head = re.search(r"<tr>(.*?)</tr>", table, re.S).group(1)
            assert head.count("<th") <= MAX_COLUMNS, head
        # every block of definitions inside a closed fold
        assert '<dl class="defs">' not in html and "<dl>" in html
        assert html.count('<details class="defs">') == html.count("<dl>")
        assert "<details open" not in html
    overview = _section(cpu_run[1], "overview")
    # the columns a reader looks for on the first screen; the rest one click away
    main, more = overview.split('<details class="more">', 1)
    for column in ("Samples/s", "Final loss", "Status", "Model"):
        assert f">{column}</th>" in main
    for column in ("Steps/s", "Warm-up steps", "Global batch", "Figures from"):
        assert f">{column}</th>" in more and f">{column}</th>" not in main
    # a column head carries its figure's definition
    assert re.search(r'<th scope="col" title="candidate samples/s / baseline samples/s \(throughput ratio\)[^"]*">'
                     r"Speedup</th>", cpu_run[1])


def test_a_session_id_wraps_at_slashes_and_stays_escaped():
    from logkit.report.html import breakable

    assert str(breakable("training_20261123_074804")) == "training_20261123_074804"  # a short id stays whole
    assert str(breakable("gpu/qlora<b>/logs")) == "gpu/<wbr>qlora&lt;b&gt;/<wbr>logs"
    long = "flagscale_torchrun_default0_prefix"
    assert str(breakable(long)) == long.replace("_", "_<wbr>")
    assert str(breakable("x<script>alert(1)")) == "x&lt;script&gt;alert(1)"
