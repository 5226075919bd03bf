"""``analyze_logs LOGDIR --follow`` on real 2-rank CPU runs (accelerate launch, gloo), started before
the run so that its session appears under LOGDIR while followed:

- the terminal view in a real terminal (tmux): the screen captured while the run trains shows each
  rank's step as the rank's JSONL has it at that moment (behind by at most what ``LAG_S`` seconds
  of training add: a refresh, the writer's half second, the capture), and the view exits by
  itself with status 0 when the run ends, saying how it ended;
- the NDJSON mode (stdout not a terminal), checked the same way line by line; its last snapshot's
  figures against the JSONL's last steps, computed here;
- a healthy run raises no alert;
- a run that fails mid-run: both views say failed, with the error the JSONL records;
- Ctrl-C (a real SIGINT) and --follow-timeout; a folder that does not exist yet is waited for.
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import orjson
import pytest

from logkit.schema.records import COMMON, COMMUNICATION, ERROR, SESSION_START, TRAINING_STEP
from tests.support.launch import BIN, REPO, ctrl_c_default, free_port

TYPE = next(f for f in COMMON if f.name == "type")
MESSAGE = next(f for f in COMMON if f.name == "message")
STEPS, SLEEP = 48, 0.25
LAG_S = 3.0
WINDOW = 50  # the live view's window (analysis/live.WINDOW_STEPS), restated: the test's own oracle
ROW = re.compile(r"^rank (\d+) +(\d+)/(\d+) ", re.M)
pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux not installed")


def records(path: Path) -> list[dict]:
    """The whole lines of a stream being written (a torn last line left out)."""
    data = path.read_bytes() if path.exists() else b""
    return [orjson.loads(x) for x in data[: data.rfind(b"\n") + 1].splitlines() if x.strip()]


def jsonl_steps(logs: Path) -> dict[int, int]:
    """Each rank's latest step in its JSONL right now."""
    out = {}
    for path in logs.glob("*/*_rank*.jsonl"):
        rank = int(path.name.rsplit("_rank", 1)[1].split(".")[0])
        steps = [TRAINING_STEP["step"].read(r) for r in records(path) if TYPE.read(r) == TRAINING_STEP.type]
        out[rank] = max(steps, default=0)
    return out


def step_at(history: list[tuple[float, dict]], when: float, rank: int) -> int:
    """The rank's JSONL step at ``when`` (the latest reading at or before it; 0 before any)."""
    known = [steps.get(rank, 0) for t, steps in history if t <= when]
    return known[-1] if known else 0


class Tmux:
    """A tmux server of the test's own (its socket, no user config), panes kept after their command exits."""

    def __init__(self, tmp: Path):
        self.socket = f"logkit-follow-{os.getpid()}-{time.monotonic_ns()}"
        self.conf = tmp / "tmux.conf"
        self.conf.write_text("set -g remain-on-exit on\n")

    def run(self, *args: str) -> str:
        # the terminal's size is the pane's: no COLUMNS / LINES inherited from the test's process
        env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")}
        return subprocess.run(["tmux", "-L", self.socket, "-f", str(self.conf), *args], capture_output=True,
                              text=True, timeout=10, env=env).stdout

    def start(self, command: str, cwd: Path) -> None:
        self.run("new-session", "-d", "-x", "200", "-y", "50", "-s", "view", "-c", str(cwd), command)

    def screen(self) -> str:
        return self.run("capture-pane", "-p", "-t", "view")

    def kill(self) -> None:
        self.run("kill-server")


@dataclass
class Watched:
    logs: Path
    launch_rc: int
    view_rc: str
    final_screen: str
    ndjson: list[dict]
    ndjson_rc: int
    ndjson_err: str
    # (time, screen, each rank's JSONL step read just after the capture)
    captures: list[tuple[float, str, dict]] = field(default_factory=list)
    # (the previous read, this read, the NDJSON lines new at this read, the JSONL steps read just after it)
    reads: list[tuple[float, float, list[dict], dict]] = field(default_factory=list)
    history: list[tuple[float, dict]] = field(default_factory=list)

    @property
    def session(self) -> Path:
        (folder,) = [p for p in self.logs.iterdir() if p.is_dir()]
        return folder


def watch(tmp: Path, args: list[str]) -> Watched:
    """One real 2-rank run of the hand-written loop, followed from before it starts by the terminal
    view in tmux and by an NDJSON follower; the screen and the NDJSON read every ~0.4 s meanwhile,
    each between two readings of the JSONL."""
    logs = tmp / "logs"
    logs.mkdir()
    follow = [str(BIN / "analyze_logs"), str(logs), "--follow", "--follow-timeout", "60"]
    tmux = Tmux(tmp)
    rc_file = tmp / "view.rc"
    tmux.start(f"{' '.join(follow)}; echo $? > {rc_file}", tmp)
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
    nd_out, nd_err = tmp / "follow.ndjson", tmp / "follow.err"
    with open(nd_out, "wb") as out, open(nd_err, "wb") as err:
        ndjson = subprocess.Popen(follow, stdout=out, stderr=err, env=env)
    launch = subprocess.Popen(
        [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
         "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(free_port()),
         str(REPO / "examples/train_accelerate_loop.py"), "--log-dir", str(logs), "--hidden", "64", *args],
        cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    got = Watched(logs, -1, "", "", [], -1, "")
    offset, last_read = 0, time.monotonic()
    try:
        deadline = time.monotonic() + 240
        while launch.poll() is None and time.monotonic() < deadline:
            got.history.append((time.monotonic(), jsonl_steps(logs)))
            captured, screen = time.monotonic(), tmux.screen()
            data = nd_out.read_bytes()
            whole = data[: data.rfind(b"\n") + 1]
            now = time.monotonic()
            after = jsonl_steps(logs)
            got.history.append((time.monotonic(), after))
            got.captures.append((captured, screen, after))
            got.reads.append((last_read, now, [orjson.loads(x) for x in whole[offset:].splitlines()], after))
            offset, last_read = len(whole), now
            time.sleep(0.4)
        got.launch_rc = launch.wait(timeout=30)
        for _ in range(300):  # the view exits by itself once the run has ended
            if rc_file.exists() and rc_file.read_text().strip():
                break
            time.sleep(0.1)
        got.view_rc = rc_file.read_text().strip() if rc_file.exists() else ""
        got.final_screen = tmux.screen()
        got.ndjson_rc = ndjson.wait(timeout=30)
    finally:
        for proc in (launch, ndjson):
            if proc.poll() is None:
                proc.kill()
        tmux.kill()
    got.ndjson = [orjson.loads(x) for x in nd_out.read_bytes().splitlines()]  # every line is one JSON object
    got.ndjson_err = nd_err.read_text()
    return got


@pytest.fixture(scope="module")
def completed(tmp_path_factory) -> Watched:
    got = watch(tmp_path_factory.mktemp("follow"), ["--steps", str(STEPS), "--sleep", str(SLEEP)])
    assert got.launch_rc == 0
    return got


@pytest.mark.slow  # the run they share takes about 25 s on 2 cores
def test_the_terminal_view_shows_each_ranks_step_as_the_jsonl_has_it(completed):
    mid = 0
    for when, screen, after in completed.captures:
        shown = {int(r): (int(s), int(m)) for r, s, m in ROW.findall(screen)}
        for rank, (step, max_steps) in shown.items():
            assert max_steps == STEPS
            low = step_at(completed.history, when - LAG_S, rank)  # the JSONL's step LAG_S before the capture
            assert low <= step <= after[rank], (rank, step, low, after[rank], screen)
        if sorted(shown) == [0, 1] and all(0 < s < STEPS for s, _ in shown.values()):
            mid += 1
    assert mid >= 3, "the view was captured fewer than 3 times mid-run"


@pytest.mark.slow  # the run they share takes about 25 s on 2 cores
def test_the_terminal_view_exits_0_by_itself_saying_how_the_run_ended(completed):
    sid = completed.session.name
    assert completed.view_rc == "0"
    assert f"{sid}: completed at step {STEPS}" in completed.final_screen
    assert {int(r): int(s) for r, s, _ in ROW.findall(completed.final_screen)} == jsonl_steps(completed.logs) == {
        0: STEPS, 1: STEPS}


@pytest.mark.slow  # the run they share takes about 25 s on 2 cores
def test_the_ndjson_follows_the_jsonl_the_same_way(completed):
    mid = set()
    for previous, _, lines, after in completed.reads:
        for doc in lines:  # written after the previous read, before the JSONL was read after this one
            for r in [r for s in doc["sessions"] for r in s["ranks"]]:
                if r["step"] is None:
                    continue
                low = step_at(completed.history, previous - LAG_S, r["rank"])
                assert low <= r["step"] <= after[r["rank"]], (r, low, after)
                if 0 < r["step"] < STEPS:
                    mid.add(r["step"])
    assert len(mid) >= 3
    last_step = {0: 0, 1: 0}
    for doc in completed.ndjson:  # steps never go back
        for r in doc["sessions"][0]["ranks"] if doc["sessions"] else []:
            assert (r["step"] or 0) >= last_step[r["rank"]]
            last_step[r["rank"]] = r["step"] or 0
    assert completed.ndjson_rc == 0 and completed.session.name + ": completed at step 48" in completed.ndjson_err


@pytest.mark.slow  # the run they share takes about 25 s on 2 cores
def test_the_last_snapshot_has_the_jsonls_figures(completed):
    last = completed.ndjson[-1]
    (s,) = last["sessions"]
    assert last["all_ended"] and s["end"]["status"] == "completed" and s["state"] == "ended"
    assert [(r["rank"], r["status"]) for r in s["ranks"]] == [(0, "completed"), (1, "completed")]
    for r in s["ranks"]:
        rows = records(next(completed.session.glob(f"*_rank{r['rank']}.jsonl")))
        steps = [x for x in rows if TYPE.read(x) == TRAINING_STEP.type][-WINDOW:]
        t = np.array([TRAINING_STEP["step_time_s"].read(x) for x in steps])
        b = np.array([TRAINING_STEP["total_batch_size"].read(x) for x in steps])
        d = np.array([TRAINING_STEP["data_time_s"].read(x) for x in steps])
        numbers = {TRAINING_STEP["step"].read(x) for x in steps}
        sync = sum(COMMUNICATION["duration_ms"].read(x) / 1000 for x in rows
                   if TYPE.read(x) == COMMUNICATION.type and COMMUNICATION["step"].read(x) in numbers)
        first = next(x for x in rows if TYPE.read(x) == SESSION_START.type)
        assert r["step"] == STEPS and r["max_steps"] == SESSION_START["max_steps"].read(first) == STEPS
        assert r["samples_per_s"] == pytest.approx(b.sum() / t.sum(), rel=1e-9)
        assert r["step_p50_s"] == pytest.approx(np.percentile(t, 50), rel=1e-9)
        assert r["step_p95_s"] == pytest.approx(np.percentile(t, 95), rel=1e-9)
        assert r["data_share"] == pytest.approx(d.sum() / t.sum(), rel=1e-9)
        assert r["sync_share"] == pytest.approx(sync / t.sum(), rel=1e-9) and sync > 0
        assert r["loss"] == TRAINING_STEP["loss"].read(steps[-1])
        assert SLEEP <= r["step_p50_s"] < SLEEP + 0.2  # the loop sleeps SLEEP in every step


@pytest.mark.slow  # the run they share takes about 25 s on 2 cores
def test_a_healthy_run_raises_no_alert(completed):
    assert [d for d in completed.ndjson if "alert" in d] == []
    assert [a for d in completed.ndjson for s in d["sessions"] for a in s["alerts"]] == []
    assert "ALERT" not in completed.final_screen


@pytest.mark.slow  # a real launch: 15-25 s on 2 cores
def test_a_run_that_fails_mid_run_is_said_to_have_failed_with_its_error(tmp_path):
    got = watch(tmp_path, ["--steps", "40", "--sleep", "0.1", "--fail-at", "12"])
    assert got.launch_rc != 0
    errors = {}
    for path in got.session.glob("*_rank*.jsonl"):
        for x in records(path):
            if TYPE.read(x) == ERROR.type:
                errors[int(path.name.rsplit("_rank", 1)[1].split(".")[0])] = MESSAGE.read(x)
    assert errors and set(errors.values()) == {"RuntimeError: injected failure at step 12"}
    error = next(iter(errors.values()))
    sid = got.session.name
    assert got.view_rc == "0"
    assert re.search(rf"{sid}: failed at step 11: {re.escape(error)}", got.final_screen), got.final_screen
    last = got.ndjson[-1]["sessions"][0]
    assert got.ndjson_rc == 0 and last["end"]["status"] == "failed" and error in last["end"]["detail"]
    for r in last["ranks"]:
        assert r["status"] == "failed" if r["rank"] in errors else r["status"] in ("failed", "interrupted")
        assert r["step"] == 11
    assert f"{sid}: failed at step 11: {error}" in got.ndjson_err


def _live_stream(folder: Path) -> None:
    """A session that has started and not ended (written now: it is followed)."""
    folder.mkdir(parents=True)
    first = SESSION_START.build(timestamp="2026-01-01T00:00:00+00:00", time_s=0.0, type=SESSION_START.type,
                                level="INFO", message="start", session_id="s1", rank=0, world_size=1, max_steps=9)
    (folder / "s1_rank0.jsonl").write_bytes(orjson.dumps(first) + b"\n")


def test_ctrl_c_exits_0(tmp_path):
    _live_stream(tmp_path / "logs" / "s1")
    proc = subprocess.Popen([str(BIN / "analyze_logs"), str(tmp_path / "logs"), "--follow", "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=ctrl_c_default)
    try:
        first = orjson.loads(proc.stdout.readline())
        assert first["sessions"][0]["session_id"] == "s1"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0 and err.decode().splitlines() == ["stopped (Ctrl-C)", "s1: still running, no step logged yet"]


def test_follow_timeout_exits_1_when_nothing_is_written(tmp_path):
    _live_stream(tmp_path / "logs" / "s1")
    proc = subprocess.run([str(BIN / "analyze_logs"), str(tmp_path / "logs"), "--follow", "--follow-timeout", "1",
                           "--refresh", "0.2"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stderr.splitlines()[0] == "stopped: nothing written for 1 s"
    assert all(orjson.loads(x)["sessions"][0]["state"] == "running" for x in proc.stdout.splitlines())


def test_follow_is_the_live_view_only(tmp_path):
    (tmp_path / "logs").mkdir()
    proc = subprocess.run([str(BIN / "analyze_logs"), str(tmp_path / "logs"), "--follow", "--report", "r.html"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "--follow shows the live view only; run --report without it" in proc.stderr


def test_follow_waits_for_a_folder_that_does_not_exist_yet(tmp_path):
    logs = tmp_path / "logs"
    proc = subprocess.Popen([str(BIN / "analyze_logs"), str(logs), "--follow", "--json", "--refresh", "0.2"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=ctrl_c_default)
    try:
        first = orjson.loads(proc.stdout.readline())
        assert first["folder_missing"] is True and first["sessions"] == []
        _live_stream(logs / "s1")
        for _ in range(100):  # a refresh every 0.2 s: the session shows within a few
            doc = orjson.loads(proc.stdout.readline())
            if doc["sessions"]:
                break
        assert doc["folder_missing"] is False and doc["sessions"][0]["session_id"] == "s1"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=15)
    finally:
        proc.kill()
    assert proc.returncode == 0 and err.decode().splitlines()[0] == "stopped (Ctrl-C)"


def test_follow_timeout_counts_from_the_start_while_the_folder_does_not_exist(tmp_path):
    missing = tmp_path / "logs"
    started = time.monotonic()
    proc = subprocess.run([str(BIN / "analyze_logs"), str(missing), "--follow", "--follow-timeout", "1",
                           "--refresh", "0.2"], capture_output=True, text=True, timeout=30)
    assert proc.returncode == 1 and proc.stderr.splitlines() == [f"stopped: {missing} did not appear within 1 s"]
    assert time.monotonic() - started < 15
    assert all(orjson.loads(x)["folder_missing"] for x in proc.stdout.splitlines())


def test_alert_cmd_goes_with_follow(tmp_path):
    (tmp_path / "logs").mkdir()
    proc = subprocess.run([str(BIN / "analyze_logs"), str(tmp_path / "logs"), "--alert-cmd", "cat"],
                          capture_output=True, text=True, timeout=30)
    assert proc.returncode == 2 and "--alert-cmd" in proc.stderr and "--follow" in proc.stderr
