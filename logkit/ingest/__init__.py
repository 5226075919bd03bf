"""Files to frames: find logkit sessions on disk (``discover``) and read one into a ``Session``
(``load.build_session``). Loading folders (with the cache and the engine) is ``logkit.run.load``'s.

Importing this package is cheap (``Session``, which brings pandas, loads when asked for): discovering a
folder needs no pandas."""

from __future__ import annotations

__all__ = ["Session"]


def __getattr__(name: str):
    if name == "Session":
        from logkit.ingest.session import Session

        return Session
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
