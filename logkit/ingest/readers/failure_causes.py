"""Why each process failed, said once per process: a console capture's ``failure_cause`` events.

A cause is said once per rank and cause: every rank's lines say it, and torch's ``what():`` lines repeat it.
Where a line names no rank, what the processes print tells them apart: python's ``can't open file`` line is
one process (the interpreter prints it once and exits 2: a launcher's workers print it once each), and so is
each traceback that ends in an exception of no kind the causes name (a process prints its traceback once: two
launched processes failing alike print two). A traceback chained to the one before it ("During handling of
the above exception ...", "The above exception was the direct cause ...") is the same process's. An NCCL
error's ``Last error:`` detail, on the lines after it, is added to its message; a cause read off a torn line
(processes' output interleaved) cites the first whole line of the same error (``cause_detail``)."""

from __future__ import annotations

from logkit.ingest.readers import cause_detail
from logkit.ingest.readers.base import Read
from logkit.schema.vocab import EventKind, FailureCause

_CHAINED = ("During handling of the above exception", "The above exception was the direct cause")


class Causes:
    """The causes of one capture said so far (``said``: (rank, cause, which process or None))."""

    def __init__(self, read: Read) -> None:
        self.read = read
        self.said: set[tuple] = set()
        self.torn: dict = {}  # causes read off a torn line, to be mended by the first whole line of the same error
        self.last_error: tuple | None = None  # (an NCCL error's cause event, "Last error:" read)
        self.nccl_error_line: int | None = None  # the line of the last NCCL error cause read
        self.trace: int | None = None  # the header line of the traceback (chain) read now
        self.chained = False

    def header(self, number: int) -> None:
        """A traceback's ``Traceback (most recent call last):`` line: another process's traceback, unless the
        traceback before chained into it."""
        if not self.chained:
            self.trace = number
        self.chained = False

    def trace_text(self, text: str) -> None:
        """A line inside a traceback: whether it chains the next traceback to this one."""
        if text.startswith(_CHAINED):
            self.chained = True

    def add(self, number: int, c: dict, rank: int | None, t: float | None, fields: dict,
            ends_trace: bool = False) -> None:
        """A ``failure_cause`` event, unless this process said it already (``ends_trace``: the exception line
        a traceback with its header ends in)."""
        if c["cause"] == FailureCause.FILE_NOT_FOUND:
            which = number
        else:
            which = self.trace if ends_trace and rank is None and self.trace is not None else None
        if c["cause"] == FailureCause.NCCL_ERROR and self.nccl_error_line == number - 1 and c["what"] \
                and c["what"].startswith("nccl") and c["message"].startswith(c["what"]):
            # "ncclInternalError: ..." on the line after torch's "NCCL error: ..." is that error's second line (torch
            # prefixes only the first with the rank): no cause of its own
            self.nccl_error_line = number
            return
        key = (rank, c["cause"], which)
        if key in self.said:
            cause_detail.mend_torn(self.torn, key, f"{self.read.label}:{number}", c["message"])
            return
        self.said.add(key)
        ev = self.read.event(EventKind.FAILURE_CAUSE, number, rank=rank, level="ERROR", time_s=t, cause=c["cause"],
                             message=c["message"], error=c["what"], **fields)
        cause_detail.hold_torn(self.torn, key, ev)
        if c["cause"] == FailureCause.NCCL_ERROR:
            self.last_error = (ev, False)
            self.nccl_error_line = number

    def last_error_line(self, text: str) -> str | None:
        """NCCL's ``Last error:`` ("header") and the line after it ("detail": ``socketStartConnect: Connect
        to ... failed``), the detail of the last NCCL error read, added to its cause's message; else None."""
        if self.last_error is None:
            return None
        ev, opened = self.last_error
        if not opened:
            if text.strip() != "Last error:":
                return None
            self.last_error = (ev, True)
            return "header"
        self.last_error = (ev, False)
        cause_detail.add_detail(ev, text)
        return "detail"
