"""One input through what ``analyze_logs`` does with a folder (discover, read through the engine, analyse,
render every report), and what counts as a failure: an exception (classed by its type and the logkit
function it came from), a read that outlasts ``TIME_LIMIT_S`` (a wait, a loop), or an impossible fact
in the JSON (a world size below 1, a negative rank or duration)."""

from __future__ import annotations

import os
import signal
import traceback
from contextlib import contextmanager
from pathlib import Path

import orjson

TIME_LIMIT_S = 60
SECTIONS = ["compare", "communication", "performance", "diagnose"]
# keys of the JSON document and the least each may be
_LEAST = {"world_size": 1, "total_batch_size": 1, "rank": 0, "duration_s": 0, "nodes": 1, "gpu_count": 0}


class Timeout(Exception):
    """The input took longer than ``TIME_LIMIT_S``."""


class ImpossibleFact(Exception):
    """The JSON states what cannot be."""


@contextmanager
def time_limit(seconds: float):
    """Raise ``Timeout`` in this (main) thread after ``seconds`` (a blocked ``open`` is interrupted too)."""
    def alarm(signum, frame):
        raise Timeout(f"no answer in {seconds} s")

    old = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)


def write_files(root: Path, files: dict[str, bytes]) -> None:
    for rel, data in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)


def impossible(doc, path: str = "") -> list[str]:
    """The facts of the JSON ``doc`` that cannot be (a key of ``_LEAST`` below its least)."""
    out = []
    if isinstance(doc, dict):
        for key, value in doc.items():
            least = _LEAST.get(key)
            if least is not None and isinstance(value, (int, float)) and not isinstance(value, bool) \
                    and value == value and value < least:
                out.append(f"{path}{key} = {value}")
            out += impossible(value, f"{path}{key}.")
    elif isinstance(doc, list):
        for i, value in enumerate(doc[:200]):
            out += impossible(value, f"{path}{i}.")
    return out


def examine(root: Path, follow_links: bool = False, html: bool = False) -> dict:
    """``root`` read and analysed as ``analyze_logs`` does, every report rendered: the sessions found and
    the diagnostics (files not read included) as text. Raises on a failure (see the module doc)."""
    from logkit.analysis import analyze
    from logkit.report import console
    from logkit.report.json_report import analysis_document, render_json
    from logkit.run.load import load_for_analysis

    notes: list[dict] = []
    loaded = load_for_analysis(root, cache=False, progress=False, notes=notes, follow_links=follow_links)
    said = [f"{n['file']}: {n['reason']}" for n in notes]
    if not loaded.sessions:
        return {"sessions": 0, "said": said}
    analysis = analyze(loaded.sessions, comm_parts=loaded.comm_parts)
    doc = orjson.loads(render_json(analysis_document(analysis, SECTIONS)))
    for render in (console.render_verdict, console.render_compare, console.render_communication,
                   console.render_performance, console.render_diagnose):
        render(analysis)
    if html:
        from logkit.report.html import render_html

        page = render_html(analysis, plots=False)
        if "<script>alert(1)</script>" in page:
            raise ImpossibleFact("a log's text ran as script in the HTML report")
    wrong = impossible(doc)
    if wrong:
        raise ImpossibleFact("; ".join(wrong[:5]))
    said += [f"{d.file}:{d.line}: {d.reason}" for d in analysis.rows("diagnostics")]
    return {"sessions": len(loaded.sessions), "said": said}


def failure_class(exc: BaseException) -> str:
    """``Type in module:function``: the innermost frame of logkit (or the emitter) it came through."""
    if isinstance(exc, (Timeout, ImpossibleFact)):
        return type(exc).__name__
    where = "outside logkit"
    for frame in traceback.extract_tb(exc.__traceback__):
        name = frame.filename.replace(os.sep, "/")
        for package in ("/logkit/", "/trainer_hooks/"):
            if package in name:
                where = f"{package.strip('/')}/{name.split(package, 1)[1]}:{frame.name}"
    return f"{type(exc).__name__} in {where}"
