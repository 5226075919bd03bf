"""``analyze_logs --follow --alert-cmd CMD``: the user's command, run for each alert raised or cleared
with the alert on its standard input as one JSON object and a newline (``{"alert": {...}}``, as the
NDJSON view writes it), so that a shell line can hand it to a chat hook or to ``notify-send``.

The command never holds the view up: it runs in a shell of its own session (a Ctrl-C of the view does
not reach it), its standard output discarded and its standard error kept for the message, and is
polled at each refresh, never waited for. One still running after ``timeout_s`` is killed (its whole
process group). A failure (it cannot start, exits non-zero, or is killed) is counted; the first is
said once (``warn``), and the count when the view ends. At most ``MAX_RUNNING`` run at once (an alert
beyond them counts as a failure); at the end, those still running get ``GRACE_S`` to finish.
"""

from __future__ import annotations

import os
import signal
import subprocess
import tempfile
import time

TIMEOUT_S = 10.0  # a command still running after this is killed
MAX_RUNNING = 8
GRACE_S = 5.0
_STDERR_SHOWN = 200  # characters of a failed command's standard error in the message


class AlertCommand:
    """Runs ``command`` (a shell line) once per alert (``send``); ``poll`` reaps the finished ones and
    kills the slow ones; ``close`` waits ``GRACE_S`` at most for the rest. ``warn(line)``: how a failure
    is said (once), and the count at the end."""

    def __init__(self, command: str, warn, timeout_s: float = TIMEOUT_S, clock=time.monotonic):
        self.command, self.warn, self.timeout_s, self.clock = command, warn, timeout_s, clock
        self.running: list[tuple[subprocess.Popen, float, object]] = []
        self.sent = 0
        self.failed = 0
        self.first_failure: str | None = None

    def send(self, payload: bytes) -> None:
        """Start the command with ``payload`` (the alert's JSON line) on its standard input."""
        self.poll()
        self.sent += 1
        if len(self.running) >= MAX_RUNNING:
            self._failed(f"{MAX_RUNNING} earlier runs of it are still running")
            return
        err = tempfile.TemporaryFile()  # noqa: SIM115 - read and closed when the command has ended
        try:
            proc = subprocess.Popen(self.command, shell=True, stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                                    stderr=err, start_new_session=True, close_fds=True)
        except OSError as exc:
            err.close()
            self._failed(f"it cannot start: {exc}")
            return
        try:
            os.set_blocking(proc.stdin.fileno(), False)  # a command that never reads cannot hold the view
            proc.stdin.write(payload)
        except (OSError, ValueError):
            pass  # it ended, or does not read its input: its exit status says whether that is a failure
        finally:
            try:
                proc.stdin.close()
            except OSError:
                pass
        self.running.append((proc, self.clock(), err))

    def poll(self) -> None:
        """Reap the commands that ended, and kill those running past ``timeout_s``."""
        still = []
        for proc, started, err in self.running:
            code = proc.poll()
            if code is None and self.clock() - started >= self.timeout_s:
                _kill(proc)
                self._failed(f"it ran past {self.timeout_s:g} s and was killed", err)
            elif code is None:
                still.append((proc, started, err))
                continue
            elif code != 0:
                self._failed(f"it exited with status {code}", err)
            else:
                err.close()
        self.running = still

    def close(self) -> None:
        """Give the commands still running ``GRACE_S`` to finish (then kill them); say how many failed."""
        end = self.clock() + GRACE_S
        while self.running and self.clock() < end:
            time.sleep(0.05)
            self.poll()
        for proc, _, err in self.running:
            _kill(proc)
            self._failed("it was still running when the view ended, and was killed", err)
        self.running = []
        if self.failed:
            self.warn(f"--alert-cmd: {self.failed} of its {self.sent} runs failed (the first: {self.first_failure})")

    def _failed(self, why: str, err=None) -> None:
        if err is not None:
            err.seek(0)
            text = err.read()[-_STDERR_SHOWN:].decode("utf-8", "replace").strip()
            err.close()
            why += f": {text}" if text else ""
        self.failed += 1
        if self.first_failure is None:
            self.first_failure = why
            self.warn(f"--alert-cmd failed: {why} (later failures are counted, not said)")


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # the shell and what it started: its own session, its own group
    except OSError:
        proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass
