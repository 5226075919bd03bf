"""A finished real 2-rank run replayed through ``analyze_logs LOGS --follow --json`` as a user types it:
the view is started on a folder that does not exist yet, the run's rank streams are then written into
it in pieces, as the run wrote them, and the view exits by itself once both ranks' ``session_end`` is
read. Its last record names the straggler, with the cause, and gives the findings that
``analyze_logs LOGS --performance --json`` and ``--diagnose --json`` give for the same files.

The runs are sample_logs/stragglers (real accelerate runs with a delay injected on one rank, in one
phase): which rank and which cause is in the folder's name, the test's independent oracle.
"""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

import orjson
import pytest

from tests.support.launch import BIN, REPO

PIECES = 4


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(BIN / "analyze_logs"), *args], capture_output=True, text=True, timeout=120)


def _replay_through_follow(src: Path, logs: Path) -> list[dict]:
    """``--follow --json`` on ``logs`` while ``src``'s rank streams are written into it piece by piece."""
    view = subprocess.Popen([str(BIN / "analyze_logs"), str(logs), "--follow", "--json", "--refresh", "0.2",
                             "--follow-timeout", "60"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        dest = logs / src.name
        time.sleep(0.5)
        dest.mkdir(parents=True)
        streams = {p.name: p.read_bytes().splitlines(keepends=True) for p in sorted(src.glob("*_rank*.jsonl"))}
        for i in range(PIECES):
            for name, lines in streams.items():
                with open(dest / name, "ab") as fh:
                    fh.write(b"".join(lines[len(lines) * i // PIECES: len(lines) * (i + 1) // PIECES]))
            time.sleep(0.6)  # a refresh or more between pieces: the view reads the run as it grows
        out, err = view.communicate(timeout=90)
    finally:
        view.kill()
    assert view.returncode == 0, err.decode()
    return [orjson.loads(line) for line in out.splitlines() if line.strip()]


@pytest.mark.parametrize("name", ["data_rank1_25ms", "backward_rank0_25ms"])
def test_the_live_views_last_record_says_what_the_batch_analysis_says(tmp_path, name):
    (src,) = (REPO / "sample_logs" / "stragglers" / name).iterdir()
    docs = _replay_through_follow(src, tmp_path / "logs")
    assert len([d for d in docs if d["sessions"]]) >= 2  # the run was seen growing, not only at its end
    last = docs[-1]
    assert last["all_ended"]
    (live,) = last["sessions"]

    perf = _cli(str(tmp_path / "logs"), "--performance", "--json", "--no-cache")
    diag = _cli(str(tmp_path / "logs"), "--diagnose", "--json", "--no-cache")
    assert perf.returncode == 0 and diag.returncode == 0, perf.stderr + diag.stderr
    (named,) = [r for r in orjson.loads(perf.stdout)["stragglers"] if r["is_straggler"]]

    slowed_rank = int(name.split("_rank")[1][0])
    cause = "data" if name.startswith("data") else "compute"
    assert named["rank"] == slowed_rank and named["cause"] == cause  # the batch analysis is right
    straggler = live["straggler"]
    assert (straggler["rank"], straggler["is_straggler"], straggler["cause"]) == (slowed_rank, True, cause)
    assert straggler["last_arrival_share"] == pytest.approx(named["last_arrival_share"], rel=1e-9)

    def kinds_and_ranks(findings):
        return sorted((f["kind"], f.get("rank"), f["severity"]) for f in findings)

    assert kinds_and_ranks(live["findings"]) == kinds_and_ranks(orjson.loads(diag.stdout)["findings"])
    assert any(f["kind"] == "straggler" for f in live["findings"])
