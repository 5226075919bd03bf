"""A capture of mostly unmatched lines costs memory for what is kept, not for what is skipped:
the console reader streams the file, and keeps the first ``KEEP_NOTES`` diagnostics of a reason
with their text (the rest counted). Four times the junk costs (almost) no more memory."""

from __future__ import annotations

import random
import tracemalloc

from logkit.ingest.readers.base import KEEP_NOTES
from logkit.ingest.readers.console import read_console

WORDS = "the quick brown fox jumps over the lazy dog loading shards tokenizer warning model data".split()
WATCHDOG = ("[rank1]:[E1122 10:10:01.601244 4022 ProcessGroupNCCL.cpp:616] [Rank 1] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum={n}, OpType=BROADCAST, NumelIn=1, NumelOut=1, Timeout(ms)=600000) "
            "ran for 600097 milliseconds before timing out.\n")


def _junk(path, megabytes: float) -> int:
    """A capture of random words with a watchdog line every 5000 lines; the number of those."""
    rng = random.Random(7)
    size, n, found = 0, 0, 0
    with open(path, "w", encoding="utf-8") as fh:
        while size < megabytes * 1e6:
            n += 1
            if n % 5000 == 0:
                line, found = WATCHDOG.format(n=n), found + 1
            else:
                line = " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 14))) + f" {n}\n"
            fh.write(line)
            size += len(line)
    return found


def _peak(path) -> tuple[int, object]:
    tracemalloc.start()
    try:
        read = read_console(path)
        return tracemalloc.get_traced_memory()[1], read
    finally:
        tracemalloc.stop()


def test_junk_costs_memory_for_what_is_kept(tmp_path):
    small, large = tmp_path / "small.log", tmp_path / "large.log"
    _junk(small, 1)
    watchdogs = _junk(large, 4)
    peak_small, _ = _peak(small)
    peak_large, read = _peak(large)
    events = read.tables["events"]
    assert events.num_rows == watchdogs  # what a grammar reads is all kept
    assert len(read.diagnostics) == KEEP_NOTES + 1  # the first thousand, and one count of the rest
    assert peak_large < peak_small + 500_000  # 3 MB more junk: under 0.5 MB more memory
    assert peak_large < 4_000_000
