"""Ending a session however the process goes: normal exit, exception, SIGTERM, SIGINT.

- an uncaught exception: an ``error`` record with the traceback, then ``session_end``
  with status ``failed`` (``interrupted`` for KeyboardInterrupt);
- SIGTERM (what a launcher sends every rank when one fails or the job is cancelled) and
  SIGINT: ``session_end`` with status ``interrupted``, then the signal's previous handler;
- any other exit without the logger's own ``end``: ``atexit`` ends it.

Everything chains to what was installed before; nothing is replaced for good.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading

from logkit.schema import Status

__all__ = ["end_on_exit"]


def end_on_exit(logger) -> None:
    """Make sure ``logger`` writes its ``session_end`` however the process goes."""
    if getattr(logger, "_exit_hooked", False):
        return
    logger._exit_hooked = True
    previous_hook = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            logger.error(exc)
            logger.end(Status.INTERRUPTED if issubclass(exc_type, KeyboardInterrupt) else Status.FAILED)
        finally:
            previous_hook(exc_type, exc, tb)

    sys.excepthook = excepthook
    atexit.register(logger.end, Status.COMPLETED)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            _chain_signal(sig, logger)


def _chain_signal(sig: int, logger) -> None:
    previous = signal.getsignal(sig)

    def handler(signum, frame):
        logger.event("error", f"Received {signal.Signals(signum).name}", "ERROR", signal=signal.Signals(signum).name)
        logger.end(Status.INTERRUPTED)
        if callable(previous):
            previous(signum, frame)  # e.g. Python's SIGINT handler raises KeyboardInterrupt
        elif previous == signal.SIG_IGN:
            return
        else:  # SIG_DFL: die of the same signal, as the launcher expects
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    try:
        signal.signal(sig, handler)
    except (ValueError, OSError):  # not the main thread, or an embedded interpreter
        pass
