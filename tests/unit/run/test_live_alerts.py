"""The live view's alerts from rank streams the test writes, followed with a fake clock: a stall raised
once at the top of its session's block and as its own NDJSON line, then cleared; NaN/Inf at once; a
straggler that appears; ``follow(alert_cmd=...)`` hands each alert to the command (which a failing or
hanging command does not stop)."""

from __future__ import annotations

import io
import time

import orjson

from logkit.report.live_view import NdjsonView
from logkit.run.follow import Follower, follow
from logkit.schema.records import ANOMALY, TRAINING_STEP
from tests.unit.report.test_live import Run, rec, render


def test_a_stall_is_raised_once_naming_the_rank_behind_and_cleared_when_it_moves(tmp_path):
    run = Run(tmp_path, "s1", 2)
    run.steps(1, 30)
    run.steps(31, 31, ranks=[0])  # rank 0 finished step 31; rank 1 never does
    follower = Follower(tmp_path, now=0.0)
    raised = []
    for now in (0.0, 10.0, 29.0, 30.5, 31.5, 45.0):
        snap, _ = follower.step(now)
        raised += [(now, a) for a in snap.alert_events]
    (now, alert), = raised
    assert now == 30.5 and alert.kind == "stall" and alert.rank == 1 and alert.state == "raised"
    assert "rank 1 stopped at step 30 while rank 0 reached step 31" in alert.detail
    lines = {n: line for n, line in enumerate(run.path(1).read_text().splitlines(), start=1)}
    last = max(n for n, line in lines.items() if TRAINING_STEP.type in line)
    assert alert.evidence == (f"{run.path(1).name}:{last}",)
    (shown,) = snap.sessions[0].alerts
    assert shown == alert
    text = render(snap)
    assert text.index("ALERT stall · rank 1") < text.index("\ns1 ") and "rank 1 stopped at step 30" in text
    # the NDJSON: the alert's own line at the refresh that raised it, then the snapshot (its alerts listed)
    out = io.BytesIO()
    view = NdjsonView(out, io.StringIO())
    run.steps(31, 32, ranks=[1])
    snap, _ = follower.step(46.0)
    view.update(snap)
    first, second = [orjson.loads(x) for x in out.getvalue().splitlines()]
    assert first["alert"]["kind"] == "stall" and first["alert"]["state"] == "cleared"
    assert first["alert"]["cleared"] == "rank 1 finished step 32" and first["alert"]["rank"] == 1
    assert "alert_events" not in second and second["sessions"][0]["alerts"] == [first["alert"]]
    assert "cleared" in render(snap)


def test_a_nan_loss_is_raised_at_the_next_refresh(tmp_path):
    run = Run(tmp_path, "s1", 2)
    run.steps(1, 10)
    follower = Follower(tmp_path, now=0.0)
    snap, _ = follower.step(0.0)
    assert snap.alert_events == ()
    run.write(1, rec(ANOMALY, "s1", 1, 2, 11, subkind="nan_loss", value=None, threshold=None),
              rec(TRAINING_STEP, "s1", 1, 2, 11, step_time_s=0.1, loss=None))
    snap, _ = follower.step(0.5)
    (alert,) = snap.alert_events
    assert alert.kind == "nonfinite" and alert.rank == 1 and alert.detail == "the logged loss is NaN at step 11 on rank 1"
    assert alert.evidence == (f"{run.path(1).name}:{len(run.path(1).read_text().splitlines()) - 1}",)
    assert follower.step(1.0)[0].alert_events == ()
    run.steps(11, 12, ranks=[0])
    run.steps(12, 12, ranks=[1])  # a finite loss after it
    (cleared,) = follower.step(1.5)[0].alert_events
    assert cleared.state == "cleared" and cleared.kind == "nonfinite"


def test_a_straggler_that_appears_is_raised(tmp_path):
    run = Run(tmp_path, "s1", 2)
    run.steps(1, 60)
    follower = Follower(tmp_path, now=0.0)
    events = list(follower.step(0.0)[0].alert_events)
    for k in range(1, 4):  # rank 1 turns 1.5x slower: the window's table names it, analysis after analysis
        run.steps(60 + 20 * k - 19, 60 + 20 * k, slow={1: 1.5})
        events += follower.step(100.0 * k)[0].alert_events
    (alert,) = events
    assert alert.kind == "straggler" and alert.rank == 1 and alert.detail.startswith("Rank 1 is a straggler")
    assert alert.evidence and alert.evidence[0].startswith(run.path(1).name)


class Recorder:
    """A view that keeps what it is given, and writes the run's next records at its updates."""

    def __init__(self, script):
        self.script, self.snaps, self.warned, self.said = script, [], [], []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass

    def update(self, snap):
        self.snaps.append(snap)
        action = self.script.get(len(self.snaps))
        if action:
            action()

    def say(self, lines):
        self.said += lines

    def warn(self, line):
        self.warned.append(line)

    @staticmethod
    def end_lines(snap):
        return []


def nan_run(tmp_path):
    """A session that logs a NaN loss at the 2nd refresh and ends at the 4th."""
    run = Run(tmp_path / "logs", "s1", 2)
    run.steps(1, 5)

    def nan():
        for r in (0, 1):
            run.write(r, rec(ANOMALY, "s1", r, 2, 6, subkind="nan_loss"),
                      rec(TRAINING_STEP, "s1", r, 2, 6, step_time_s=0.1, loss=None))

    def end():
        run.end(0, "completed")
        run.end(1, "completed")

    return {2: nan, 4: end}


def test_the_alert_command_reads_each_alert_as_json(tmp_path):
    got = tmp_path / "got"
    got.mkdir()
    view = Recorder(nan_run(tmp_path))
    status = follow(tmp_path / "logs", view, refresh_s=0.05, alert_cmd=f"cat > {got}/$$.json")
    assert status == 0 and view.warned == []
    events = [a for s in view.snaps for a in s.alert_events]
    assert [(a.kind, a.state) for a in events] == [("nonfinite", "raised"), ("nonfinite", "cleared")]
    received = sorted((orjson.loads(p.read_bytes()) for p in got.glob("*.json")), key=lambda d: d["alert"]["state"])
    assert received == sorted(({"alert": a.to_dict()} for a in events), key=lambda d: d["alert"]["state"])


def test_a_failing_or_hanging_command_does_not_stop_the_view(tmp_path):
    view = Recorder(nan_run(tmp_path))
    began = time.monotonic()
    status = follow(tmp_path / "logs", view, refresh_s=0.05, alert_cmd="echo no hook here >&2; exit 3")
    assert status == 0 and len(view.snaps) >= 4
    assert view.warned == ["--alert-cmd failed: it exited with status 3: no hook here (later failures are counted, "
                           "not said)",
                           "--alert-cmd: 2 of its 2 runs failed (the first: it exited with status 3: no hook here)"]
    view = Recorder(nan_run(tmp_path / "again"))
    status = follow(tmp_path / "again" / "logs", view, refresh_s=0.05, alert_cmd="sleep 60")
    assert status == 0 and time.monotonic() - began < 20  # killed GRACE_S after the end, never waited for
    assert len(view.warned) == 2 and "still running when the view ended, and was killed" in view.warned[0]


def test_an_old_stall_record_does_not_name_a_rank(tmp_path):
    from logkit.schema.records import STALL

    run = Run(tmp_path, "s1", 2)
    run.steps(1, 10)
    run.write(1, rec(STALL, "s1", 1, 2, 11, phase="forward_backward", value=70.0, threshold=60.0))
    run.write(0, rec(STALL, "s1", 0, 2, 11, phase="gradient_sync", value=70.0, threshold=60.0))
    run.steps(11, 40)  # the stall of step 11 ended; every rank stopped after step 40 since
    follower = Follower(tmp_path, now=0.0)
    assert follower.step(0.0)[0].alert_events == () and follower.step(50.0)[0].alert_events == ()
    (alert,) = follower.step(54.5)[0].alert_events  # 90% of the limit: raised, no rank named
    assert alert.kind == "stall" and alert.rank is None and "every rank stopped after step 40" in alert.detail


def test_a_missing_folder_is_waited_for(tmp_path):
    follower = Follower(tmp_path / "logs", now=0.0)
    snap, grew = follower.step(0.0)
    assert snap.folder_missing and not grew and "waiting for logs to appear" in render(snap)
    Run(tmp_path / "logs", "s1", 1).steps(1, 3)
    snap, grew = follower.step(1.0)
    assert grew and not snap.folder_missing and [s.session_id for s in snap.sessions] == ["s1"]


def test_the_views_say_a_warning_on_stderr(capsys):
    from rich.console import Console

    from logkit.report.live_view import TerminalView

    TerminalView("logs", console=Console(file=io.StringIO())).warn("--alert-cmd failed: boom")
    NdjsonView(io.BytesIO()).warn("--alert-cmd: 1 of its 1 runs failed")
    assert capsys.readouterr().err.splitlines() == ["--alert-cmd failed: boom", "--alert-cmd: 1 of its 1 runs failed"]
