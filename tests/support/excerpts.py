"""Real excerpts under ``tests/data/<topic>/`` (each cited in its folder's README) as the reader tests use
them: read one, write a capture into a test's folder and load it, and a session's events of one kind."""

from __future__ import annotations

from collections.abc import Callable

import logkit
from tests.support.launch import REPO

DATA = REPO / "tests" / "data"


def reader(topic: str) -> Callable[[str], str]:
    """``text(name)``: the excerpt ``tests/data/<topic>/<name>`` as text."""
    def text(name: str) -> str:
        return (DATA / topic / name).read_text(encoding="utf-8")
    return text


def load(tmp_path, body: str, name: str = "capture.log"):
    """``body`` written as ``tmp_path/name`` and loaded as a user's file would be."""
    path = tmp_path / name
    path.write_text(body, encoding="utf-8")
    return logkit.load_session(path)


def events_of(s, kind: str) -> list[dict]:
    ev = s.events
    return ev[ev["kind"] == kind].to_dict("records")
