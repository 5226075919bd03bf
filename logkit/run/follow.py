"""``analyze_logs LOGDIR --follow``: the loop of the live view. Files -> state -> snapshot -> view,
once per refresh:

1. find streams that appeared under LOGDIR (``ingest.tail.FolderTail``); at the first look, a
   session that has already ended (or fell silent long ago) is not followed;
2. read the bytes each followed stream gained, and feed their records to ``analysis.live.LiveState``;
3. draw the snapshot on the view it is given (``report.live_view``: rich on a terminal, NDJSON otherwise),
   and run the alert command (``run.alert_cmd``, ``--alert-cmd``) for each alert raised or cleared.

A folder that does not exist yet is waited for (as ``tail -F`` does). Ends with 0 when every followed
session has ended (saying how each ended) or on Ctrl-C; with 1 when ``timeout_s`` passes without a
byte written to any followed stream (from the start: a folder that has not appeared by then ends it too).
"""

from __future__ import annotations

import os
import time
from pathlib import Path

import orjson

from logkit.analysis.results.live import LiveSnapshot
from logkit.ingest.tail import FolderTail, last_record
from logkit.run.alert_cmd import AlertCommand
from logkit.run.live_state import LiveState, over_before_start

DEFAULT_REFRESH_S = 1.0


class Follower:
    """The tail and the state of one ``--follow``; ``step()`` is one refresh's reading."""

    def __init__(self, root: str | Path, session_ids=(), now: float | None = None):
        self.root = Path(root)
        self.tail = FolderTail(self.root)
        self.state = LiveState(time.monotonic() if now is None else now)
        self.session_ids = set(session_ids)
        self.ignored: set[tuple[str, str]] = set()
        self.first = True

    def _discover(self, now: float) -> None:
        by_session: dict[tuple[str, str], list] = {}
        for stream in self.tail.discover():
            if self.session_ids and stream.session_id not in self.session_ids:
                continue
            by_session.setdefault((stream.folder, stream.session_id), []).append(stream)
        for key, streams in by_session.items():
            if key in self.ignored:
                continue
            if self.first and key not in self.state.sessions and self._over(streams):
                self.ignored.add(key)
                self.state.not_followed.append(key[1])
                continue
            for stream in streams:
                self.tail.follow(stream)
                self.state.add_stream(stream, now, self._age(stream.path))
        self.first = False

    @staticmethod
    def _age(path: Path) -> float:
        """Seconds since the file was last written (0 when it cannot be told)."""
        try:
            return max(0.0, time.time() - os.stat(path).st_mtime)
        except OSError:
            return 0.0

    @staticmethod
    def _over(streams) -> bool:
        lasts = {s.rank: last_record(s.path) for s in streams}
        try:
            newest = max(os.stat(s.path).st_mtime for s in streams)
        except OSError:
            return False
        return over_before_start(lasts, time.time() - newest)

    def step(self, now: float | None = None) -> tuple[LiveSnapshot, bool]:
        """Read what is new; (the snapshot, whether any stream gained bytes)."""
        clock = now is None
        now = time.monotonic() if clock else now
        self._discover(now)
        grew, began = False, time.monotonic()
        while True:  # a stream longer than one read is caught up before the view is drawn
            chunks = self.tail.poll()
            for chunk in chunks:
                self.state.feed(chunk, now)
            grew = grew or bool(chunks)
            if not self.tail.behind or time.monotonic() - began > DEFAULT_REFRESH_S:
                break
        missing = not os.path.isdir(self.root)
        return self.state.snapshot(time.monotonic() if clock else now, folder_missing=missing), grew

    def close(self) -> None:
        self.tail.close()


def follow(root: str | Path, view, *, refresh_s: float = DEFAULT_REFRESH_S, timeout_s: float | None = None,
           session_ids=(), alert_cmd: str | None = None) -> int:
    """Follow the sessions under ``root`` until they have all ended, drawing each snapshot on ``view`` (a
    context manager with ``update(snapshot)``, ``say(lines)``, ``warn(line)`` and ``end_lines(snapshot)``)
    and running ``alert_cmd`` for each alert raised or cleared; the exit status."""
    follower = Follower(root, session_ids)
    command = AlertCommand(alert_cmd, view.warn) if alert_cmd else None
    snap, status = None, 0
    last_growth = time.monotonic()
    try:
        with view:
            while True:
                started = time.monotonic()
                snap, grew = follower.step()
                view.update(snap)
                if command is not None:
                    for alert in snap.alert_events:
                        command.send(orjson.dumps(alert.record()) + b"\n")
                    command.poll()
                if grew:
                    last_growth = started
                if snap.all_ended:
                    break
                if timeout_s is not None and started - last_growth >= timeout_s:
                    status = 1
                    break
                time.sleep(max(0.0, refresh_s - (time.monotonic() - started)))
    except KeyboardInterrupt:
        view.say(["stopped (Ctrl-C)", *view.end_lines(snap)])
        return 0
    except BrokenPipeError:  # the reader of the NDJSON went away (| head): nothing more to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), 1)
        return 0
    finally:
        follower.close()
        if command is not None:
            command.close()
    if status and snap is not None and snap.folder_missing and not snap.sessions:
        view.say([f"stopped: {root} did not appear within {timeout_s:g} s"])
    elif status:
        view.say([f"stopped: nothing written for {timeout_s:g} s", *view.end_lines(snap)])
    else:
        view.say(view.end_lines(snap))
    return status
