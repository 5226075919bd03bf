"""The live view's state and renderers, from rank streams the test writes (records laid out by the
specs): window figures against numpy over the same rows, the straggler, ETA, findings newest
first, how a session ends (completed, failed with its error, interrupted, a rank lost), sessions
already over at the start, the many-rank summary, the NDJSON snapshot, Ctrl-C."""

from __future__ import annotations

import io
import os
import re
import time

import numpy as np
import orjson
import pytest
from rich.console import Console

from logkit.analysis import analyze
from logkit.report.live_view import NdjsonView, TerminalView, snapshot_view
from logkit.run import live_state as live_mod
from logkit.run.follow import Follower, follow
from logkit.run.live_end import SILENT_END_S
from logkit.run.live_state import SUMMARY_RANKS, WINDOW_STEPS, over_before_start
from logkit.run.load import load_sessions
from logkit.schema.files import SessionFiles
from logkit.schema.records import (
    ANOMALY,
    COMMUNICATION,
    ERROR,
    GPU_SNAPSHOT,
    RESOURCE_WARNING,
    SESSION_END,
    SESSION_START,
    STALL,
    TRAINING_STEP,
)
from tests.support.launch import REPO

TS = "2026-01-01T00:00:00.000000+00:00"
LATER = 60.0  # seconds between two refreshes of a test: the window is analysed again at each


def rec(spec, sid: str, rank: int, world: int, step: int | None = None, **fields) -> dict:
    common = dict(timestamp=TS, time_s=float(step or 0), type=spec.type, level="INFO", message=f"{spec.type} {step}",
                  session_id=sid, rank=rank, world_size=world)
    if step is not None:
        common["step"] = step
    return spec.build(**common, **fields)


class Run:
    """Rank streams of one session, written as a run writes them; ``rows`` keeps what was written."""

    def __init__(self, root, sid: str, world: int, max_steps: int = 200, seed: int = 0):
        self.folder = root / sid
        self.folder.mkdir(parents=True, exist_ok=True)
        self.sid, self.world, self.max_steps = sid, world, max_steps
        self.rng = np.random.default_rng(seed)
        self.rows = {r: [] for r in range(world)}  # (step, t, data, batch, sync_s)
        for r in range(world):
            self.write(r, rec(SESSION_START, sid, r, world, mode="MULTI-GPU", model="tiny", max_steps=max_steps))

    def path(self, rank: int):
        return self.folder / SessionFiles(self.sid).rank_jsonl(rank)

    def write(self, rank: int, *records) -> None:
        with open(self.path(rank), "ab") as fh:
            fh.write(b"".join(orjson.dumps(r) + b"\n" for r in records))

    def steps(self, first: int, last: int, slow: dict | None = None, batch: int = 32, ranks=None) -> None:
        for r in range(self.world) if ranks is None else ranks:
            out = []
            for s in range(first, last + 1):
                t = float(self.rng.uniform(0.09, 0.11)) * (slow or {}).get(r, 1.0)
                d = float(self.rng.uniform(0.001, 0.01))
                syncs = [float(self.rng.uniform(1, 5)) for _ in range(3)]
                out.append(rec(TRAINING_STEP, self.sid, r, self.world, s, max_steps=self.max_steps, step_time_s=t,
                               data_time_s=d, total_batch_size=batch, loss=5.0 / s))
                out += [rec(COMMUNICATION, self.sid, r, self.world, s, op="gradient_sync", duration_ms=ms, bucket=b)
                        for b, ms in enumerate(syncs)]
                self.rows[r].append((s, t, d, batch, sum(syncs) / 1000))
            self.write(r, *out)

    def end(self, rank: int, status: str, reason: str | None = None) -> None:
        fields = {"reason": reason} if reason else {}
        self.write(rank, rec(SESSION_END, self.sid, rank, self.world, status=status, **fields))


def expected_window(rows: list[tuple]) -> dict:
    w = np.array(rows[-WINDOW_STEPS:], dtype="float64")
    step, t, d, b, sync = w.T
    return {"step": int(step[-1]), "samples_per_s": b.sum() / t.sum(), "step_p50_s": np.percentile(t, 50),
            "step_p95_s": np.percentile(t, 95), "data_share": d.sum() / t.sum(), "sync_share": sync.sum() / t.sum(),
            "mean": t.mean()}


def render(snap, width: int = 200) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=False, color_system=None)
    console.print(snapshot_view(snap, "logs"))
    return console.file.getvalue()


def test_window_figures_are_those_of_the_last_steps(tmp_path):
    run = Run(tmp_path, "s1", 2)
    follower = Follower(tmp_path, now=0.0)
    follower.step(0.0)
    run.steps(1, 30)
    run.steps(31, 130, slow={1: 1.3})
    snap, grew = follower.step(LATER)
    assert grew
    (s,) = snap.sessions
    assert [r.rank for r in s.ranks] == [0, 1] and s.state == "running" and s.world_size == 2
    for r in s.ranks:
        exp = expected_window(run.rows[r.rank])
        assert r.step == exp["step"] == 130 and r.max_steps == 200 and r.window_steps == WINDOW_STEPS
        for name in ("samples_per_s", "step_p50_s", "step_p95_s", "data_share", "sync_share"):
            assert getattr(r, name) == pytest.approx(exp[name], rel=1e-9), name
        assert r.loss == pytest.approx(5.0 / 130)
    main = expected_window(run.rows[0])
    assert s.samples_per_s == pytest.approx(main["samples_per_s"]) and s.step_p50_s == pytest.approx(main["step_p50_s"])
    slow = expected_window(run.rows[1])
    assert s.eta_s == pytest.approx((200 - 130) * slow["mean"])
    g = s.straggler  # a row of the window's stragglers table: by step time (no phases in these streams)
    assert g.rank == 1 and g.is_straggler and g.last_arrival_share is None and g.p_value < 0.01
    assert g.vs_fastest == pytest.approx(slow["step_p50_s"] / main["step_p50_s"])


def test_no_straggler_when_the_ranks_keep_pace(tmp_path):
    run = Run(tmp_path, "s1", 2)
    run.steps(1, 60)
    snap, _ = Follower(tmp_path, now=0.0).step(0.0)
    g = snap.sessions[0].straggler  # no straggler: the row of the rank nearest to one, the slowest
    medians = [expected_window(run.rows[r])["step_p50_s"] for r in (0, 1)]
    assert g.rank == int(np.argmax(medians)) and not g.is_straggler
    assert g.vs_fastest == pytest.approx(max(medians) / min(medians)) and g.vs_fastest < 1.05


def _aged(finding) -> dict:
    d = finding.to_dict()
    return {**d, "detail": re.sub(r"last written \d+ s ago", "last written N s ago", d["detail"])}


def test_gpus_and_the_findings_of_the_batch_analysis(tmp_path):
    run = Run(tmp_path, "s1", 1)
    run.steps(1, 10)
    device = {"index": 0, "utilization_percent": 87.5, "memory_used_mb": 40_000.0, "memory_total_mb": 80_000.0}
    run.write(0, rec(GPU_SNAPSHOT, "s1", 0, 1, 10, host="node1", devices=[device]),
              rec(RESOURCE_WARNING, "s1", 0, 1, 10, subkind="sampling_degraded"),  # a note of the logger
              rec(ANOMALY, "s1", 0, 1, 4, subkind="slow_step", value=0.9, threshold=0.3),
              rec(ANOMALY, "s1", 0, 1, 7, subkind="loss_spike", value=9.0, threshold=3.0),
              rec(STALL, "s1", 0, 1, 11, phase="gradient_sync", value=75.0, threshold=60.0)
              | {"message": "No step ended for 75s (limit 60s)"},
              rec(ERROR, "s1", 0, 1, 10, exception_type="ValueError") | {"message": "ValueError: boom"})
    snap, _ = Follower(tmp_path, now=0.0).step(0.0)
    s = snap.sessions[0]
    (g,) = s.gpus
    assert (g.host, g.gpu, g.utilization_pct, g.memory_pct) == ("node1", 0, 87.5, 50.0)
    # the findings --diagnose gives for the same files, in its order (most severe first)
    batch = analyze(load_sessions(tmp_path)).findings
    # the same findings; a cut-off run's age ("last written N s ago") is read at each one's own moment
    assert [_aged(f) for f in s.findings] == [_aged(f) for f in batch] and s.findings_total == len(batch)
    lines = {word: n for n, line in enumerate(run.path(0).read_text().splitlines(), start=1)
             for word in ("slow_step", "loss_spike", "ValueError") if word in line}
    by_kind = {f.kind: f for f in s.findings}
    assert by_kind["slow_step"].evidence == (f"{run.path(0).name}:{lines['slow_step']}",)
    assert by_kind["loss_spike"].evidence == (f"{run.path(0).name}:{lines['loss_spike']}",)
    assert by_kind["error"].evidence == (f"{run.path(0).name}:{lines['ValueError']}",)
    assert "gradient sync of step 11" in by_kind["hang"].title  # the stall record: where the rank waits
    assert s.findings[0].severity.value == "error"
    text = render(snap)
    assert "node1:0 88% util, memory 40.0/80.0 GB (50%)" in text
    assert text.index("1 error line(s)") < text.index("Slow steps") < text.index("Loss spikes")


def test_a_session_ends_when_every_rank_has_ended(tmp_path):
    run = Run(tmp_path, "s1", 2)
    run.steps(1, 20)
    follower = Follower(tmp_path, now=0.0)
    follower.step(0.0)
    run.end(0, "completed")
    snap, _ = follower.step(1.0)
    assert not snap.all_ended and snap.sessions[0].ranks[0].status == "completed"
    run.end(1, "completed")
    snap, _ = follower.step(2.0)
    s = snap.sessions[0]
    assert snap.all_ended and s.end.status == "completed" and s.end.detail == "completed at step 20"


def test_a_failed_rank_says_its_error_and_the_others_how_they_ended(tmp_path):
    run = Run(tmp_path, "s1", 3)
    follower = Follower(tmp_path, now=0.0)
    follower.step(0.0)
    run.steps(1, 12)
    run.write(1, rec(ERROR, "s1", 1, 3, 13, exception_type="RuntimeError")
              | {"message": "RuntimeError: CUDA error: an illegal memory access"})
    run.end(1, "failed")
    run.end(0, "interrupted", reason="SIGTERM")
    run.end(2, "interrupted", reason="SIGTERM")
    snap, _ = follower.step(1.0)
    end = snap.sessions[0].end
    assert end.status == "failed"
    assert end.detail == ("failed at step 12: RuntimeError: CUDA error: an illegal memory access "
                          "(ranks 0, 2 interrupted; rank 1 failed)")
    assert [(r, s) for r, s, _ in end.ranks] == [(0, "interrupted"), (1, "failed"), (2, "interrupted")]


def test_a_silent_rank_is_lost_once_the_others_have_ended(tmp_path):
    run = Run(tmp_path, "s1", 2)
    run.steps(1, 5)
    follower = Follower(tmp_path, now=0.0)
    follower.step(0.0)
    run.end(0, "interrupted", reason="SIGTERM")
    snap, _ = follower.step(SILENT_END_S - 1)
    assert not snap.all_ended and snap.sessions[0].ranks[1].status == "running"
    snap, _ = follower.step(SILENT_END_S + 0.5)
    assert snap.all_ended and snap.sessions[0].end.status == "failed"
    assert [r.status for r in snap.sessions[0].ranks] == ["interrupted", "lost"]


def test_sessions_over_before_the_start_are_not_followed(tmp_path):
    done = Run(tmp_path, "done", 2)
    done.steps(1, 3)
    done.end(0, "completed")
    done.end(1, "completed")
    half = Run(tmp_path, "half", 2)  # one rank ended, the other still writing: followed
    half.end(0, "completed")
    old = Run(tmp_path, "old", 1)  # never ended, silent for an hour: not followed
    hour_ago = time.time() - 3600
    os.utime(old.path(0), (hour_ago, hour_ago))
    follower = Follower(tmp_path, now=0.0)
    snap, _ = follower.step(0.0)
    assert [s.session_id for s in snap.sessions] == ["half"] and sorted(snap.not_followed) == ["done", "old"]
    late = Run(tmp_path, "late", 1)  # a session that appears later is followed, whatever its state
    late.end(0, "completed")
    snap, _ = follower.step(1.0)
    assert [s.session_id for s in snap.sessions] == ["half", "late"]
    assert over_before_start({0: None}, 0.0) is False and over_before_start({}, live_mod.STALE_START_S) is True


def test_a_stream_read_again_starts_its_rank_over(tmp_path):
    run = Run(tmp_path, "s1", 1)
    run.steps(1, 40)
    follower = Follower(tmp_path, now=0.0)
    assert follower.step(0.0)[0].sessions[0].ranks[0].step == 40
    run.path(0).unlink()
    run.rows[0].clear()
    run.max_steps = 10
    run.write(0, rec(SESSION_START, "s1", 0, 1, max_steps=10))
    run.steps(1, 3)
    r = follower.step(LATER)[0].sessions[0].ranks[0]
    assert (r.step, r.max_steps, r.window_steps) == (3, 10, 3)


def test_many_ranks_are_summarised_with_the_slowest_named(tmp_path):
    run = Run(tmp_path, "big", SUMMARY_RANKS)
    run.steps(1, 8, slow={17: 2.0, 42: 1.6})
    snap, _ = Follower(tmp_path, now=0.0).step(0.0)
    s = snap.sessions[0]
    assert s.summary.ranks == SUMMARY_RANKS and [r for r, _ in s.summary.slowest][:2] == [17, 42]
    medians = [expected_window(run.rows[r])["step_p50_s"] for r in range(SUMMARY_RANKS)]
    assert s.summary.step_p50_s.max == pytest.approx(max(medians))
    assert s.summary.step_p50_s.median == pytest.approx(np.median(medians))
    text = render(snap)
    assert "min / median / max" in text and re.search(r"slowest ranks .*rank 17 .*rank 42", text)
    assert not re.search(r"^rank \d+ ", text, re.M)  # no row per rank
    small = Run(tmp_path / "small", "eight", 8)
    small.steps(1, 3)
    text = render(Follower(tmp_path / "small", now=0.0).step(0.0)[0])
    assert re.findall(r"^rank (\d+) +3/200 ", text, re.M) == [str(r) for r in range(8)]


def test_the_ndjson_snapshot_is_the_state_as_json(tmp_path):
    run = Run(tmp_path, "s1", 2)
    run.steps(1, 5)
    snap, _ = Follower(tmp_path, now=0.0).step(0.0)
    out = io.BytesIO()
    NdjsonView(out, io.StringIO()).update(snap)
    (doc,) = [orjson.loads(x) for x in out.getvalue().splitlines()]
    s = doc["sessions"][0]
    assert doc["all_ended"] is False and s["session_id"] == "s1" and s["state"] == "running"
    assert [(r["rank"], r["step"], r["max_steps"], r["status"]) for r in s["ranks"]] == [
        (0, 5, 200, "running"), (1, 5, 200, "running")]
    assert s["samples_per_s"] == pytest.approx(expected_window(run.rows[0])["samples_per_s"])
    assert s["end"] is None and s["summary"] is None and doc["bytes_read"] == sum(
        run.path(r).stat().st_size for r in (0, 1))


class StopAt(NdjsonView):
    """A view whose third refresh is interrupted, as Ctrl-C interrupts the loop."""

    def __init__(self):
        super().__init__(io.BytesIO(), io.StringIO())
        self.n = 0

    def update(self, snap):
        self.n += 1
        if self.n == 3:
            raise KeyboardInterrupt
        super().update(snap)


def test_ctrl_c_stops_with_status_0_and_says_where_the_sessions_were(tmp_path):
    run = Run(tmp_path, "s1", 1)
    run.steps(1, 7)
    view = StopAt()
    assert follow(tmp_path, view, refresh_s=0.1) == 0
    assert view.err.getvalue().splitlines() == ["stopped (Ctrl-C)", "s1: still running at step 7/200"]


class EndsAfterFirstDraw(TerminalView):
    """The terminal view, while the run it follows ends after the first refresh."""

    def __init__(self, run: Run, console: Console):
        super().__init__("logs", console)
        self.run, self.n = run, 0

    def update(self, snap):
        super().update(snap)
        self.n += 1
        if self.n == 1:
            self.run.end(0, "completed")


def test_the_terminal_view_draws_in_place_and_then_says_how_it_ended(tmp_path):
    run = Run(tmp_path, "s1", 1)
    run.steps(1, 4)
    console = Console(file=io.StringIO(), width=160, force_terminal=True, color_system=None)
    view = EndsAfterFirstDraw(run, console)
    assert follow(tmp_path, view, refresh_s=0.1) == 0
    text = console.file.getvalue()
    assert view.n == 2 and re.search(r"rank 0 +4/200 ", text)
    assert text.rstrip().endswith("s1: completed at step 4")


def test_idle_time_is_counted_from_when_the_stream_was_last_written(tmp_path):
    run = Run(tmp_path, "s1", 2)
    run.steps(1, 5)
    two_min_ago = time.time() - 120
    os.utime(run.path(1), (two_min_ago, two_min_ago))  # rank 1 quiet for 2 minutes, rank 0 writing
    snap, _ = Follower(tmp_path, now=0.0).step(0.0)
    idle = {r.rank: r.idle_s for r in snap.sessions[0].ranks}
    assert idle[0] == pytest.approx(0.0, abs=2.0) and idle[1] == pytest.approx(120.0, abs=2.0)
    text = render(snap)
    assert re.search(r"^rank 1 +5/200 .* 2m0\ds +running", text, re.M)


def _replay(src, dest, parts: int = 3):
    """The rank streams of the real session ``src`` written into ``dest`` in ``parts`` pieces, as the run
    wrote them; a ``Follower`` steps after each piece (the session is followed from its first piece)."""
    dest.mkdir(parents=True)
    streams = {p.name: p.read_bytes().splitlines(keepends=True) for p in sorted(src.glob("*_rank*.jsonl"))}
    follower, snap = Follower(dest.parent, now=0.0), None
    for i in range(parts):
        for name, lines in streams.items():
            cut = slice(len(lines) * i // parts, len(lines) * (i + 1) // parts)
            with open(dest / name, "ab") as fh:
                fh.write(b"".join(lines[cut]))
        snap, _ = follower.step(float(i) * LATER)
    return snap


@pytest.mark.parametrize("name", ["data_rank1_25ms", "forward_rank0_40ms", "backward_rank1_40ms"])
def test_a_real_straggler_run_is_shown_as_the_batch_analysis_shows_it(tmp_path, name):
    """A real 2-rank run with an injected straggler (30 steps: the window is the whole run): the live
    view's last snapshot names the rank and cause ``--performance`` names, and the same findings."""
    (src,) = (REPO / "sample_logs" / "stragglers" / name).iterdir()
    snap = _replay(src, tmp_path / "logs" / src.name)
    (s,) = snap.sessions
    batch = analyze(load_sessions(tmp_path / "logs"))
    (named,) = [r for r in batch.rows("stragglers") if r.is_straggler]
    assert int(name.split("_rank")[1][0]) == named.rank  # the rank the run slowed down
    assert s.straggler == named and s.straggler.cause == ("data" if name.startswith("data") else "compute")
    assert [f.to_dict() for f in s.findings] == [f.to_dict() for f in batch.findings]
    perf = {r.rank: r for r in batch.rows("performance")}
    for r in s.ranks:
        assert (r.step_p50_s, r.step_p95_s, r.data_share, r.samples_per_s) == (
            perf[r.rank].step_p50_s, perf[r.rank].step_p95_s, perf[r.rank].data_share, perf[r.rank].samples_per_s)


def test_progress_and_eta_follow_the_rank_furthest_behind(tmp_path):
    """Ranks not in lockstep: the session's step is the lowest any rank reached, its ETA the remaining
    steps at the slowest rank's mean step time over its window."""
    run = Run(tmp_path, "s1", 2)
    run.rng = np.random.default_rng(3)
    run.steps(1, 60, slow={1: 1.5})
    run.steps(61, 80, ranks=[0])  # rank 0 runs 20 steps ahead of rank 1
    snap, _ = Follower(tmp_path, now=0.0).step(0.0)
    (s,) = snap.sessions
    assert [r.step for r in s.ranks] == [80, 60] and s.step == 60
    slowest = max(expected_window(run.rows[r])["mean"] for r in (0, 1))
    assert slowest == pytest.approx(expected_window(run.rows[1])["mean"])  # rank 1, the slow one
    assert s.eta_s == pytest.approx((200 - 60) * slowest, rel=1e-9)
