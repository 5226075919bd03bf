"""Every reader on mutated real inputs never raises: the files of ``sample_logs/`` (the real-world
corpus and the fixtures) cut short, with lines swapped, doubled or dropped, bytes flipped, numbers
made huge or odd, odd Unicode and very long lines put in. Each mutated file is read by the reader
of its format (and by the console reader, which any file given by name may reach) and built into
a session, as ``load_session`` does.

The suite runs a few hundred inputs (seconds); ``LOGKIT_FUZZ_INPUTS=N`` (and ``LOGKIT_FUZZ_SEED``)
runs more by hand. A crash is reported with the seed and input number that make it again.
"""

from __future__ import annotations

import os
import random
import traceback
from pathlib import Path

import pytest

from logkit.ingest.discover import SessionSource, SourceFile
from logkit.ingest.load import build_session
from logkit.ingest.readers import READERS, sniff
from logkit.schema.lines import ERRORS_LINE
from tests.support.launch import REPO

SAMPLES = REPO / "sample_logs"
# Real excerpts the readers' own tests use: formats no sample folder holds start from them too.
TEST_DATA = REPO / "tests" / "data"
# Files of each format to start from: what sniff names them, and the JSON documents by their name.
_JSON = {"trainer_state.json": "trainer_state", "results.json": "results_json"}
_ODD_TEXT = ["\u202e", "\u0000", "\ufeff", "\u0301", "１２３", "١٢٣", "\U0001f525", "\ud800", "\x1b[31m", "\r",
             "\x85", "\u2028", "NaN", "-inf", "1e400", "9" * 40, "-0", "0x1f", "[rank-1]:", "[rank99999999999999999]:"]
_ODD_BYTES = [b"\xff\xfe", b"\x00", b"\xc3", b"\xe2\x82", b"\r\n", b"\n\n\n", b"\t" * 20]


def _errors_log() -> bytes:
    """Our errors.log (no fixture holds one): lines as the logger writes them, one not."""
    lines = [ERRORS_LINE.format(timestamp="2026-01-01T00:00:05.000000+00:00", level="ERROR",
                                message="cannot write x_rank0.jsonl: OSError(28, 'No space left on device')"),
             "not a line of the errors log",
             ERRORS_LINE.format(timestamp="2026-01-01T00:00:09.500000+00:00", level="WARNING",
                                message="x_rank0.jsonl was removed while in use: recreated")]
    return ("\n".join(lines) + "\n").encode()


def _seeds() -> list[tuple[str, str, bytes]]:
    """(format, file name, bytes) of every file to start from."""
    out = [("logkit_errors", "x_errors.log", _errors_log())]
    for path in sorted([*SAMPLES.rglob("*"), *TEST_DATA.rglob("*")]):
        if not path.is_file() or path.suffix in (".sh", ".gz", ".parquet") or path.name == "facts.json":
            continue
        if path.suffix == ".md" and sniff(path, loose=False) != "model_card":
            continue  # Markdown is read only as the Trainer's model card; the rest are docs
        if path.stat().st_size > 300_000:
            continue
        fmt = _JSON.get(path.name) or sniff(path, loose=False)
        if fmt in READERS:
            out.append((fmt, str(path.relative_to(REPO)), path.read_bytes()))
    return out


SEEDS = _seeds()


def _numbers(data: bytes, rng: random.Random) -> bytes:
    """A run of digits made huge, negative, fractional or not a number."""
    spots = [i for i in range(len(data)) if 48 <= data[i] <= 57]
    if not spots:
        return data
    i = rng.choice(spots)
    j = i
    while j < len(data) and 48 <= data[j] <= 57:
        j += 1
    new = rng.choice([b"9" * rng.randint(19, 400), b"-" + data[i:j], b"1e400", b"nan", b"-0", b"0", b"1.5e-320",
                      "١٢".encode(), b""])
    return data[:i] + new + data[j:]


def mutate(data: bytes, rng: random.Random) -> bytes:
    """One to four mutations of ``data``."""
    for _ in range(rng.randint(1, 4)):
        lines = data.split(b"\n")
        kind = rng.randrange(10)
        if kind == 0 and data:  # cut short anywhere
            data = data[:rng.randrange(len(data))]
        elif kind == 1 and len(lines) > 2:  # swap two lines
            a, b = rng.randrange(len(lines)), rng.randrange(len(lines))
            lines[a], lines[b] = lines[b], lines[a]
            data = b"\n".join(lines)
        elif kind == 2 and lines:  # double or drop a line
            k = rng.randrange(len(lines))
            lines[k:k + 1] = [lines[k]] * rng.choice([0, 2, 50])
            data = b"\n".join(lines)
        elif kind == 3 and data:  # flip bytes
            buf = bytearray(data)
            for _ in range(rng.randint(1, 8)):
                buf[rng.randrange(len(buf))] ^= 1 << rng.randrange(8)
            data = bytes(buf)
        elif kind == 4:
            data = _numbers(data, rng)
        elif kind == 5:  # odd Unicode where a line starts or ends, or mid-line
            at = rng.randrange(len(data) + 1)
            data = data[:at] + rng.choice(_ODD_TEXT).encode("utf-8", "surrogatepass") + data[at:]
        elif kind == 6:
            at = rng.randrange(len(data) + 1)
            data = data[:at] + rng.choice(_ODD_BYTES) + data[at:]
        elif kind == 7 and lines:  # a very long line
            k = rng.randrange(len(lines))
            lines[k] = lines[k] * rng.randint(50, 400) + b"x" * rng.choice([0, 200_000])
            data = b"\n".join(lines)
        elif kind == 8 and len(lines) > 3:  # a block of lines moved (records out of order)
            a = rng.randrange(len(lines))
            block = lines[a:a + rng.randint(1, 10)]
            del lines[a:a + len(block)]
            b = rng.randrange(len(lines) + 1)
            lines[b:b] = block
            data = b"\n".join(lines)
        else:  # another format's line inside this one
            other = rng.choice(SEEDS)[2].split(b"\n")
            at = rng.randrange(len(lines) + 1)
            lines[at:at] = [rng.choice(other)]
            data = b"\n".join(lines)
    return data


def read_one(fmt: str, path: Path) -> None:
    """What ``load_session`` does with a file of ``fmt``: read it, and build its session."""
    READERS[fmt](path)
    build_session(SessionSource(path.stem, path.parent, extra=[SourceFile(fmt, path)], kind="file"))


def fuzz(inputs: int, seed: int, folder: Path) -> list[str]:
    """Crashes (seed, input number, format, file, traceback) over ``inputs`` mutated files."""
    rng = random.Random(seed)
    crashes = []
    for n in range(inputs):
        fmt, name, original = SEEDS[n % len(SEEDS)]
        data = mutate(original, rng)
        path = folder / (Path(name).name if fmt in _JSON.values() else f"fuzz_{n}{Path(name).suffix or '.log'}")
        path.write_bytes(data)
        for reader in dict.fromkeys([fmt, "console"] if fmt not in _JSON.values() else [fmt]):
            try:
                read_one(reader, path)
            except Exception:  # noqa: BLE001 - a crash is what this test looks for
                crashes.append(f"seed {seed} input {n} ({reader}, from {name}):\n" + traceback.format_exc(limit=6))
        path.unlink()
    return crashes


def test_the_seeds_cover_every_reader():
    assert {fmt for fmt, _, _ in SEEDS} == set(READERS)


def test_no_mutated_input_crashes_a_reader(tmp_path):
    inputs = int(os.environ.get("LOGKIT_FUZZ_INPUTS", 2 * len(SEEDS)))
    seed = int(os.environ.get("LOGKIT_FUZZ_SEED", 20260101))
    crashes = fuzz(inputs, seed, tmp_path)
    assert not crashes, f"{len(crashes)} crash(es) in {inputs} inputs; the first:\n{crashes[0]}"


@pytest.mark.parametrize("data", [
    b"# nThread 1\n#  size count type redop root time algbw busbw #wrong time algbw busbw #wrong\n"
    b"1e400 1 float sum -1 1 1 1 0 1 1 1 0\nnan 1 float sum -1 1 1 1 0 1 1 1 0\n",
    b"# gpu pwr temp\n# Idx W C\n 0 1e400 nan\n 0 1 2 3\n",
    b"index, memory.used [MiB]\n0, 99999999999999999999999999 MiB\n\xff, 1\n",
])
def test_huge_and_odd_numbers_in_tables(tmp_path, data):
    path = tmp_path / "table.log"
    path.write_bytes(data)
    fmt = sniff(path, loose=True)
    read_one(fmt, path)
