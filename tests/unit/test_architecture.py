"""The house rules, checked: imports go one way (schema <- ingest <- analysis <- run <- cli, analysis <- report <- cli; the
training side imports only the schema), no import circle, no module over 500 lines, no function over
cyclomatic complexity 15, and the public API is what the packages' __all__ lists say."""

from __future__ import annotations

import ast
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.launch import REPO

PACKAGES = ("logkit", "trainer_hooks")
# (importer prefix, what it must never import)
FORBIDDEN = (
    ("logkit.schema", ("logkit.ingest", "logkit.analysis", "logkit.run", "logkit.report", "logkit.cli", "trainer_hooks")),
    ("logkit.ingest", ("logkit.analysis", "logkit.run", "logkit.report", "logkit.cli", "trainer_hooks")),
    ("logkit.analysis", ("logkit.run", "logkit.report", "logkit.cli", "trainer_hooks")),
    ("logkit.run", ("logkit.report", "logkit.cli", "trainer_hooks")),
    ("logkit.report", ("logkit.run", "logkit.cli", "trainer_hooks")),
    ("trainer_hooks", ("logkit.ingest", "logkit.analysis", "logkit.run", "logkit.report", "logkit.cli")),
)


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            name = ".".join(path.relative_to(REPO).with_suffix("").parts)
            out[name.removesuffix(".__init__")] = path
    return out


def _imports(path: Path, modules: dict) -> set[str]:
    """The project modules ``path`` imports (at any depth of the file: lazy imports count)."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                full = f"{node.module}.{alias.name}"
                found.add(full if full in modules else node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return {m for m in found if m in modules}


@pytest.fixture(scope="module")
def graph() -> dict[str, set[str]]:
    modules = _modules()
    return {m: _imports(p, modules) for m, p in modules.items()}


def test_imports_go_one_way(graph):
    bad = [(m, t) for m, targets in graph.items() for t in targets
           for importer, forbidden in FORBIDDEN if m.startswith(importer) and t.startswith(forbidden)]
    assert not bad


def test_no_import_circle(graph):
    # a package's __init__ importing its own submodules is how packages work, not a circle
    edges = {m: {t for t in targets if not t.startswith(m + ".")} for m, targets in graph.items()}
    state: dict[str, int] = {}

    def visit(m, path):
        state[m] = 1
        for t in edges.get(m, ()):
            assert state.get(t) != 1, " -> ".join(path[path.index(t):] + [t]) if t in path else (m, t)
            if t not in state:
                visit(t, path + [t])
        state[m] = 2

    for m in edges:
        if m not in state:
            visit(m, [m])


def test_modules_stay_small():
    sizes = {m: len(p.read_text(encoding="utf-8").splitlines()) for m, p in _modules().items()}
    assert not {m: n for m, n in sizes.items() if n > 500}


@pytest.mark.skipif(shutil.which("ruff", path=str(Path(sys.executable).parent)) is None, reason="ruff not installed")
def test_no_function_over_complexity_15():
    ruff = shutil.which("ruff", path=str(Path(sys.executable).parent))
    proc = subprocess.run([ruff, "check", "--select", "C901", "--config", "lint.mccabe.max-complexity = 15",
                           "--output-format", "concise", *PACKAGES], cwd=REPO, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stdout


def test_the_public_api():
    import logkit
    import logkit.report
    import trainer_hooks

    assert set(logkit.__all__) == {"__version__", "load_session", "load_sessions", "Session", "analyze", "Analysis",
                                   "report"}
    for name in logkit.__all__:
        assert getattr(logkit, name) is not None
    for name in logkit.report.__all__:
        assert callable(getattr(logkit.report, name)) or name == "PLOTS"
    assert {"LogkitCallback", "TrainingLogger"} <= set(trainer_hooks.__all__)


# What analysis may not touch: files, processes, threads, the network, and the floors that do.
IMPURE = ("os", "io", "pathlib", "shutil", "tempfile", "glob", "subprocess", "multiprocessing", "concurrent",
          "threading", "asyncio", "socket", "signal", "pickle", "distributed", "dask", "logkit.run")


def test_analysis_is_pure_by_its_imports():
    """``logkit.analysis`` imports nothing that reads files or starts processes (``pathlib.PurePath``,
    which only cuts names, excepted) and never calls ``open``."""
    bad = []
    for name, path in _modules().items():
        if not name.startswith("logkit.analysis"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                bad += [(name, a.name) for a in node.names if a.name.split(".")[0] in IMPURE]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                top = node.module.split(".")[0]
                if (top in IMPURE or node.module.startswith("logkit.run")) and not (
                        node.module == "pathlib" and {a.name for a in node.names} == {"PurePath"}):
                    bad.append((name, node.module))
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "open":
                bad.append((name, "open()"))
    assert not bad


CLOCKS = ("now", "utcnow", "today", "time", "monotonic", "perf_counter", "time_ns", "monotonic_ns",
          "perf_counter_ns", "process_time")


def test_analysis_reads_no_clock():
    """``logkit.analysis`` is given the time (the live alerts' ``now`` and wall time), never reads it: no
    ``time`` module, no ``datetime.now()`` / ``date.today()``; so every rule is tested with a fake clock."""
    bad = []
    for name, path in _modules().items():
        if not name.startswith("logkit.analysis"):
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                bad += [(name, a.name) for a in node.names if a.name.split(".")[0] == "time"]
            elif isinstance(node, ast.ImportFrom) and node.module == "time":
                bad.append((name, "from time"))
            elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CLOCKS
                  and ast.unparse(node.func.value).split(".")[-1] in ("datetime", "date", "time", "pd.Timestamp",
                                                                      "Timestamp")):
                bad.append((name, ast.unparse(node.func)))
    assert not bad


def test_analysis_runs_with_files_and_processes_forbidden(monkeypatch):
    """Every sample folder analysed while opening a file, stat-ing a path or starting a process raises."""
    import builtins
    import io
    import os
    import subprocess

    from logkit.analysis import analyze
    from logkit.run.load import load_sessions

    sessions = load_sessions(REPO / "sample_logs")
    assert len(sessions) > 20

    touched = []

    def refuse(name):
        def call(*args, **kwargs):
            touched.append((name, args[:1]))
            raise PermissionError(f"analysis may not call {name}")
        return call

    analysis = None
    try:
        for target, attr in ((builtins, "open"), (io, "open"), (os, "open"), (os, "stat"), (os, "listdir"),
                             (os, "scandir"), (subprocess, "Popen"), (os, "fork")):
            monkeypatch.setattr(target, attr, refuse(f"{target.__name__}.{attr}"))
        analysis = analyze(sessions)
    except PermissionError:
        pass
    finally:
        monkeypatch.undo()
    assert not touched
    assert len(analysis.scaling.sessions) == len(sessions)


# ``.get("name")`` on a result row turns a renamed column into a silent "n/a": renderers read rows by
# attribute (``Analysis.rows``: typed rows that refuse a missing column; jinja2's StrictUndefined
# raises on a misspelled one). What may still be read with ``.get("name")``: (file, receiver, key).
GET_ALLOWED = {
    ("logkit/report/live_view.py", "f.extra", "step"),  # Finding.extra: kind-specific facts, open by design
}
_TEMPLATE_GET = re.compile(r"""([\w.\])]+)\.get\(\s*(['"])([^'"]*)\2""")


def _literal_gets() -> set[tuple[str, str, str]]:
    """Every ``receiver.get("literal", ...)`` in the report's Python and templates: (file, receiver, key)."""
    found = set()
    for path in sorted((REPO / "logkit" / "report").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get"
                    and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.add((path.relative_to(REPO).as_posix(), ast.unparse(node.func.value), node.args[0].value))
    for path in sorted((REPO / "logkit" / "templates").rglob("*.j2")):
        for m in _TEMPLATE_GET.finditer(path.read_text(encoding="utf-8")):
            found.add((path.relative_to(REPO).as_posix(), m[1], m[3]))
    return found


def test_renderers_read_no_row_with_get_of_a_literal():
    assert _literal_gets() - GET_ALLOWED == set()


def test_the_get_check_sees_python_and_templates(tmp_path, monkeypatch):
    """The check finds ``.get("name")`` in a renderer and in a template (so a passing check means something)."""
    report, templates = tmp_path / "logkit" / "report", tmp_path / "logkit" / "templates"
    report.mkdir(parents=True)
    templates.mkdir(parents=True)
    (report / "x.py").write_text("def f(r):\n    return r.get('busbw_mb_s'), r.get(key), d.get('a', 1)\n")
    (templates / "x.html.j2").write_text('{{ r.get("p50_ms") | fmt(".2f") }} {{ plots.get(name) }}\n')
    monkeypatch.setattr(sys.modules[__name__], "REPO", tmp_path)
    assert _literal_gets() == {("logkit/report/x.py", "r", "busbw_mb_s"), ("logkit/report/x.py", "d", "a"),
                               ("logkit/templates/x.html.j2", "r", "p50_ms")}
