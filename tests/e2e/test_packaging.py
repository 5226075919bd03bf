"""One distribution holding logkit, trainer_hooks and the report templates; a cheap import."""

from __future__ import annotations

import subprocess
import sys
import zipfile

from tests.support.launch import REPO


def test_wheel_holds_both_packages_and_the_templates(tmp_path):
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp_path), str(REPO)],
                   check=True, capture_output=True, timeout=300)
    (wheel,) = tmp_path.glob("logkit-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"logkit/schema/records.py", "logkit/cli.py", "trainer_hooks/callback.py",
            "logkit/templates/report.html.j2"} <= names
    meta = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("entry_points.txt"))).decode()
    assert "analyze_logs = logkit.cli:main" in meta
    metadata = zipfile.ZipFile(wheel).read(next(n for n in names if n.endswith("METADATA"))).decode()
    for extra in ("train", "qlora", "dev"):
        assert f"Provides-Extra: {extra}" in metadata
    # the metadata leaves the torch build to the user (GPU users keep their CUDA torch)
    assert "torch==" not in metadata


def test_import_logkit_loads_neither_torch_nor_pandas():
    code = "import sys, logkit, logkit.schema; print('torch' in sys.modules, 'pandas' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
