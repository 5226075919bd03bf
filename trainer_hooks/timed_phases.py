"""The stretches of a rank's time that are not steps, for the ledger of where a session's hours went
(``logkit.analysis.kernels.ledger``): each a ``timed_phase`` record written when it ends (its
``time_s`` is its end, ``duration_s`` its length).

- ``startup``: the process's start to the logger's origin (imports, model load, quantisation: the
  time before the logger existed; ``trainer_hooks.process_start``), written once at ``start``;
- ``eval`` / ``save``: an evaluation, a checkpoint (the callback times them between the Trainer's
  events; a loop times them with ``phase("eval")``), or any name of the training code's own; ``phase()``
  also writes a ``phase_begin`` record when it starts and the rank's position (``where``) is the phase
  while it runs: a rank that hangs inside it (saving alone while the others wait in a collective) is
  seen there, even when it is killed before the phase ends (phases are rare: nothing per step);
- ``waiting_for_ranks``: in the logger's start on several ranks, its collectives' wait for the last
  rank to start;
- ``logging``: the logger's own time on the training thread: its ``start`` and its ``end`` (each one
  stretch), and the many short calls of the steps, summed (``phase_detail`` says where they lie:
  ``between_steps``, the step hooks and records, in the data windows; ``within_steps``, the gradient
  checks and micro-batch records, inside the steps).
"""

from __future__ import annotations

import functools
import time
from contextlib import contextmanager

from logkit.schema.records import PHASE_BEGIN, TIMED_PHASE
from trainer_hooks.guard import guarded
from trainer_hooks.process_start import process_age

# phase_detail of the summed logging records: where in a step their calls lie
BETWEEN_STEPS, WITHIN_STEPS = "between_steps", "within_steps"
# the phase of the logger's start where the ranks wait for the last one to start
WAITING_FOR_RANKS = "waiting_for_ranks"


class TimedPhases:
    """The timed phases of ``SessionLogger`` (mixed into it: its clock, records and writer)."""

    def _init_timed(self) -> None:
        self._log_between = 0.0  # the logger's time in the step hooks, between the steps' bodies
        self._log_within = 0.0  # its time inside the steps (gradient checks, micro-batch records)
        self._open_phase: tuple[str, float] | None = None  # (name, begin) of the phase() block running

    def _phase_record(self, name: str, begin: float, end: float, detail: str | None = None,
                      step: int | None = None) -> dict:
        """A ``timed_phase`` record of ``[begin, end)`` (``time.perf_counter`` readings)."""
        return self._record(TIMED_PHASE, f"{name} took {end - begin:.3f}s", "DEBUG", step, at=end, phase=name,
                            phase_detail=detail, duration_s=round(max(0.0, end - begin), 6),
                            clock_s=round(end - self.clock_offset, 6))

    @guarded
    def timed_phase(self, name: str, begin: float, end: float | None = None, detail: str | None = None) -> None:
        """A stretch ``name`` that began at ``begin`` and ends at ``end`` (now where None), both
        ``time.perf_counter`` readings; nothing while the session is not open."""
        if self._started and not self._ended:
            end = time.perf_counter() if end is None else end
            self._emit(self._phase_record(name, begin, end, detail, self._last_step or None))

    @contextmanager
    def phase(self, name: str):
        """Time the block as the phase ``name`` (``eval``, ``save``, or a name of your own)::

            with log.phase("eval"):
                evaluate(model)
        """
        begin = time.perf_counter()
        outer = self._open_phase
        self._phase_begin(name, begin)
        try:
            yield
        finally:
            self._open_phase = outer
            self.timed_phase(name, begin)

    @guarded
    def _phase_begin(self, name: str, begin: float) -> None:
        """The phase ``name`` begins at ``begin``: a ``phase_begin`` record, and the rank is in it (``where``)."""
        self._open_phase = (name, begin)
        if self._started and not self._ended:
            self._emit(self._record(PHASE_BEGIN, f"{name} began", "DEBUG", self._last_step or None, at=begin,
                                    phase=name, clock_s=round(begin - self.clock_offset, 6)))

    def open_phase(self) -> tuple[str, str] | None:
        """(name, detail) of the phase the training thread is in, or None."""
        opened = self._open_phase
        if opened is None:
            return None
        name, begin = opened
        return name, f"for {time.perf_counter() - begin:.1f}s, after step {self._last_step}"

    def _startup_phases(self, start_began: float, gathered: float | None = None) -> None:
        """At the end of ``start``: the time before the logger existed, and ``start``'s own; where the ranks
        met in ``start`` (``gathered``: when its collectives returned), the time until then is the wait
        for the last rank to arrive (``waiting_for_ranks``)."""
        age, source = process_age()
        if age is not None:
            age -= time.perf_counter() - self._t0  # the process's age at the logger's origin
            if age >= 0:
                self._emit(self._phase_record("startup", self._t0 - age, self._t0, f"process start from {source}"))
        if gathered is not None:
            self._emit(self._phase_record(WAITING_FOR_RANKS, start_began, gathered, "start: the ranks agree on the "
                                          "session id and measure their clocks"))
            start_began = gathered
        self._emit(self._phase_record("logging", start_began, time.perf_counter(), "start"))

    def _end_phases(self, end_began: float) -> None:
        """Before ``session_end``: the logger's summed time during the steps, and its ``end``'s own."""
        now = time.perf_counter()
        for detail, spent in ((BETWEEN_STEPS, self._log_between), (WITHIN_STEPS, self._log_within)):
            if spent > 0:
                self._emit(self._phase_record("logging", now - spent, now, detail))
        self._emit(self._phase_record("logging", end_began, time.perf_counter(), "end"))


def _summed(attr: str):
    def decorate(method):
        @functools.wraps(method)
        def wrapper(self, *args, **kwargs):
            began = time.perf_counter()
            try:
                return method(self, *args, **kwargs)
            finally:
                setattr(self, attr, getattr(self, attr) + time.perf_counter() - began)

        return wrapper

    return decorate


# The logger's own time on the training thread, summed by where its calls lie (inside @guarded)
between_steps = _summed("_log_between")
within_steps = _summed("_log_within")
