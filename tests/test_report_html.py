"""HTML report: self-contained, escaped, with the definitions and the parse diagnostics."""

from __future__ import annotations

import re

from synth import append_bytes, rank_file, write_session

from logkit.analysis.comparison import comparison_report
from logkit.ingest import load_sessions
from logkit.report.html import render_html, template_dir, write_html
from logkit.report.json_report import render_json


def _report(tmp_path):
    root = tmp_path / "logs"
    write_session(root, "base", world_size=1, gpu_count=1, step_times=[0.5] * 4)
    evil = "x<script>alert(1)"  # a session id is a folder name: no slash
    folder = write_session(root, evil, world_size=2, gpu_count=2, step_times=[0.3] * 4,
                           start="2026-11-22T03:00:00+00:00", message_extra="<script>bad()</script>")
    append_bytes(rank_file(folder, evil, 0), b'{"type": "<script>torn')
    return comparison_report(load_sessions(root))


def test_html_escapes_log_text(tmp_path):
    html = render_html(_report(tmp_path))
    assert "<script" not in html.lower()
    assert "x&lt;script&gt;alert(1)" in html
    assert "&lt;script&gt;torn" in html  # the torn line text, shown as text


def test_html_is_self_contained(tmp_path):
    html = render_html(_report(tmp_path))
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//""", html, re.I)
    assert "http://" not in html and "https://" not in html
    assert "<link" not in html and "<style>" in html


def test_html_sections(tmp_path):
    html = render_html(_report(tmp_path))
    for heading in ("Sessions", "GPU utilization", "Scaling comparison", "Parse diagnostics"):
        assert f"<h2>{heading}</h2>" in html
    assert "candidate samples/s / baseline samples/s (throughput ratio)" in html
    assert "torn last line" in html and "_rank0.jsonl:" in html
    assert "1.67x" in html and "83.3%" in html


def test_write_html_and_template_lookup(tmp_path):
    assert (template_dir() / "report.html.j2").is_file()
    path = write_html(_report(tmp_path), tmp_path / "out" / "r.html")
    assert path.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


def test_json_nan_is_null(tmp_path):
    report = _report(tmp_path)
    report.sessions[0]["final_loss"] = float("nan")
    assert '"final_loss": null' in render_json(report)
