"""The one way a text reader gets its lines: each record of the file as the program that wrote it
wrote it, without what launchers, hosts, clocks, pastes and log services put around it.

A reader declares its ``Grammar`` (how a line of its format begins, and, where it has them, which
records may run on to the next line) and iterates ``records(read, grammar)``: ``Line``\\ s with the
text, the file's line number where the record starts (a joined record cites its first line), and the
rank, host and time stamp its prefixes said. No reader takes prefixes off itself.

What is done, in order:

1. **learned from the file** (its first ``SAMPLE_LINES`` lines, ``Layout.learn``): a common
   indentation (a log pasted indented, as in a README) is taken off; then a prefix that most lines
   share *in shape* (digits as digits, words as words, punctuation as it is: CloudWatch's
   ``| 2024-05-01T10:00:00.123Z | ``, ``kubectl logs --prefix``' ``[pod/name/container] ``, ``srun -l``'s
   ``12: ``, pdsh's ``host: ``, a ``[worker-3] `` tag, a syslog head, a clock, pasted line numbers, a
   markdown quote ``> ``, a pane border ``│ ``) is taken off where what follows it begins as a line
   of the grammar more often than the line with it does; up to ``DEPTH`` such prefixes nest. A
   prefix that is ``N: `` gives the line's rank (``srun -l``), one that is ``host: `` its host (pdsh);
   and the width a terminal cut long lines at, where the file shows one.
2. **always known** (``prefixes.peel``): launcher rank prefixes (which give the rank), Ray's, a host
   and stream tag, CRI, colour codes whose ESC byte was lost.
3. **joined**: a line cut at the terminal's width continues on the next line that carries no prefix
   of its own and does not begin as a line of the grammar; a record the grammar says is cut
   (``Grammar.cut``: a watchdog message whose tail a paste put on the next line) is joined with the
   next such line where the join reads whole.
4. **split**: records glued onto one line (a progress bar before a ``[rankN]:`` line, a printed
   log dict ``{'loss': ...}`` or a logging record ``[2023-06-07 22:16:00,018] [INFO] ...``, a torchrun
   teardown flattened onto one line, a log service's row holding a multi-line event as literal
   ``\\n``) become records of their own, each citing the line.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from logkit.ingest.readers.formats import NCCL_RECORD_START
from logkit.ingest.readers.prefixes import ELASTIC, MPI, has_prefix, peel

if TYPE_CHECKING:
    from logkit.ingest.readers.base import Read

SAMPLE_LINES = 200  # the lines a file's layout is learned from
DEPTH = 3  # learned prefixes that may nest (an indentation, a log service's column, a task number)
MOST = 0.6  # the share of the sample's lines a prefix must be found on
MAX_PREFIX = 120  # characters a prefix may span
MIN_WIDTH = 60  # a narrower "terminal width" is a file's own short lines, not a wrap

# A token of a prefix's shape: spaces, a word (letters, digits, ., -, _), one punctuation character.
_TOKEN = re.compile(r"(?P<ws>[ \t]+)|(?P<word>[A-Za-z0-9_][\w.-]*)|(?P<punct>[^\sA-Za-z0-9_])")
_CLOSE = frozenset("]|:>│)")  # what a prefix may end with (before a space)
_ISO = re.compile(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?")
# a learned prefix that is a bare tag ("[0] "): a writer that tags each write, not each line, also glues it
# inside the line where a line was printed in pieces (nccl-tests' row: "... -1[0]    1626.5 ... 0[0]    2302.3")
_TAG = re.compile(r"\[[\w.-]+\]")
# a tqdm bar after "word: ": the word is the bar's label ("Training: 100%|..."), not a host pdsh put there
_BAR = re.compile(r"\s*\d{1,3}%\|")
# a tqdm bar with its label ("Map: 100%|...", "Evaluating: 100%|..."): tqdm writes each from the line's start, so
# it is a record of its own, never the tail of a wrapped line (bars of one width look like a terminal's wraps)
# (or any label, "Training Epoch: 2/3, step 49/50 completed (loss: 1.03): 100%|███|", torchtune's "1|16|Loss: 2.57: ",
# where the bar is there whole up to its n/total: no wrapped line's rest looks so; not from a "[": a prefix's)
_LABELLED_BAR = re.compile(r"[\w .-]{1,40}:\s*\d{1,3}%\||[^\[\n][^\n]{0,199}?:\s*\d{1,3}%\|[^|\n]{0,400}\|\s*\d+/\d+ \[")
_NOT_HOST = re.compile(r"(?:Error|Exception|Warning|Interrupt|Exit|Failure)$|^(?:stdout|stderr)$")
# Where records glued onto one line part: a launcher prefix (a bar's next write: "...16.21s/it][trainer0|0]:"), a glog header or an NCCL debug header after
# other text (processes writing without line buffering), or a log service's literal "\n".
_GLUED = re.compile(r"(?<=.)(?=" + re.sub(r"\(\?P<\w+>", "(?:", f"{ELASTIC}|{MPI}") + ")"
                    # a tqdm bar ("... 2.79it/s]", "... 1.20s/it]") with the Trainer's printed dict right after it
                    r"|(?<=it/s\])(?=\{')|(?<=s/it\])(?=\{')"
                    # a tqdm bar with a logging record right after it (tqdm ends its bar with "\r", no newline:
                    # "... 132.41s/it][2023-06-07 22:16:00,018] [INFO] [loss_scaler.py:181:update_scale] ...",
                    # also after a bar's postfix: "... 1.23it/s, loss=0.5][2023-...")
                    r"|(?<=it/s\]|s/it\])(?=\[)|(?<=\])(?=\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d)"
                    r"|(?<=\s)(?=[IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [\w./-]+:\d+\] )"
                    r"|(?<=\S )(?=" + NCCL_RECORD_START + ")")
_ESCAPED_NL = re.compile(r"\\r?\\n")
_WORD_COLON = re.compile(r"([\w.-]+): ")


@dataclass(frozen=True)
class Grammar:
    """What the layer asks of a format: ``starts``, how a line of it begins (a prefix is taken off
    only where what follows begins so more often than the line with it); ``cut``, whether a record
    is begun and not ended (the next line without a prefix may be its tail)."""

    starts: re.Pattern
    cut: Callable[[str], bool] | None = None

    def known(self, text: str) -> bool:
        return self.starts.match(peel(text).text) is not None


@dataclass(frozen=True, slots=True)
class Line:
    """One record: its ``text``, the file's line ``number`` it starts on (``last``: the line it ends
    on), and the ``rank``, ``host`` and ``stamp`` its prefixes said (None where they said none)."""

    number: int
    text: str
    rank: int | None = None
    host: str | None = None
    stamp: str | None = None
    last: int = 0


@dataclass(frozen=True)
class Learned:
    """One learned prefix: its pattern (groups ``rank`` / ``host`` where it names one) and its shape."""

    pattern: re.Pattern
    shape: str


@dataclass
class Layout:
    """What one file puts around its records: ``indent`` (characters of common indentation),
    ``prefixes`` (learned, outermost first), ``width`` (where a terminal cut its lines, or None)."""

    grammar: Grammar
    indent: int = 0
    prefixes: list[Learned] = field(default_factory=list)
    width: int | None = None

    @property
    def plain(self) -> bool:
        """Nothing learned: the file's lines are its records (a fast reader may take them whole)."""
        return not self.indent and not self.prefixes and self.width is None

    # -- learning -------------------------------------------------------------------------------
    @classmethod
    def learn(cls, sample: list[str], grammar: Grammar, share: float = 0.2) -> Layout:
        """The layout ``sample`` shows: a prefix is learned where it makes at least ``share`` of the lines
        that have it (and one line at least) begin as the grammar's lines do."""
        lines = [ln for ln in sample if ln.strip()][:SAMPLE_LINES]
        layout = cls(grammar, indent=_common_indent(lines, grammar))
        rest = [ln[layout.indent:] if _blank_head(ln, layout.indent) else ln for ln in lines]
        for _ in range(DEPTH):
            found = _learn_one(rest, grammar, share)
            if found is None:
                break
            layout.prefixes.append(found)
            rest = [_strip(found.pattern, ln)[0] for ln in rest]
        layout.width = _width(sample, layout)
        return layout

    # -- one physical line --------------------------------------------------------------------
    def outer(self, line: str) -> tuple[str, int | None, str | None, str | None]:
        """``line`` without the learned prefixes: its text, and the rank, host, stamp they named."""
        if self.indent and _blank_head(line, self.indent):
            line = line[self.indent:]
        rank = host = stamp = None
        for learned in self.prefixes:
            line, m = _strip(learned.pattern, line)
            if m is None:
                continue
            groups = m.groupdict()
            if groups.get("rank") is not None:
                rank = int(groups["rank"])
            if groups.get("host") is not None:
                host = groups["host"]
            elif host is None:
                host = peel(m[0]).host  # a known prefix inside what was learned ("[host:pid] PMIX ERROR: ")
            if stamp is None and (s := _ISO.search(m[0])) is not None:
                stamp = s[0]
        return line, rank, host, stamp

    def own_start(self, text: str) -> bool:
        """Whether ``text`` (a line without its learned prefixes) begins a record of its own: a prefix
        logkit always knows, or a line of the grammar."""
        return has_prefix(text) or self.grammar.starts.match(text) is not None or _LABELLED_BAR.match(text) is not None

    # -- the records --------------------------------------------------------------------------
    def records(self, numbered: Iterable[tuple[int, str]]) -> Iterator[Line]:
        """The records of the file's (number, line) pairs: joined, split, without their prefixes."""
        held: list | None = None  # [number, last, text, rank, host, stamp, raw width of the last line]
        cut = self.grammar.cut
        for number, raw in numbered:
            if not raw.strip():
                continue
            text, rank, host, stamp = self.outer(raw)
            if held is not None:
                joined = self._join(held, text, cut)
                if joined is not None:
                    held[1], held[2], held[6] = number, joined, len(raw)
                    continue
                yield from self._emit(held)
            held = [number, number, text, rank, host, stamp, len(raw)]
            if not self._open(held, cut):
                yield from self._emit(held)
                held = None
        if held is not None:
            yield from self._emit(held)

    def _open(self, held: list, cut) -> bool:
        return (self.width is not None and held[6] == self.width) or (cut is not None and cut(held[2]))

    def _join(self, held: list, text: str, cut) -> str | None:
        """The held record with ``text`` as its tail, or None where ``text`` is no tail of it."""
        if self.own_start(text):
            return None
        if self.width is not None and held[6] == self.width:
            return held[2] + text  # a terminal's wrap: the cut fell anywhere, even mid-word or after a space
        if cut is not None and cut(held[2]):
            for joined in (held[2] + text, held[2].rstrip() + " " + text.lstrip()):
                if not cut(joined):
                    return joined
        return None

    def _emit(self, held: list) -> Iterator[Line]:
        number, last, text, rank, host, stamp, _ = held
        # the padding a terminal put after a record: a wrapped record's last piece, a line tqdm's write padded
        # to the terminal's width (the Trainer's log dict printed under a progress bar)
        text = text.rstrip()
        for piece in _pieces(text, self.grammar):
            s = peel(piece)
            yield Line(number, s.text, s.rank if s.rank is not None else rank, s.host or host, s.stamp or stamp, last)


def _pieces(text: str, grammar: Grammar) -> list[str]:
    """``text`` split where records were glued onto it (a piece holding only prefixes stays with the next)."""
    if "\\n" in text:
        parts = _ESCAPED_NL.split(text)
        text_parts = [parts[0]]
        for part in parts[1:]:  # a literal "\n" parts records only where a record begins after it
            if grammar.known(part) or part[:1].isspace():
                text_parts.append(part)
            else:
                text_parts[-1] += "\\n" + part
        return [p for t in text_parts for p in _pieces(t, grammar)] if len(text_parts) > 1 else _glued(text)
    return _glued(text)


def _glued(text: str) -> list[str]:
    if "\r" in text:  # a progress bar redrawn in place: each state a record
        return [p for part in text.split("\r") if part.strip() for p in _glued(part)]
    if "]" not in text:
        return [text]
    cuts = [m.start() for m in _GLUED.finditer(text)]
    if not cuts:
        return [text]
    out, start = [], 0
    for at in cuts:
        rest = text[start:]
        if at - start > len(rest) - len(peel(rest).text):  # prefixes nest ("[default0]:[rank0]:"): no cut
            out.append(text[start:at].rstrip())
            start = at
    out.append(text[start:])
    return out


# --- learning ------------------------------------------------------------------------------------------
def _blank_head(line: str, n: int) -> bool:
    return line[:n].strip() == ""


def _common_indent(lines: list[str], grammar: Grammar) -> int:
    """The indentation a paste put before most lines (a README's), where taking it off leaves lines of
    the grammar more often (a traceback's own indentation stays)."""
    indents = [len(ln) - len(ln.lstrip(" \t")) for ln in lines]
    indented = [i for i in indents if i]
    if not lines or len(indented) < MOST * len(lines):
        return 0
    n = min(indented)
    gain = sum(grammar.known(ln[n:]) - grammar.known(ln) for ln in lines if _blank_head(ln, n))
    return n if gain > 0 else 0


def _shape(token: re.Match) -> str:
    if token["ws"] is not None:
        return " " if token["ws"] == " " else r"[ \t]+"
    if token["word"] is not None:
        return r"\d+" if token["word"].isdigit() else r"[\w.-]+"
    return re.escape(token["punct"])


def _candidates(line: str) -> dict[str, tuple[list[re.Match], int]]:
    """The shapes of the heads of ``line`` a prefix may span: each ends with a closing character (``]``,
    ``|``, ``:``, ``>``, ``│``, ``)``) and its space, or with a space after a number or a clock."""
    out: dict[str, tuple[list[re.Match], int]] = {}
    tokens: list[re.Match] = []
    for m in _TOKEN.finditer(line, 0, MAX_PREFIX):
        if m["ws"] is not None and tokens:
            prev = tokens[-1]
            closes = prev["punct"] is not None and prev["punct"] in _CLOSE
            number = prev["word"] is not None and prev["word"][:1].isdigit()
            if closes or number:  # a prefix ends with one space: more are the line's own indentation
                shape = "".join(map(_shape, tokens)) + (" " if m["ws"][0] == " " else r"\t")
                out.setdefault(shape, (tokens + [m], m.start() + 1))
        tokens.append(m)
    # a prefix alone on a line (a quote marker before an empty line)
    return out


def _compile(tokens: list[re.Match], sample_words: list[str]) -> re.Pattern:
    """The pattern of a shape; ``N: `` names a rank, ``host: `` a host (seen in the sample, or host-like)."""
    shapes = [_shape(t) for t in tokens]
    body = "".join(shapes)
    if len(tokens) == 3 and tokens[1]["punct"] == ":" and tokens[0]["word"] is not None:
        if tokens[0]["word"].isdigit():
            return re.compile(r"(?P<rank>\d+):(?: |$)")
        hosts = "|".join(map(re.escape, sorted(set(sample_words), key=len, reverse=True)))
        return re.compile(rf"(?P<host>{hosts}|[\w-]*[\d.-][\w.-]*): ")
    if len(tokens) > 3 and tokens[-2]["punct"] == ":" and tokens[-3]["word"] is not None and tokens[-3]["word"].isdigit():
        body = "".join(shapes[:-3]) + r"(?P<rank>\d+): "  # a task number closes it (a stamp, then srun -l's)
    # the last space may be missing where nothing follows the prefix ("> " before an empty line)
    return re.compile(body[:-1] + "(?: |$)" if body.endswith(" ") else body)


def _strip(pattern: re.Pattern, line: str) -> tuple[str, re.Match | None]:
    m = pattern.match(line)
    if m is None or (m.groupdict().get("host") is not None
                     and (_NOT_HOST.search(m["host"]) or _BAR.match(line, m.end()) is not None)):
        return line, None
    rest = line[m.end():]
    if _TAG.fullmatch(tag := m[0].strip()) and tag in rest:  # the same tag glued inside: taken off too
        rest = re.sub(rf"(?<=\S){re.escape(tag)}(?=\s)", " ", rest)
    return rest, m


def _learn_one(lines: list[str], grammar: Grammar, share: float) -> Learned | None:
    """The prefix most lines share in shape whose removal leaves lines of the grammar most often."""
    if not lines:
        return None
    support: Counter = Counter()
    example: dict[str, list[re.Match]] = {}
    for line in lines:
        for shape, (tokens, _) in _candidates(line).items():
            support[shape] += 1
            example.setdefault(shape, tokens)
    need = max(1, MOST * len(lines))
    best: tuple | None = None
    for shape, count in support.items():
        if count < need:
            continue
        tokens = example[shape]
        words = [m[1] for ln in lines if (m := _WORD_COLON.match(ln))] if len(tokens) == 3 else []
        pattern = _compile(tokens, words)
        gain = 0
        for line in lines:
            rest, m = _strip(pattern, line)
            if m is not None:
                # a labelled bar is a record as it is (behind a launcher's prefix too): its label is no prefix to learn
                gain += grammar.known(rest) - (grammar.known(line) or _LABELLED_BAR.match(peel(line).text) is not None)
        # the most lines made readable; of equals, the shortest prefix (as little taken off as will do)
        if gain >= max(1, share * count) and (best is None or (gain, -len(shape)) > best[:2]):
            best = (gain, -len(shape), Learned(pattern, shape))
    return best[2] if best else None


def _width(sample: list[str], layout: Layout) -> int | None:
    """The width a terminal cut the file's long lines at: the longest length, on two different lines or
    more, at least one of them followed by a line that begins no record of its own."""
    lengths = Counter(len(ln) for ln in sample if ln.strip())
    if not lengths:
        return None
    widest = max(lengths)
    # a cut falls on different text each time: the same long line repeated (each rank's warning, behind
    # prefixes that differ: "[host:pid] PMIX ERROR: ...") is no wrap
    if widest < MIN_WIDTH or len({peel(ln).text for ln in sample if len(ln) == widest}) < 2:
        return None
    for line, after in zip(sample, sample[1:], strict=False):
        if len(line) == widest and after.strip():
            text = layout.outer(after)[0]
            if not layout.own_start(text) and text == text.lstrip():
                return widest
    return None


# --- the entry point ---------------------------------------------------------------------------------
def layout_of(read: Read, grammar: Grammar, lines: Callable | None = None) -> Layout:
    """The layout of ``read``'s file, from its first lines (read apart: their notes are the main pass's).
    ``lines``: what gives a ``Read``'s (number, text) lines (``base.Lines``: a small file read once for
    every pass); default ``iter_lines`` of the file."""
    from logkit.ingest.readers.base import Read, iter_lines  # here: sniffing imports this module, light

    lines = lines or (lambda r: iter_lines(r.path, r))
    sample: list[str] = []
    for number, line in lines(Read(read.path, read.format)):
        sample += [""] * (min(number, SAMPLE_LINES + 1) - 1 - len(sample)) + [line]
        if len(sample) >= SAMPLE_LINES:
            break
    return Layout.learn(sample[:SAMPLE_LINES], grammar)


def records(read: Read, grammar: Grammar, layout: Layout | None = None,
            lines: Callable | None = None) -> Iterator[Line]:
    """The records of ``read``'s file (streamed), each counted in ``read.lines``; ``lines`` as for
    ``layout_of``."""
    from logkit.ingest.readers.base import iter_lines

    lines = lines or (lambda r: iter_lines(r.path, r))
    layout = layout or layout_of(read, grammar, lines)
    for line in layout.records(lines(read)):
        if line.text.strip():  # a prefix alone (a pasted line number before an empty line) says nothing
            read.lines += 1
            yield line


def plain_text(lines: list[str], starts: re.Pattern) -> str | None:
    """``lines`` (a file's head) without what the file puts around its lines, where it puts something
    around lines that begin as ``starts`` says (a format's telltale); None where it puts nothing."""
    layout = Layout.learn(lines[:SAMPLE_LINES], Grammar(starts), share=0)  # a telltale is a line or two
    if layout.plain:
        return None
    return "\n".join(r.text for r in layout.records(enumerate(lines[:SAMPLE_LINES], start=1)))


def layout_of_bytes(data: bytes, grammar: Grammar) -> Layout:
    """The layout of a file read whole, from the lines of its first 64 KiB (a reader that takes plain
    files by columns decodes nothing more to ask)."""
    head = data[:1 << 16].decode("utf-8", errors="replace").replace("\r", "").split("\n")
    if len(data) > 1 << 16:
        head = head[:-1]  # cut mid-line
    return Layout.learn(head[:SAMPLE_LINES], grammar)
