"""Output paths never escape the folder the user named, whatever a session id or file name holds.

Sessions whose ids (in their records and summary.json) are path escapes (``../../x``, an
absolute path, a name with a NUL-free slash mix) are analysed by the CLI as a user types it
with --report, --plot and --export; every file written must lie under the output folder, and
each session gets its own export folder.
"""

from __future__ import annotations

import os
from pathlib import Path

import orjson

from tests.support.launch import analyze_logs
from tests.support.synth import rank_file, summary_file, write_session

# Session ids come from file names: these are the names a folder entry can take that read as
# paths (the records and summary.json say the same).
HOSTILE = ["..", "...", ".", "-", "~"]


def _files(root: Path) -> set[Path]:
    return {Path(d) / f for d, _, fs in os.walk(root) for f in fs}


def _rename(folder: Path, sid: str, new_id: str) -> None:
    for rank in range(2):
        path = rank_file(folder, sid, rank)
        if not path.exists():
            continue
        recs = [orjson.loads(line) for line in path.read_bytes().splitlines()]
        for r in recs:
            r["session_id"] = new_id
        rank_file(folder, new_id, rank).write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in recs))
        path.unlink()
    doc = orjson.loads(summary_file(folder, sid).read_bytes())
    doc["session_id"] = new_id
    summary_file(folder, new_id).write_bytes(orjson.dumps(doc))
    summary_file(folder, sid).unlink()


def test_report_plots_and_export_stay_under_the_folders_named(tmp_path):
    logs, out = tmp_path / "logs", tmp_path / "work" / "out"
    for i, hostile in enumerate(HOSTILE):
        sid = f"run{i}"
        folder = write_session(logs, sid, world_size=1 + i % 2, step_times=[0.5] * 6)
        _rename(folder, sid, hostile)
    before = _files(tmp_path)
    res = analyze_logs(str(logs), "--no-cache", "--report", str(out / "report.html"), "--plot", str(out / "plots"),
                       "--export", "parquet", str(out / "export"))
    assert res.returncode == 0, res.stderr
    written = _files(tmp_path) - before
    assert written, "nothing written"
    outside = [p for p in written if not p.resolve().is_relative_to(out.resolve())]
    assert outside == []
    assert (out / "report.html").is_file() and any((out / "plots").glob("*.png"))
    exported = [p for p in (out / "export").iterdir() if (p / "meta.json").is_file()]
    ids = sorted(orjson.loads((p / "meta.json").read_bytes())["session_id"] for p in exported)
    assert ids == sorted(HOSTILE)  # one folder each, none overwritten
