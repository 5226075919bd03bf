"""Name a file's format from its name and its first bytes (``.gz`` looked through), by the formats'
declarations (``readers.formats``): a name that says a format by itself, else each format's suffixes
and telltale, in the order of their ``priority``. A text telltale is looked for in the head as it is,
then in the head without what the file puts around its lines (``normalise``: a log service's columns,
a quote, an indentation before every line)."""

from __future__ import annotations

import re
from functools import cached_property
from pathlib import Path

from logkit.ingest.readers.formats import Format, by_priority, session_named
from logkit.ingest.safe_io import READ_ERRORS, open_file

PEEK = 64 * 1024
# our summary.txt: no log to read on its own (summary.json says it); our errors log is told by its lines too
_SKIP = re.compile(r"_summary\.txt(?:\.gz)?$")


def _read(path: Path, unzip: bool) -> bytes:
    """The first ``PEEK`` bytes (gunzipped): a regular file only, opened without waiting (``safe_io``)."""
    try:
        with open_file(path, unzip, buffering=PEEK) as fh:
            return fh.read(PEEK)
    except READ_ERRORS:
        return b""


class Probe:
    """What a telltale looks at, each part read once and only when asked: the file's ``name``, its
    ``base`` (the name without ``.gz``) and ``suffix`` (of the base, lower case), ``head`` (the text of
    its first 64 KiB, gunzipped), ``raw`` (its first 64 KiB as they are on disk), ``loose`` (given by
    name: a last resort may take it)."""

    def __init__(self, path: Path, loose: bool) -> None:
        self.path, self.loose, self.name = path, loose, path.name
        self.base = self.name[:-3] if self.name.endswith(".gz") else self.name
        self.suffix = Path(self.base).suffix.lower()

    @cached_property
    def head(self) -> str:
        return _read(self.path, self.name.endswith(".gz")).decode("utf-8", errors="replace")

    @cached_property
    def raw(self) -> bytes:
        return _read(self.path, False)

    @cached_property
    def binary(self) -> bool:
        return "\x00" in self.head[:4096]

    def plain_head(self, telltale: re.Pattern) -> str | None:
        """The head without what the file puts around the lines ``telltale`` begins (a log service's columns,
        a quote, an indentation: ``normalise``), or None where it puts nothing; asked only where the
        telltale is not in the head as it is."""
        cache = self.__dict__.setdefault("_plain", {})
        if telltale not in cache:
            # light, and imported only for a file its telltale did not tell
            from logkit.ingest.readers.normalise import plain_text

            cache[telltale] = plain_text(self.head.splitlines(), telltale)
        return cache[telltale]


def named_as(fmt: Format, path: Path, probe: Probe | None = None) -> bool:
    """Whether ``path``, named as a file of ``fmt``'s (its ``session_names``), is of it: a format told by its
    name alone says yes; one with a telltale but no suffixes of its own (our errors log) asks its telltale
    (the head is read only then)."""
    telltale = fmt.telltale
    if telltale is None or fmt.suffixes:
        return True
    probe = probe or Probe(path, False)
    return telltale.search(probe.head) is not None if isinstance(telltale, re.Pattern) else bool(telltale(probe))


def read_with_its_session(path: Path, probe: Probe | None = None) -> bool:
    """A file of ours that is no log on its own: our summary.txt, or our errors log (named so, and holding
    our errors lines), read with the session its other files make."""
    if _SKIP.search(path.name):
        return True
    return any(fmt.joins_found and pattern.match(path.name) is not None and named_as(fmt, path, probe)
               for fmt, pattern in session_named())


def recognises(fmt: Format, probe: Probe) -> bool:
    """Whether ``probe``'s file is of format ``fmt``, by its suffix and telltale (or as its last resort)."""
    telltale = fmt.telltale
    if isinstance(telltale, re.Pattern):  # a line of a text file
        if not (probe.suffix in fmt.suffixes or (probe.loose and probe.suffix == "")) or probe.binary:
            return False
        if (probe.loose and fmt.fallback) or telltale.search(probe.head) is not None:
            return True
        plain = probe.plain_head(telltale)
        return plain is not None and telltale.search(plain) is not None
    if probe.suffix not in fmt.suffixes:
        return False
    return (probe.loose and fmt.fallback) or (telltale is not None and bool(telltale(probe)))


def sniff(path: Path, loose: bool = False) -> str | None:
    """The format of ``path`` (a declared format: a key of ``READERS``, or ``logkit_jsonl`` /
    ``logkit_summary``), or None when it is no log we read. ``loose``: a file given by name may be
    taken by a format's last resort (a text file is a console capture even without a telltale line
    in its first 64 KiB)."""
    name = path.name
    order = by_priority()
    for fmt in order:
        if fmt.names is not None and fmt.names.match(name):
            return fmt.name
    probe = Probe(path, loose)
    if read_with_its_session(path, probe):
        return None
    for fmt in order:
        if recognises(fmt, probe):
            return fmt.name
    return None
