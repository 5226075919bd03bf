"""The verdict a real run prints when it ends: a 1-rank run of the loop's model (the baseline, its
verdict off), then a 2-rank run with 50 ms more data loading on rank 1 (``accelerate launch``, gloo).
Rank 0 prints, once, the verdict that ``analyze_logs LOGDIR`` opens with for that session (the two texts
compared), naming rank 1 and its cause, and the commands that show more: the session's report and the
comparison with the 1-rank run; summary.txt holds the same lines after the summary."""

from __future__ import annotations

import pytest

from logkit.schema import SessionFiles
from tests.support.launch import accelerate_launch, analyze_logs, session_dirs

pytestmark = pytest.mark.slow

LOOP = ["--steps", "30", "--hidden", "1024", "--batch-size", "64", "--sleep", "0.1"]


def test_a_2_rank_run_with_a_data_straggler_prints_the_verdict_at_its_end(tmp_path):
    logs = tmp_path / "logs"
    accelerate_launch("examples/train_accelerate_loop.py", [*LOOP, "--steps", "5", "--log-dir", "logs"], 1,
                      cwd=tmp_path, env={"LOGKIT_END_VERDICT": "0"})
    (baseline,) = session_dirs(logs)
    run = accelerate_launch("examples/train_accelerate_loop.py",
                            [*LOOP, "--log-dir", "logs", "--slow-rank", "1", "--slow-data", "0.05"], 2,
                            cwd=tmp_path, env={"LOGKIT_END_VERDICT": "1"})
    (session,) = [s for s in session_dirs(logs) if s != baseline]

    # what analyze_logs prints for that session: its verdict block comes first
    cli = analyze_logs(str(logs / session.name), "--no-cache", cwd=tmp_path)
    assert cli.returncode == 0, cli.stderr
    verdict = cli.stdout.split("\n\n", 1)[0]
    assert verdict.startswith("VERDICT\n")
    assert "Rank 1 holds the others back (data loading): give rank 1's DataLoader more workers" in verdict

    # printed once (rank 0 only), at the end, with the commands that show more
    more = (f"More: analyze_logs logs/{session.name} --performance --diagnose (--report writes the HTML report)\n"
            f"Compared with the 1-rank run {baseline.name} of the same model: analyze_logs logs --compare\n")
    assert run.stdout.count("VERDICT") == 1
    assert f"\n{verdict}\n\n{more}" in run.stdout, run.stdout
    assert "verdict is not available" not in run.stderr and "Rank 0's view" not in run.stdout

    # summary.txt: the summary, then the same lines and what they cost
    text = (session / SessionFiles(session.name).summary_txt).read_text()
    summary, appended = text.split(f"\n\n{verdict}\n\n{more}")
    assert summary.startswith("TRAINING SESSION SUMMARY\n") and "World size:        2" in summary
    seconds = float(appended.removeprefix("(made in ").split(" s at the end")[0])
    assert 0 < seconds < 30
    print(f"end verdict on rank 0 took {seconds:.2f} s")
