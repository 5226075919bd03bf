"""Files to frames: find logkit sessions on disk and read them into ``Session`` objects.

    >>> from logkit.ingest import load_sessions
    >>> for s in load_sessions("logs"):                  # doctest: +SKIP
    ...     print(s.session_id, len(s.steps), len(s.diagnostics))
"""

from __future__ import annotations

from logkit.ingest.load import load_session, load_sessions
from logkit.ingest.session import Session

__all__ = ["Session", "load_session", "load_sessions"]
