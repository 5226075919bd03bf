"""What a launcher's command line, kept at the head of a log, states of the job: the processes it starts.

``mpirun`` / ``mpiexec`` / ``prterun`` (Open MPI, MPICH's Hydra, Intel MPI) take the process count as
``-np N``, ``--np N``, ``-n N``, ``--n N`` or Open MPI's ``-c N`` (also ``--np=N``); Slurm's ``srun`` as
``-n N`` / ``--ntasks=N`` (a one-letter option's value may be attached: ``-n8``). Only the launcher's own
options count, the words between the launcher and the program it starts: the program's options may reuse the letters (nccl-tests' ``-n`` is its iterations,
``-c`` its check). A launcher whose count is not on the line (``-N`` per node, a host file) states none.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass

_LAUNCHER = re.compile(r"(?:^|[\s/])(?P<name>mpirun|mpiexec(?:\.hydra)?|prterun|srun)(?=\s)")
_COUNT = {"mpirun": ("-np", "--np", "-n", "--n", "-c"), "srun": ("-n", "--ntasks")}


@dataclass(frozen=True)
class Launch:
    """A launcher's command: its ``name`` and the ``processes`` it starts, and ``args``, the program's
    words after it (its own options)."""

    name: str
    processes: int
    args: tuple[str, ...]


def _words(text: str) -> list[str]:
    try:
        return shlex.split(text)
    except ValueError:  # an unclosed quote (a line cut short): the words as they stand
        return text.split()


def launched(line: str, program: re.Pattern) -> Launch | None:
    """The launch ``line`` states, where it runs a launcher before a word ``program`` matches (the
    program it starts) and names its process count; else None."""
    m = _LAUNCHER.search(line)
    if m is None:
        return None
    words = _words(line[m.end():])
    at = next((i for i, w in enumerate(words) if program.search(w)), None)
    if at is None:
        return None
    count = _value(words[:at], _COUNT["srun" if m["name"] == "srun" else "mpirun"])
    if count is None:
        return None
    return Launch(m["name"], count, tuple(words[at + 1:]))


def _value(words: list[str] | tuple[str, ...], names: tuple[str, ...]) -> int | None:
    """The whole number above 0 the last of the options ``names`` among ``words`` gives (a count of 0 is none):
    ``-n 8``, ``--ntasks=8``, or a one-letter option's value attached (``-n8``, as getopt reads it); else None."""
    found = None
    for i, word in enumerate(words):
        name, eq, value = word.partition("=")
        if name in names:
            value = value if eq else (words[i + 1] if i + 1 < len(words) else "")
        elif word[:2] in names and len(word) > 2 and not word.startswith("--"):
            value = word[2:]
        else:
            continue
        if value.isdigit() and int(value) > 0:
            found = int(value)
    return found


def option(args: tuple[str, ...], names: tuple[str, ...]) -> int | None:
    """The whole number a program's option among ``args`` gives (``-g 8``, ``-g8``, ``--ngpus=8``), or None."""
    return _value(args, names)


def ranks_started(launch: Launch, number: int, label: str, per: tuple[int, int] | None) -> tuple[int, str, int]:
    """The ranks a benchmark's launch starts where each process drives threads x GPUs (nccl-tests): ``per``,
    the (ranks per process, line) its header states (``nThread 1 nGpus 8``), else the program's ``-t`` / ``-g``
    (nccl-tests' defaults 1). Returns the ranks, what says so (``stated: ...``) and the command's line."""
    if per is not None:
        each, how = per[0], f"nThread x nGpus {per[0]} ({label}:{per[1]})"
    else:
        each = (option(launch.args, ("-t", "--nthreads")) or 1) * (option(launch.args, ("-g", "--ngpus")) or 1)
        how = f"-t x -g {each} on the command line"
    said = f"{launch.name}'s {launch.processes} process(es) ({label}:{number}) x {how}"
    return launch.processes * each, f"stated: {launch.processes * each} rank(s): {said}", number
