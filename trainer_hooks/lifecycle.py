"""Ending a session when training does not reach its normal end.

An uncaught exception records an ``error`` and ends the session as ``failed``; a process
that exits without the logger's ``end`` ends it from ``atexit``. Both are chained to what
was installed before, never replacing it.
"""

from __future__ import annotations

import atexit
import sys

from logkit.schema import Status

__all__ = ["end_on_exit"]


def end_on_exit(logger) -> None:
    """Make sure ``logger`` writes its ``session_end`` however the process goes."""
    if getattr(logger, "_exit_hooked", False):
        return
    logger._exit_hooked = True
    previous = sys.excepthook

    def excepthook(exc_type, exc, tb):
        try:
            logger.error(exc)
            logger.end(Status.INTERRUPTED if issubclass(exc_type, KeyboardInterrupt) else Status.FAILED)
        finally:
            previous(exc_type, exc, tb)

    sys.excepthook = excepthook
    atexit.register(logger.end, Status.COMPLETED)
