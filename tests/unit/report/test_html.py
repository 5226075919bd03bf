"""HTML report: self-contained, escaped, every section, the figures and their definitions."""

from __future__ import annotations

import base64
import dataclasses
import re
import struct

import pytest

from logkit.analysis import analyze
from logkit.analysis.results import Finding
from logkit.report.html import render_html, write_html
from logkit.report.json_report import render_json
from logkit.run.load import load_sessions
from tests.support.synth import append_bytes, rank_file, write_session

SECTIONS = ["Overview", "Comparison", "Communication", "Performance and stragglers", "GPUs", "Training curves",
            "Diagnosis", "Parse diagnostics"]


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
