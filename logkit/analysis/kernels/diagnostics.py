"""The parse diagnostics of every session in one frame: ``DIAGNOSTIC_COLUMNS``, one row per line a
reader could not read (or a note it made), with the session it belongs to."""

from __future__ import annotations

import pandas as pd

DIAGNOSTIC_COLUMNS = ["session_id", "file", "line", "reason", "text"]


def diagnostics_table(sessions) -> pd.DataFrame:
    """Every session's diagnostics frame with its session id: ``DIAGNOSTIC_COLUMNS``."""
    frames = [s.diagnostics.assign(session_id=s.session_id) for s in sessions if len(s.diagnostics)]
    if not frames:
        return pd.DataFrame(columns=DIAGNOSTIC_COLUMNS)
    return pd.concat(frames, ignore_index=True).reindex(columns=DIAGNOSTIC_COLUMNS)
