"""The redesign keeps behaviour: ``analyze_logs --json`` over every folder of ``sample_logs/`` gives
the figures of the golden snapshot (``tests/golden/``, taken before the redesign), to 1e-6, with the
same exit codes, alone and with each gate. Keys may be added, never moved or dropped; the
definitions' wording may change (their keys stay)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.e2e.golden.snapshot import FOLDERS, name_of, run, snapshot_root

GOLDEN = Path(__file__).resolve().parent / "golden"


def same(old, new, path: str = "$") -> list[str]:
    """Where ``new`` differs from ``old``: every key of ``old`` is in ``new`` with an equal value
    (numbers to 1e-6 relative); ``new`` may have more keys."""
    if isinstance(old, dict):
        if not isinstance(new, dict):
            return [f"{path}: was an object, now {type(new).__name__}"]
        out = []
        for key, value in old.items():
            if key not in new:
                out.append(f"{path}.{key}: missing")
            elif key == "definitions" and path == "$":
                out += [f"{path}.definitions.{k}: missing" for k in value if k not in new[key]]
            else:
                out += same(value, new[key], f"{path}.{key}")
        return out
    if isinstance(old, list):
        if not isinstance(new, list) or len(new) != len(old):
            return [f"{path}: list of {len(old)} became {new if not isinstance(new, list) else len(new)}"]
        return [d for i, (a, b) in enumerate(zip(old, new, strict=True)) for d in same(a, b, f"{path}[{i}]")]
    if isinstance(old, bool) or isinstance(new, bool) or not isinstance(old, (int, float)):
        return [] if old == new else [f"{path}: {old!r} became {new!r}"]
    if not isinstance(new, (int, float)):
        return [f"{path}: {old!r} became {new!r}"]
    return [] if math.isclose(old, new, rel_tol=1e-6, abs_tol=1e-9) else [f"{path}: {old!r} became {new!r}"]


def test_same_sees_a_changed_figure():
    assert same({"a": [{"x": 1.0}]}, {"a": [{"x": 1.0, "y": 2}]}) == []
    assert same({"a": [{"x": 1.0}]}, {"a": [{"x": 1.01}]}) == ["$.a[0].x: 1.0 became 1.01"]
    assert same({"a": 1}, {}) == ["$.a: missing"]
    assert same({"definitions": {"k": "old words"}}, {"definitions": {"k": "new words"}}) == []


@pytest.mark.parametrize("folder", FOLDERS, ids=[name_of(f) for f in FOLDERS])
def test_figures_and_exit_codes_as_before(folder, tmp_path):
    golden = json.loads((GOLDEN / f"{name_of(folder)}.json").read_text())
    path = str(snapshot_root(tmp_path / "root")) if folder == "." else golden["args"][0]
    proc = run([path, *golden["args"][1:]], str(tmp_path))
    assert proc.returncode == golden["exit_code"], proc.stderr
    diffs = same(golden["document"], json.loads(proc.stdout))
    assert not diffs, "\n".join(diffs[:40])
    for gate in golden["gates"]:
        assert run([path, *gate["args"][1:]], str(tmp_path)).returncode == gate["exit_code"], gate["args"]
