"""``--alert-cmd``'s runner (``run/alert_cmd.py``): the command reads the alert on its standard input; it
never holds the caller up (``send`` returns at once, a slow one is killed after its timeout, with what it
started); failures are counted and the first said once, with the end of its standard error."""

from __future__ import annotations

import os
import time

import pytest

from logkit.run.alert_cmd import MAX_RUNNING, AlertCommand

PAYLOAD = b'{"alert": {"kind": "stall", "rank": 1}}\n'


def wait_for(command: AlertCommand, seconds: float = 10.0) -> None:
    end = time.monotonic() + seconds
    while command.running and time.monotonic() < end:
        time.sleep(0.05)
        command.poll()


def test_the_command_reads_the_alert_on_its_standard_input(tmp_path):
    warned = []
    command = AlertCommand(f"cat > {tmp_path}/got.json", warned.append)
    command.send(PAYLOAD)
    command.close()
    assert (tmp_path / "got.json").read_bytes() == PAYLOAD and warned == [] and command.failed == 0


def test_a_command_that_does_not_read_its_input_and_succeeds_is_no_failure():
    warned = []
    command = AlertCommand("true", warned.append)
    command.send(PAYLOAD)
    wait_for(command)
    command.close()
    assert warned == [] and command.sent == 1 and command.failed == 0


def test_failures_are_counted_and_the_first_said_once_with_its_stderr():
    warned = []
    command = AlertCommand("echo 'webhook: 403 Forbidden' >&2; exit 3", warned.append)
    for _ in range(3):
        command.send(PAYLOAD)
        wait_for(command)
    assert warned == ["--alert-cmd failed: it exited with status 3: webhook: 403 Forbidden (later failures are "
                      "counted, not said)"]
    command.close()
    assert command.failed == 3 and warned[1] == ("--alert-cmd: 3 of its 3 runs failed (the first: it exited with "
                                                 "status 3: webhook: 403 Forbidden)")


def test_a_missing_command_is_a_failure():
    warned = []
    command = AlertCommand("no-such-command-logkit-test", warned.append)
    command.send(PAYLOAD)
    wait_for(command)
    assert command.failed == 1 and "status 127" in warned[0]


def test_a_slow_command_is_never_waited_for_and_is_killed_with_what_it_started(tmp_path):
    warned = []
    pid_file = tmp_path / "child.pid"
    command = AlertCommand(f"sleep 60 & echo $! > {pid_file}; wait", warned.append, timeout_s=0.5)
    began = time.monotonic()
    command.send(PAYLOAD)
    assert time.monotonic() - began < 0.5
    for _ in range(100):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.05)
    child = int(pid_file.read_text())
    time.sleep(0.6)
    command.poll()
    assert command.running == [] and command.failed == 1 and "ran past 0.5 s and was killed" in warned[0]
    for _ in range(50):  # the shell's child (its process group) was killed too
        try:
            os.kill(child, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the command's child still runs")


def test_at_most_max_running_at_once():
    warned = []
    command = AlertCommand("sleep 30", warned.append)
    try:
        for _ in range(MAX_RUNNING + 1):
            command.send(PAYLOAD)
        assert len(command.running) == MAX_RUNNING and command.failed == 1
        assert "earlier runs of it are still running" in warned[0]
    finally:
        command.timeout_s = 0.0
        command.poll()
    assert command.running == []
