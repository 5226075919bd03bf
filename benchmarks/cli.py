"""``analyze_logs`` as a user waits for it: whole processes, against a reference process in the same run.

Generates a session of about ``--size`` MB of JSONL (8 ranks, and rank 0's text logs: the generator of
``benchmarks/ingest.py``) and a tiny one, then runs, each in a fresh process, in alternated rounds (the
machine's speed drifts: each ratio is taken within a round, the figure printed is the median of the
rounds' ratios, and the times the medians of the rounds'):

- **cold**: ``analyze_logs DIR --performance --json`` with an empty cache (parse, analyse, write the
  caches), against a process that only parses the same JSONL files with ``pyarrow.json.read_json``
  (``python -c "import pyarrow.json ..."``): ratio cold / reference (target <= 1.5);
- **second run**: the same command again, the cache filled: ratio cold / second (target >= 5);
- **second run, other output**: ``--communication --json`` after the cold ``--performance --json`` (the
  first run's answer cannot be printed again: the sessions are read from the cache and analysed);
- **memory**: each process's peak RSS (the kernel's high-water mark, ``VmHWM``, read as the process
  exits); the cold run's peak at ``--size`` MB less its peak on the tiny folder: memory added per
  ``--size`` MB of logs (target <= 50 MB per 100 MB).

    python benchmarks/cli.py                    # 100 MB, 5 rounds
    python benchmarks/cli.py --size 20 --rounds 3
    python benchmarks/cli.py --baseline ../old      # also the same commands run by another checkout's
                                                    # logkit, in the same rounds (before/after)
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

# A process as the console script runs it (``from logkit.cli import main; sys.exit(main())``), that writes its
# peak RSS to $BENCH_HWM as it exits (atexit: after the CLI's SystemExit too).
_PEAK = ("import atexit, os\n"
         "def _hwm():\n"
         "    with open('/proc/self/status') as fh:\n"
         "        kb = next(int(l.split()[1]) for l in fh if l.startswith('VmHWM:'))\n"
         "    with open(os.environ['BENCH_HWM'], 'w') as out:\n"
         "        out.write(str(kb * 1024))\n"
         "atexit.register(_hwm)\n")
_CLI = _PEAK + "import sys\nsys.argv[0] = 'analyze_logs'\nfrom logkit.cli import main\nsys.exit(main())\n"
_PYARROW = _PEAK + "import sys\nimport pyarrow.json as pj\nfor f in sys.argv[1:]:\n    pj.read_json(f)\n"


def _run(code: str, args: list, cache: Path, hwm: Path, root: Path = ROOT) -> tuple[float, int]:
    """(wall seconds, peak RSS bytes) of a fresh process running ``code`` with ``args``, with the logkit of
    the checkout ``root``."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}  # as installed: .pyc kept
    env.update({"LOGKIT_CACHE_DIR": str(cache), "BENCH_HWM": str(hwm), "PYTHONPATH": str(root)})
    t = time.perf_counter()
    subprocess.run([sys.executable, "-c", code, *map(str, args)], check=True, env=env, cwd=root,
                   stdout=subprocess.DEVNULL)
    return time.perf_counter() - t, int(hwm.read_text())


def _load() -> str:
    try:
        return "load average " + " ".join(f"{x:.2f}" for x in os.getloadavg())
    except OSError:
        return "load average unknown"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--size", type=float, default=100.0, help="MB of JSONL in the session (default 100)")
    ap.add_argument("--rounds", type=int, default=5, help="alternated rounds (medians; default 5)")
    ap.add_argument("--baseline", type=Path, default=None,
                    help="another checkout of logkit (a folder): its analyze_logs timed in the same rounds")
    args = ap.parse_args()

    from benchmarks.ingest import generate

    tmp = Path(tempfile.mkdtemp(prefix="logkit-bench-cli-"))
    try:
        logs, tiny = tmp / "logs", tmp / "tiny"
        session = generate(logs, args.size)
        generate(tiny, 0.05)
        files = sorted(session.glob("*_rank*.jsonl"))
        mb = sum(f.stat().st_size for f in files) / 1e6
        print(f"{mb:.0f} MB JSONL in {len(files)} streams + text logs; tiny folder"
              f" {sum(f.stat().st_size for f in tiny.rglob('*') if f.is_file()) / 1e3:.0f} kB"
              f"  (python {sys.version.split()[0]}, {os.cpu_count()} CPUs, {_load()} at the start)")
        hwm = tmp / "hwm"
        cmd = [logs, "--performance", "--json"]
        rows: dict[str, list[tuple[float, int]]] = {}

        def one(name, code, argv, cache, root=ROOT):
            rows.setdefault(name, []).append(_run(code, argv, cache, hwm, root))

        checkouts = [("", ROOT)] + ([("baseline ", args.baseline.resolve())] if args.baseline else [])
        for _, root in checkouts:  # the files in the page cache, logkit's .pyc written (as installed)
            _run(_CLI, [tiny, "--json"], tmp / "warmup", hwm, root)
        _run(_PYARROW, files, tmp / "warmup", hwm)
        for r in range(args.rounds):
            one("reference: pyarrow.json.read_json of the same files", _PYARROW, files, tmp)
            for label, root in checkouts:
                cache = tmp / f"cache{r}{label.strip()}"
                one(f"{label}cold: analyze_logs DIR --performance --json, empty cache", _CLI, cmd, cache, root)
                one(f"{label}second run: the same command", _CLI, cmd, cache, root)
                one(f"{label}second run, other output: --communication --json", _CLI,
                    [logs, "--communication", "--json"], cache, root)
                one(f"{label}tiny folder, cold: analyze_logs TINY --performance --json", _CLI,
                    [tiny, "--performance", "--json"], tmp / f"tiny{r}{label.strip()}", root)
                shutil.rmtree(cache)
        print(f"\nWhole processes, {args.rounds} alternated rounds (medians; {_load()} at the end):")
        for name in rows:
            wall = statistics.median(t for t, _ in rows[name])
            peak = statistics.median(p for _, p in rows[name])
            print(f"  {name:<70} {wall:6.2f} s  peak RSS {peak / 1e6:6.0f} MB")

        def ratio(a, b):  # the median over rounds of a's time / b's
            return statistics.median(x[0] / y[0] for x, y in zip(rows[a], rows[b], strict=True))

        ref = next(iter(rows))
        for label, _ in checkouts:
            cold, second, other, small = (n for n in rows if n != ref and n.startswith(label)
                                          and (label or not n.startswith("baseline ")))
            print(f"  {label}cold / reference:                     {ratio(cold, ref):5.2f}x  (target <= 1.5)")
            print(f"  {label}cold / second run:                    {ratio(cold, second):5.1f}x  (target >= 5)")
            print(f"  {label}cold / second run with other output:  {ratio(cold, other):5.1f}x")
            added = statistics.median(c[1] - s[1] for c, s in zip(rows[cold], rows[small], strict=True))
            print(f"  {label}memory added above the tiny folder's run: {added / 1e6:.0f} MB for {mb:.0f} MB of logs"
                  f" ({added / 1e6 * 100 / mb:.0f} MB per 100 MB; target <= 50)")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
