"""``guarded``: a fault of the logger is reported and swallowed, never raised into training."""

from __future__ import annotations

import functools


def guarded(method):
    """Run a logger method; a failure is reported to the errors log and swallowed.

    Works on ``SessionLogger`` methods and on objects holding one as ``self.logger`` (the
    callback, ``TrainingLogger``).
    """

    @functools.wraps(method)
    def wrapper(self, *args, **kwargs):
        try:
            return method(self, *args, **kwargs)
        except Exception as exc:
            owner = self if hasattr(self, "_fault") else self.logger
            owner._fault(f"{type(self).__name__}.{method.__name__} failed", exc)
            return None

    return wrapper
