"""Ending a session however the process goes: normal exit, exception, SIGTERM, SIGINT.

- an uncaught exception: an ``error`` record with the traceback, then ``session_end``
  with status ``failed`` (``interrupted`` for KeyboardInterrupt);
- SIGTERM (what a launcher sends every rank when one fails or the job is cancelled) and
  SIGINT: ``session_end`` with status ``interrupted``, then the signal's previous handler.
  The handler never waits on the device: timings still on the GPU are dropped (a hung NCCL
  kernel must not keep ``session_end`` from being written). A main thread blocked inside a
  C call (a collective waiting forever) runs Python's signal handlers only when that call
  returns: there the launcher's SIGKILL ends the process, and the stream just stops;
- any other exit before training ended (a caught exception followed by ``sys.exit(1)``, a
  return from main before the last step, ...): ``atexit`` ends the session as ``failed``, saying the
  process exited before training ended. Only the owner's own end (the callback's
  ``on_train_end``, ``TrainingLogger``'s ``with`` block or ``close()``) ends it ``completed``.

Everything chains to what was installed before; nothing is replaced for good.
"""

from __future__ import annotations

import atexit
import os
import signal
import sys
import threading

from logkit.schema import EventType, Status


def end_on_exit(logger, unfinished: str = "the process exited before training ended") -> None:
    """Make sure ``logger`` writes its ``session_end`` however the process goes.

    ``unfinished``: the reason given when the process exits with the session still open.
    """
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
    atexit.register(logger.end_unfinished, unfinished)
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGINT):
            _chain_signal(sig, logger)


def _chain_signal(sig: int, logger) -> None:
    previous = signal.getsignal(sig)

    def handler(signum, frame):
        if getattr(logger, "ending", False):
            # the session is being ended on this very thread (normal end, or an exception's):
            # let it finish writing, then take the signal as it would have been taken
            logger.after_end.append(lambda: os.kill(os.getpid(), signum))
            return
        name = signal.Signals(signum).name
        logger.event(EventType.ERROR, f"Received {name}", "ERROR", signal=name)
        logger.end(Status.INTERRUPTED, reason=f"received {name}", from_signal=True)
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
