"""The verdict a completed session prints at its end (``trainer_hooks/end_verdict.py``), in one process:
what it prints and appends to summary.txt, that a failing, slow, missing or crashing analysis is at most
one line and never reaches training or its exit status, the setting and the environment variable that
turn it off, the wait for the other ranks' streams, and the baseline it points to. A real 2-rank run:
tests/e2e/test_end_verdict.py."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
import time

import orjson
import pytest

from logkit.schema import SessionFiles, Status
from tests.support.launch import REPO
from trainer_hooks import end_verdict as ev
from trainer_hooks.session_logger import SessionLogger
from trainer_hooks.settings import resolve_settings


def _session(log_dir, status=Status.COMPLETED, **settings) -> SessionLogger:
    log = SessionLogger(log_dir=log_dir, gpu_snapshot_interval=0, **settings)
    log.start(model_name="unit-model", per_device_batch_size=4, max_steps=6)
    for step in range(1, 7):
        log.step_begin()
        time.sleep(0.005)
        log.step_end(step, loss=1.0 / step, learning_rate=1e-4)
    log.end(status)
    return log


def _summary_txt(log) -> str:
    return (log.folder / SessionFiles(log.session_id).summary_txt).read_text()


def _fail_with(monkeypatch, code: str) -> None:
    monkeypatch.setattr(ev, "command", lambda folder: [sys.executable, "-c", code])


def test_the_verdict_is_the_clis_printed_and_appended_after_the_summary(tmp_path, capsys):
    log = _session(tmp_path, end_verdict=True)
    out, err = capsys.readouterr()
    cli = subprocess.run([sys.executable, "-m", "logkit.cli", str(log.folder), "--verdict", "--no-cache"],
                         capture_output=True, text=True, timeout=120)
    assert cli.returncode == 0, cli.stderr
    verdict = cli.stdout.strip("\n") or f"VERDICT\n{ev.RULE}\nNo verdict from this session's logs alone."
    more = f"More: analyze_logs {log.folder} --performance --diagnose (--report writes the HTML report)"
    assert out == f"\n{verdict}\n\n{more}\n" and err == ""
    text = _summary_txt(log)
    # summary.txt first (written whole), then the verdict appended, with what it cost
    assert text.startswith("TRAINING SESSION SUMMARY\n")
    head, tail = text.split(f"\n\n{verdict}\n\n{more}\n")
    assert "Total batch size:" in head and tail.startswith("(made in ") and tail.endswith(" s at the end of the "
                                                                                            "session, on rank 0)\n")


@pytest.mark.parametrize(("code", "why"), [
    ("import sys; sys.stderr.write('Traceback ...\\nRuntimeError: boom\\n'); sys.exit(3)",
     "the analysis exited with status 3: RuntimeError: boom"),
    ("import logkit_analysis_not_installed", "ModuleNotFoundError: No module named 'logkit_analysis_not_installed'"),
])
def test_a_failing_analysis_is_one_line(tmp_path, capsys, monkeypatch, code, why):
    _fail_with(monkeypatch, code)
    log = _session(tmp_path, end_verdict=True)
    out, err = capsys.readouterr()
    assert out == ""
    (line,) = err.splitlines()
    assert line.startswith("logkit: the verdict is not available: ") and why in line
    assert _summary_txt(log).endswith("\nVerdict: not available: " + line.split("available: ", 1)[1].split(" (")[0]
                                      + "\n")
    assert orjson.loads((log.folder / SessionFiles(log.session_id).summary_json).read_bytes())["status"] == "completed"


def test_a_slow_analysis_is_stopped_at_the_timeout(tmp_path, capsys, monkeypatch):
    _fail_with(monkeypatch, "import time; time.sleep(60)")
    t0 = time.perf_counter()
    _session(tmp_path, end_verdict=True, end_verdict_timeout_s=0.5)
    assert time.perf_counter() - t0 < 10
    out, err = capsys.readouterr()
    (line,) = err.splitlines()
    assert out == "" and "the analysis took longer than 0.5 s" in line


def test_a_crash_of_the_verdict_itself_never_reaches_training(tmp_path, capsys, monkeypatch):
    def crash(folder, timeout_s):
        raise RuntimeError("bug in the verdict")

    monkeypatch.setattr(ev, "analyse", crash)
    log = _session(tmp_path, end_verdict=True)
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == ["logkit: the verdict is not available: RuntimeError: bug in the verdict"]
    assert _summary_txt(log).startswith("TRAINING SESSION SUMMARY\n")


def test_ctrl_c_during_the_analysis_skips_the_verdict(tmp_path, capsys, monkeypatch):
    def interrupted(self, *args, **kwargs):
        self.kill()
        raise KeyboardInterrupt

    real = subprocess.Popen.communicate
    _fail_with(monkeypatch, "import time; time.sleep(60)")
    monkeypatch.setattr(subprocess.Popen, "communicate",
                        lambda self, *a, **k: interrupted(self) if k.get("timeout") != 5 else real(self, *a, **k))
    _session(tmp_path, end_verdict=True)
    out, err = capsys.readouterr()
    assert out == "" and err.splitlines() == ["logkit: the verdict is not available: interrupted (analyze_logs "
                                              f"{next(tmp_path.iterdir())} gives the report)"]


def _marker_command(monkeypatch, marker):
    monkeypatch.setattr(ev, "command", lambda folder: [sys.executable, "-c", f"open({str(marker)!r}, 'w')"])


def test_the_setting_and_the_environment_turn_it_off(tmp_path, capsys, monkeypatch):
    marker = tmp_path / "analysed"
    _marker_command(monkeypatch, marker)
    _session(tmp_path / "off", end_verdict=False)
    monkeypatch.setenv("LOGKIT_END_VERDICT", "0")
    _session(tmp_path / "env_off")
    assert not marker.exists() and capsys.readouterr() == ("", "")
    monkeypatch.setenv("LOGKIT_END_VERDICT", "1")
    _session(tmp_path / "env_on")
    assert marker.exists()
    assert "VERDICT" in capsys.readouterr().out


def test_the_environment_then_the_argument():
    assert resolve_settings(env={}).end_verdict is True
    for word, on in (("0", False), ("off", False), ("False", False), ("1", True), ("yes", True)):
        assert resolve_settings(env={"LOGKIT_END_VERDICT": word}).end_verdict is on
    assert resolve_settings(env={"LOGKIT_END_VERDICT": "maybe"}).end_verdict is True  # not a switch: the default
    assert resolve_settings(env={"LOGKIT_END_VERDICT": "0"}, end_verdict=True).end_verdict is True


@pytest.mark.parametrize("status", [Status.FAILED, Status.INTERRUPTED])
def test_only_a_completed_session_runs_it(tmp_path, capsys, monkeypatch, status):
    marker = tmp_path / "analysed"
    _marker_command(monkeypatch, marker)
    _session(tmp_path / "logs", status=status, end_verdict=True)
    assert not marker.exists() and capsys.readouterr().out == ""


def test_the_runs_exit_status_is_its_own(tmp_path):
    """A process whose verdict fails, times out or crashes exits with the status it gave, and says one line."""
    script = textwrap.dedent("""
        import sys, time
        from trainer_hooks import end_verdict as ev
        from trainer_hooks.session_logger import SessionLogger
        how = sys.argv[1]
        if how == "fails":
            ev.command = lambda folder: [sys.executable, "-c", "import sys; sys.exit(1)"]
        elif how == "slow":
            ev.command = lambda folder: [sys.executable, "-c", "import time; time.sleep(60)"]
        else:
            ev.analyse = None  # a TypeError inside the verdict
        log = SessionLogger(sys.argv[2], gpu_snapshot_interval=0, end_verdict=True, end_verdict_timeout_s=1)
        log.start(model_name="m", per_device_batch_size=1, max_steps=2)
        for step in (1, 2):
            log.step_begin(); log.step_end(step, loss=1.0)
        log.end()
        print("after end")
        sys.exit(7)
    """)
    for how in ("fails", "slow", "crash"):
        r = subprocess.run([sys.executable, "-c", script, how, str(tmp_path / how)], capture_output=True, text=True,
                           cwd=REPO, timeout=120)
        assert r.returncode == 7 and r.stdout == "after end\n", (how, r.stdout, r.stderr)
        (line,) = r.stderr.splitlines()
        assert line.startswith("logkit: the verdict is not available: "), (how, line)


# -- the other ranks' streams ---------------------------------------------------------------------
def _stream(folder, rank, *types, torn=b""):
    path = folder / SessionFiles("s").rank_jsonl(rank)
    path.write_bytes(b"".join(orjson.dumps({"type": t, "rank": rank}) + b"\n" for t in types) + torn)
    return path


def test_rank_0_waits_for_the_other_ranks_session_end(tmp_path):
    _stream(tmp_path, 1, "session_start", "session_end")
    assert ev.wait_for_ranks(tmp_path, "s", 2, bound_s=5) == ([], [])
    # rank 2 still writing, rank 3's stream elsewhere (another node): rank 2 is waited for, until the bound
    path = _stream(tmp_path, 2, "session_start", "training_step_complete")
    t0 = time.monotonic()
    assert ev.wait_for_ranks(tmp_path, "s", 4, bound_s=0.3) == ([2], [3])
    assert 0.3 <= time.monotonic() - t0 < 3
    # a torn last line is a line being written; its session_end ends the wait at once
    _stream(tmp_path, 2, "session_start", torn=b'{"type": "session_e')
    assert ev.wait_for_ranks(tmp_path, "s", 3, bound_s=0.2) == ([2], [])
    timer = threading.Timer(0.2, lambda: _stream(tmp_path, 2, "session_start", "session_end"))
    timer.start()
    t0 = time.monotonic()
    assert ev.wait_for_ranks(tmp_path, "s", 3, bound_s=10) == ([], [])
    assert time.monotonic() - t0 < 5
    timer.join()
    assert path.exists()


def test_what_rank_0_could_not_see_is_said():
    lines = ev.verdict_lines("VERDICT\n===\nA sentence.", [2], [3, 4])
    assert lines == ["VERDICT", "===", "A sentence.",
                     f"(Rank 0's view: rank 2 had not ended its stream after {ev.RANKS_WAIT_S:g} s.)",
                     "(Rank 0's view: the streams of ranks 3, 4 are not in this folder.)"]


# -- the baseline it points to ----------------------------------------------------------------------
def _summary(log_dir, sid, model, world_size):
    folder = log_dir / sid
    folder.mkdir(parents=True)
    (folder / SessionFiles(sid).summary_json).write_bytes(orjson.dumps({"model": model, "world_size": world_size}))


def test_a_run_of_the_same_model_on_other_ranks_is_a_baseline(tmp_path):
    _summary(tmp_path, "one_rank", "m", 1)
    _summary(tmp_path, "other_model", "n", 1)
    _summary(tmp_path, "same_size", "m", 2)
    (tmp_path / "no_summary").mkdir()
    (tmp_path / "a_file.txt").write_text("x")
    assert ev.baselines(tmp_path, "this", "m", 2) == [("one_rank", 1)]
    folder = tmp_path / "this"
    assert ev.more_lines(tmp_path, folder, [("one_rank", 1)]) == [
        f"More: analyze_logs {folder} --performance --diagnose (--report writes the HTML report)",
        f"Compared with the 1-rank run one_rank of the same model: analyze_logs {tmp_path} --compare"]
    _summary(tmp_path, "four_ranks", "m", 4)
    assert sorted(ev.baselines(tmp_path, "this", "m", 2)) == [("four_ranks", 4), ("one_rank", 1)]
    assert ev.more_lines(tmp_path, folder, ev.baselines(tmp_path, "this", "m", 2))[1] == (
        f"Compared with 2 other runs (1, 4 ranks) of the same model: analyze_logs {tmp_path} --compare")
    assert ev.more_lines(tmp_path, folder, [])[1:] == []


def test_the_analysis_starts_once_the_other_ranks_have_ended(tmp_path, capsys, monkeypatch):
    folder = tmp_path / "s"
    folder.mkdir()
    _stream(folder, 0, "session_start", "session_end")
    rank1 = _stream(folder, 1, "session_start", "training_step_complete")
    seen = []

    def analyse(path, timeout_s):
        seen.append((path, ev.stream_ended(rank1)))
        return "VERDICT\n===\nA sentence.", None

    monkeypatch.setattr(ev, "analyse", analyse)
    timer = threading.Timer(0.3, lambda: _stream(folder, 1, "session_start", "session_end"))
    timer.start()
    ev.end_verdict(tmp_path, "s", 2, "m", 30, None)
    timer.join()
    assert seen == [(folder.resolve(), True)]
    assert capsys.readouterr().out.startswith("\nVERDICT\n===\nA sentence.\n\nMore: ")
    # a rank that never ends: the verdict is rank 0's view, after the bound
    _stream(folder, 1, "session_start", "training_step_complete")
    monkeypatch.setattr(ev, "RANKS_WAIT_S", 0.2)
    t0 = time.monotonic()
    ev.end_verdict(tmp_path, "s", 2, "m", 30, None)
    assert time.monotonic() - t0 < 5
    assert "\n(Rank 0's view: rank 1 had not ended its stream after 0.2 s.)\n" in capsys.readouterr().out
