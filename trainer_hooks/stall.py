"""The stall watch: a rank whose training thread has not ended a step for too long says where it is.

A daemon thread looks every few seconds at when the rank's last step ended. Past the limit,
max(``stall_factor`` x the median step time, ``stall_min_s``), it writes a ``stall`` record: the
step and phase the rank is in (``SessionLogger.where``), how long it has been, and the training
thread's Python stack (``sys._current_frames``: read without stopping the thread). Training goes
on; the record repeats at twice and four times the limit (has the stack moved?), then the watch
waits for the next step. A rank hung in a collective so says where it hangs, with nothing armed
in advance, even when the launcher later kills it with SIGKILL.
"""

from __future__ import annotations

import sys
import threading
import time
import traceback

MAX_STACK_CHARS = 20_000
REPEATS = 3  # stall records per stall: at 1x, 2x and 4x the limit


def thread_stack(thread_id: int | None) -> str | None:
    """The Python stack of thread ``thread_id``, innermost call last (as a traceback prints it)."""
    frame = sys._current_frames().get(thread_id) if thread_id is not None else None
    if frame is None:
        return None
    text = "".join(traceback.format_stack(frame))
    return text if len(text) <= MAX_STACK_CHARS else "...\n" + text[-MAX_STACK_CHARS:]


class StallWatch:
    """Watches ``logger`` (a ``SessionLogger``) from a daemon thread; ``stop()`` ends it."""

    def __init__(self, logger, factor: float, min_s: float) -> None:
        self.logger, self.factor, self.min_s = logger, factor, min_s
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="logkit-stall-watch", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float = 1.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(timeout)

    def limit(self) -> float:
        median = self.logger.median_step_time()
        return max(self.factor * median, self.min_s) if median else self.min_s

    def _run(self) -> None:
        said_for, said = None, 0  # the step end a stall was reported after, and how often
        while not self._stop.wait(min(5.0, max(0.2, self.min_s / 4))):
            try:
                since_end = self.logger.last_progress()
                if since_end != said_for:
                    said_for, said = since_end, 0
                waited = time.perf_counter() - since_end
                limit = self.limit()
                if said < REPEATS and waited >= limit * 2 ** said:
                    said += 1
                    self.logger.report_stall(waited, limit)
            except Exception as exc:  # the watch must never take the process down
                self.logger._fault("stall watch", exc)
