"""The HTML report opened in headless Chromium: it renders, with its plots, and makes no network request.

Chromium is driven through chromedriver's W3C WebDriver HTTP API with the standard library
(no selenium). The Debian packages ``chromium`` and ``chromium-driver`` are installed when
missing (as root, with apt-get); the test is skipped, saying why, when that is impossible.
Network: the page's Resource Timing entries must be empty (data: URIs are not fetched) and
Chromium's own net log must hold no request initiated by the page (requests the browser
process makes for itself, such as its update checks, have the initiator "not an origin").
The screenshot is kept as ``tests/e2e/artifacts/report_browser.png`` (ignored by git).

At a laptop's width (a 1280 px wide window), the reports of several ``sample_logs/`` folders are
measured with JavaScript in the page, every "More columns" fold and definition opened: no table is
wider than its box or the viewport, the page does not scroll sideways, and the verdict, the page's
first content, names the straggler's rank and cause (``tests/e2e/artifacts/report_widths.json`` keeps
the widths). The top of the two-rank why_slow report is kept as ``report_top.png`` beside it;
with ``LOGKIT_DOCS_SCREENSHOT=1`` it is also written to ``docs/images/report_top_1280.png`` (the
README's picture).
"""

from __future__ import annotations

import base64
import json
import os
import re
import shutil
import socket
import struct
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from tests.support.launch import REPO
from tests.support.synth import write_session

ARTIFACTS = Path(__file__).resolve().parent / "artifacts"
SCREENSHOT = ARTIFACTS / "report_browser.png"
FIXTURES = REPO / "sample_logs" / "qlora_tiny_cpu" / "logs"
CHROME_FLAGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
    "--disable-background-networking", "--disable-component-update", "--disable-sync",
    "--disable-dev-shm-usage", "--window-size=1400,2200", '--host-resolver-rules=MAP * ~NOTFOUND',
]
LAPTOP = (1280, 900)  # a laptop's window: the width every table must fit
# the folders whose reports are measured at that width: (name, folder, straggler: (rank, cause words) or None)
LAYOUT_FOLDERS = (
    ("why_slow", "sample_logs/why_slow/logs", (1, "data loading")),  # CPU: 1 rank, and 2 with rank 1's data slow
    ("data_rank1", "sample_logs/stragglers/data_rank1_25ms", (1, "data loading")),
    ("hang", "sample_logs/why_slow/hang", None),  # rank 1 hangs before its gradient sync; Flight Recorder dumps
    ("gpu", "sample_logs/gpu", None),  # the real GPU runs and captures
    ("root", "sample_logs", None),  # every session of every folder
)
DOCS_SCREENSHOT = REPO / "docs" / "images" / "report_top_1280.png"
# every table's width against its box and the viewport, every fold opened first
MEASURE = """
document.querySelectorAll('details').forEach(d => { d.open = true; });
const vw = document.documentElement.clientWidth;
const tables = [...document.querySelectorAll('table')].map(t => {
  return {section: (t.closest('section') || {}).id || '', folded: !!t.closest('details'),
          head: [...t.rows[0].cells].slice(0, 3).map(c => c.textContent.trim()).join(' | '),
          scroll_width: t.scrollWidth, box_width: t.parentElement.clientWidth,
          grid_width: Math.ceil(t.rows[0].getBoundingClientRect().width),
          right: Math.ceil(t.getBoundingClientRect().right)};
});
return {viewport: vw, page_width: document.documentElement.scrollWidth, tables};
"""
# the verdict, where it stands, and what comes before it
VERDICT = """
const v = document.querySelector('#overview .verdict');
const first = document.querySelector('#overview > :not(h2)');
const table = document.querySelector('table');
return {text: v ? v.innerText : null, first: first === v, top: v ? v.getBoundingClientRect().top : null,
        height: window.innerHeight, before_tables: !!(v && table && (v.compareDocumentPosition(table) & 4)),
        gpus: document.querySelector('#gpus').innerText,
        images: [...document.images].map(i => i.alt), diagnosis: document.querySelector('#diagnosis').innerText};
"""


def _browser() -> tuple[str, str]:
    """Paths of chromium and chromedriver, installing the Debian packages when they are missing."""
    def found():
        return shutil.which("chromium") or shutil.which("chromium-browser"), shutil.which("chromedriver")

    chrome, driver = found()
    if chrome and driver:
        return chrome, driver
    if os.environ.get("LOGKIT_NO_APT"):
        pytest.skip("chromium/chromedriver missing and LOGKIT_NO_APT is set")
    if not shutil.which("apt-get") or os.geteuid() != 0:
        pytest.skip("chromium/chromedriver missing, and apt-get as root is not available to install them")
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    try:
        subprocess.run(["apt-get", "update", "-qq"], check=True, capture_output=True, timeout=300, env=env)
        subprocess.run(["apt-get", "install", "-y", "-qq", "chromium", "chromium-driver"], check=True,
                       capture_output=True, timeout=600, env=env)
    except (subprocess.SubprocessError, OSError) as exc:
        tail = getattr(exc, "stderr", b"") or b""
        pytest.skip(f"could not install chromium and chromium-driver with apt-get (no network?): "
                    f"{exc}; {tail[-300:].decode(errors='replace')}")
    chrome, driver = found()
    if not (chrome and driver):
        pytest.skip("apt-get ran, but chromium or chromedriver is still not on PATH")
    return chrome, driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class WebDriver:
    """The few WebDriver commands the test needs, over chromedriver's HTTP API on localhost."""

    def __init__(self, driver: str, chrome: str, args: list[str], log_path: Path) -> None:
        self.port = _free_port()
        self.proc = subprocess.Popen([driver, f"--port={self.port}", f"--log-path={log_path}"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self.base = f"http://127.0.0.1:{self.port}"
        deadline = time.monotonic() + 20
        while True:
            try:
                self._call("GET", "/status")
                break
            except OSError:
                if time.monotonic() > deadline or self.proc.poll() is not None:
                    self.proc.kill()
                    raise
                time.sleep(0.1)
        caps = {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {
            "binary": chrome, "args": args}}}}
        self.session = self._call("POST", "/session", caps)["sessionId"]

    def _call(self, method: str, path: str, body: dict | None = None):
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        # chromedriver listens on localhost only: bypass any proxy settings of the environment
        opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        with opener.open(req, timeout=60) as resp:
            return json.loads(resp.read())["value"]

    def cmd(self, method: str, path: str, body: dict | None = None):
        return self._call(method, f"/session/{self.session}{path}", body)

    def get(self, url: str) -> None:
        self.cmd("POST", "/url", {"url": url})

    def script(self, source: str):
        return self.cmd("POST", "/execute/sync", {"script": source, "args": []})

    def screenshot(self) -> bytes:
        return base64.b64decode(self.cmd("GET", "/screenshot"))

    def quit(self) -> None:
        try:
            self._call("DELETE", f"/session/{self.session}")
        except OSError:
            pass
        finally:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def _page_requests(net_log: Path) -> list[str]:
    """URLs of requests in Chromium's net log that a page initiated (not the browser itself)."""
    text = net_log.read_text(encoding="utf-8", errors="replace").rstrip()
    try:
        doc = json.loads(text)
    except json.JSONDecodeError:  # the browser was stopped before it closed the JSON array
        doc = json.loads(text.rstrip(",") + "]}")
    types = {v: k for k, v in doc["constants"]["logEventTypes"].items()}
    urls = []
    for e in doc["events"]:
        p = e.get("params") or {}
        url = p.get("url")
        if types.get(e["type"]) == "URL_REQUEST_START_JOB" and url and p.get("initiator") != "not an origin":
            if not url.startswith(("file:", "data:")):
                urls.append(url)
    return urls


def _report(tmp_path) -> Path:
    from logkit.analysis.analyze import analyze
    from logkit.report.html import write_html
    from logkit.run.load import load_sessions

    root = tmp_path / "logs"
    shutil.copytree(FIXTURES, root)
    write_session(root, "x<script>alert(1)", world_size=2, gpu_count=2, step_times=[0.3] * 8,
                  start="2026-11-22T03:00:00+00:00", message_extra="<script>bad()</script>")
    sessions = load_sessions(root)
    return write_html(analyze(sessions), tmp_path / "report.html")


def _open(chrome, driver, tmp_path, page: Path, name: str):
    net_log = tmp_path / f"{name}_netlog.json"
    wd = WebDriver(driver, chrome, CHROME_FLAGS + [f"--user-data-dir={tmp_path / (name + '_profile')}",
                                                   f"--log-net-log={net_log}"],
                   tmp_path / f"{name}_chromedriver.log")
    try:
        wd.get(page.resolve().as_uri())
        state = wd.script("""
            return {
              title: document.title,
              headings: [...document.querySelectorAll('h2')].map(h => h.textContent),
              images: [...document.images].map(i => ({alt: i.alt, complete: i.complete, w: i.naturalWidth,
                                                      h: i.naturalHeight, data: i.src.startsWith('data:image/png;base64,')})),
              resources: performance.getEntriesByType('resource').map(r => r.name),
              scripts: document.scripts.length,
              text: document.body.innerText,
            };""")
        shot = wd.screenshot()
    finally:
        wd.quit()
    return state, shot, net_log


@pytest.mark.slow  # about 15-20 s: report with plots, then Chromium
def test_report_renders_in_headless_chromium_without_network(tmp_path):
    chrome, driver = _browser()
    page = _report(tmp_path)
    html = page.read_text(encoding="utf-8")
    assert not re.search(r"""(src|href)\s*=\s*["']?\s*(https?:)?//|url\(\s*["']?\s*(https?:)?//""", html, re.I)

    state, shot, net_log = _open(chrome, driver, tmp_path, page, "report")
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("*\n", encoding="utf-8")
    SCREENSHOT.write_bytes(shot)

    assert state["headings"] == ["Overview", "Comparison", "Forecast and counterfactual", "Communication", "Performance and stragglers", "GPUs",
                                 "Training curves", "Where the hours went", "Diagnosis", "Parse diagnostics"]
    alts = {i["alt"] for i in state["images"]}  # no run here times per-step phases: that chart is a sentence
    assert alts == {"training_comparison.png", "loss_curves.png", "throughput.png", "gpu_utilization.png",
                    "bandwidth_vs_size.png", "step_time_per_rank.png", "forecast.png"}
    assert "Where each rank's step goes: no per-step phases" in state["text"]
    for img in state["images"]:  # every plot decoded by the browser
        assert img["data"] and img["complete"] and img["w"] >= 500 and img["h"] >= 300, img
    assert state["scripts"] == 0  # the session id's "<script>" stayed text
    assert "x<script>alert(1)" in state["text"]
    assert state["resources"] == []  # nothing fetched by the page
    assert _page_requests(net_log) == []
    assert shot[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", shot[16:24])
    assert width >= 1000 and height >= 800


@pytest.mark.slow
def test_network_check_catches_a_page_request(tmp_path):
    """Control: a page that does ask for a remote image is seen by both checks."""
    chrome, driver = _browser()
    page = tmp_path / "leaky.html"
    page.write_text('<!DOCTYPE html><html><body><h2>x</h2><img src="http://example.invalid/p.png"></body></html>',
                    encoding="utf-8")
    state, _, net_log = _open(chrome, driver, tmp_path, page, "leaky")
    assert any("example.invalid" in u for u in state["resources"] + _page_requests(net_log))


def _laptop_reports(tmp_path) -> list[tuple[str, Path, tuple | None]]:
    """The report of each of ``LAYOUT_FOLDERS``, read as ``analyze_logs`` reads a folder, with its plots."""
    from logkit.analysis.analyze import analyze
    from logkit.report.html import write_html
    from logkit.run.load import load_for_analysis

    pages = []
    for name, folder, straggler in LAYOUT_FOLDERS:
        loaded = load_for_analysis(REPO / folder)
        analysis = analyze(loaded.sessions, comm_parts=loaded.comm_parts)
        pages.append((name, write_html(analysis, tmp_path / f"{name}.html"), straggler))
    return pages


def _too_wide(measured: dict) -> list[str]:
    """Every table wider than its box or the viewport, and the page if it scrolls sideways."""
    vw = measured["viewport"]
    bad = [f"{t['section']}{' (folded)' if t['folded'] else ''} [{t['head']}]: {t['scroll_width']} px in a box of "
           f"{t['box_width']} px, right edge {t['right']} of {vw}"
           for t in measured["tables"] if t["scroll_width"] > t["box_width"] or t["right"] > vw]
    if measured["page_width"] > vw:
        bad.append(f"the page: {measured['page_width']} px wide in a viewport of {vw}")
    return bad


@pytest.mark.slow  # about 40 s: five reports with their plots (every sample session), then Chromium
def test_every_table_fits_a_laptop_window_and_the_verdict_comes_first(tmp_path):
    chrome, driver = _browser()
    pages = _laptop_reports(tmp_path)
    flags = [f for f in CHROME_FLAGS if not f.startswith("--window-size")] + [
        f"--window-size={LAPTOP[0]},{LAPTOP[1]}", f"--user-data-dir={tmp_path / 'laptop_profile'}"]
    wd = WebDriver(driver, chrome, flags, tmp_path / "laptop_chromedriver.log")
    widths, problems, views = {}, [], {}
    try:
        for name, page, _ in pages:
            wd.get(page.resolve().as_uri())
            views[name] = wd.script(VERDICT)  # before the folds are opened: the page as it opens
            if name == "why_slow":
                top = wd.screenshot()
            widths[name] = measured = wd.script(MEASURE)
            problems += [f"{name}: {p}" for p in _too_wide(measured)]
    finally:
        wd.quit()
    ARTIFACTS.mkdir(exist_ok=True)
    (ARTIFACTS / ".gitignore").write_text("*\n", encoding="utf-8")
    (ARTIFACTS / "report_widths.json").write_text(json.dumps(widths, indent=1), encoding="utf-8")
    (ARTIFACTS / "report_top.png").write_bytes(top)
    if os.environ.get("LOGKIT_DOCS_SCREENSHOT"):
        DOCS_SCREENSHOT.parent.mkdir(parents=True, exist_ok=True)
        DOCS_SCREENSHOT.write_bytes(top)

    assert struct.unpack(">II", top[16:24])[0] == LAPTOP[0]  # the window was as wide as asked
    assert all(m["viewport"] <= LAPTOP[0] and len(m["tables"]) >= 5 for m in widths.values()), widths
    assert not problems, "\n".join(problems)
    assert views["hang"]["text"] and views["root"]["text"]  # the gpu folder's single runs have none
    for name, _, straggler in pages:
        view = views[name]
        if not view["text"] and not straggler:
            continue
        # the verdict opens the report: the first thing under Overview, above every table, on the first screen
        assert view["text"] and view["first"] and view["before_tables"], (name, view)
        assert 0 <= view["top"] < view["height"] / 2, (name, view["top"])
        if straggler:
            rank, cause = straggler
            assert f"Rank {rank} holds the others back ({cause})" in view["text"], (name, view["text"])
    why = views["why_slow"]  # a CPU run: a sentence, no empty GPU chart
    assert "No GPU snapshots: CPU runs" in why["gpus"] and "gpu_utilization.png" not in why["images"]
    hang = views["hang"]  # the culprit named by the verdict, its Flight Recorder dump among the evidence
    assert "Hang: rank(s) 1 never reached the gradient sync" in hang["text"]
    assert "flight_recorder_rank1.pkl" in hang["diagnosis"]
    assert "gpu_utilization.png" in views["gpu"]["images"]  # the real GPU runs keep their chart


def test_the_readme_shows_the_report_at_a_laptops_width():
    """The README's picture of the report: a PNG in the repository, named by a path relative to its root."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    relative = DOCS_SCREENSHOT.relative_to(REPO).as_posix()
    assert re.search(rf"!\[[^\]]+\]\({re.escape(relative)}\)", readme)
    png = DOCS_SCREENSHOT.read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and struct.unpack(">II", png[16:24])[0] == LAPTOP[0]
    assert len(png) < 300_000
