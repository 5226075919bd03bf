"""Files to frames: find logkit sessions on disk (``discover``) and read one into a ``Session``
(``load.build_session``). Loading folders (with the cache and the engine) is ``logkit.run.load``'s."""

from __future__ import annotations

from logkit.ingest.session import Session

__all__ = ["Session"]
