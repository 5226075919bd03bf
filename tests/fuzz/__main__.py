"""``make fuzz``: the long fuzz run. The hostile folders at full scale (20,000 files, 20,000 rank streams in
50 sessions, 1 GB gzip bombs, FIFOs, devices, links, names that are not UTF-8, a stream written while it
is read), each within a minute, then ``--inputs`` folders drawn from the format strategies
(``tests.fuzz.strategies``: our sessions from the record specs, run folders, every other format's
examples mutated). The process runs under a memory limit (``--memory-gb``: a blow-up is a
``MemoryError``, classed as a failure). Prints the inputs tried per generator and the failures by class
(each with the folder that makes it again, kept under ``--keep``); exits 1 on any failure.

    python -m tests.fuzz --inputs 10000
    python -m tests.fuzz --inputs 500 --no-hostile --seed 7
"""

from __future__ import annotations

import argparse
import resource
import shutil
import sys
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz.check import TIME_LIMIT_S, examine, failure_class, time_limit, write_files
from tests.fuzz.hostile import Growing, corpus, limits_for
from tests.fuzz.strategies import GENERATORS


class Tally:
    def __init__(self, keep: Path) -> None:
        self.tried: Counter = Counter()
        self.failures: dict[str, list[str]] = defaultdict(list)
        self.keep = keep

    def run(self, generator: str, folder: Path, html: bool = False, expect: str | tuple | None = None,
            follow: Growing | None = None) -> None:
        self.tried[generator] += 1
        try:
            if follow is not None:
                follow.start()
            with time_limit(TIME_LIMIT_S):
                said = examine(folder, html=html)["said"]
            words = (expect,) if isinstance(expect, str) else expect or ()
            if words and not any(w in s for w in words for s in said):
                raise AssertionError(f"no diagnostic says {' or '.join(words)}")
        except Exception as exc:  # noqa: BLE001 - every failure is counted by its class
            kind = failure_class(exc)
            kept = self.keep / f"{len(self.failures)}_{generator}"
            if len(self.failures[kind]) < 3:
                shutil.copytree(folder, kept, symlinks=True, ignore_dangling_symlinks=True, dirs_exist_ok=True)
            self.failures[kind].append(f"{generator}: {exc!s:.200} (kept: {kept})")
        finally:
            if follow is not None:
                follow.end()

    def report(self) -> int:
        total = sum(self.tried.values())
        print(f"\n{total} inputs tried:")
        for name, n in sorted(self.tried.items()):
            print(f"  {name}: {n}")
        if not self.failures:
            print("no failure")
            return 0
        print(f"{sum(len(v) for v in self.failures.values())} failures, by class:")
        for kind, cases in sorted(self.failures.items(), key=lambda kv: -len(kv[1])):
            print(f"  {len(cases)} x {kind}")
            for case in cases[:3]:
                print(f"      {case}")
        return 1


def hostile(tally: Tally, scale: str, base: Path) -> None:
    for name, build in corpus(scale).items():
        folder = Path(tempfile.mkdtemp(prefix=f"{name}-", dir=base))
        made = build(folder)
        growing = made if isinstance(made, Growing) else None
        start = time.perf_counter()
        with limits_for(scale):
            tally.run(f"hostile:{name}", folder, expect=None if isinstance(made, Growing) else made, follow=growing)
        print(f"  hostile {name}: {time.perf_counter() - start:.1f} s", flush=True)
        shutil.rmtree(folder, ignore_errors=True)


def _runner(tally: Tally, name: str, strategy, per: int, base: Path):
    count = [0]

    @settings(max_examples=per, phases=[Phase.generate], database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(files=strategy, html=st.integers(0, 19))
    def one(files, html):
        folder = Path(tempfile.mkdtemp(dir=base))
        try:
            write_files(folder, files)
            tally.run(name, folder, html=html == 0)
        finally:
            shutil.rmtree(folder, ignore_errors=True)
        count[0] += 1
        if count[0] % 500 == 0:
            print(f"  {name}: {count[0]} inputs", flush=True)
    return one


def generated(tally: Tally, inputs: int, base: Path) -> None:
    per = max(1, inputs // len(GENERATORS))
    for name, strategy in GENERATORS.items():
        _runner(tally, name, strategy, per, base)()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.fuzz", description=__doc__.split("\n\n")[0])
    parser.add_argument("--inputs", type=int, default=10_000, help="folders drawn from the strategies")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--no-hostile", action="store_true", help="leave out the hostile folders")
    parser.add_argument("--scale", choices=["fast", "full"], default="full", help="the hostile folders' size")
    parser.add_argument("--memory-gb", type=float, default=4.0, help="the process' address-space limit")
    parser.add_argument("--keep", type=Path, default=Path(tempfile.gettempdir()) / "logkit-fuzz-failures")
    args = parser.parse_args(argv)
    limit = int(args.memory_gb * (1 << 30))
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if args.seed is not None:
        import random

        random.seed(args.seed)
    args.keep.mkdir(parents=True, exist_ok=True)
    tally = Tally(args.keep)
    base = Path(tempfile.mkdtemp(prefix="logkit-fuzz-"))
    started = time.perf_counter()
    try:
        if not args.no_hostile:
            print(f"hostile folders ({args.scale}):", flush=True)
            hostile(tally, args.scale, base)
        print(f"{args.inputs} folders from the strategies:", flush=True)
        generated(tally, args.inputs, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print(f"({time.perf_counter() - started:.0f} s)")
    return tally.report()


if __name__ == "__main__":
    sys.exit(main())
