"""Validation of the forecast: the known-cost trainer (``known_cost_trainer.py``) at 1, 2, 3 and 4 CPU ranks
(gloo, ``accelerate launch``, OMP_NUM_THREADS=1), the forecast from the 1- and 2-rank runs
(``analyze_logs FIT --forecast 3,4 --json``) against the 3- and 4-rank runs measured
(``analyze_logs RUN --json``: their steady samples/s), in strong and weak regimes, small and large gradients.

    python benchmarks/forecast_validation.py --out OUT_DIR            # every configuration
    python benchmarks/forecast_validation.py --out OUT_DIR --only strong-large

Prints a Markdown table (configuration, forecast and 80% interval, measured, error, covered) and the
verdict: within 15% and the interval covering the measurement in at least 4 of 5 configurations.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TRAINER = REPO / "benchmarks" / "known_cost_trainer.py"
TOLERANCE = 0.15

# name -> the trainer's arguments (the costs it pays per step)
CONFIGS: dict[str, list[str]] = {
    "strong-small": ["--regime", "strong", "--grad-mb", "1"],
    "strong-large": ["--regime", "strong", "--grad-mb", "16"],
    "weak-small": ["--regime", "weak", "--grad-mb", "1"],
    "weak-large": ["--regime", "weak", "--grad-mb", "16"],
    "strong-large-data": ["--regime", "strong", "--grad-mb", "16", "--data-per-sample", "0.012"],
}


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(args: list[str], ranks: int, log_dir: Path, steps: int) -> None:
    """One run of the trainer on ``ranks`` CPU ranks, its session under ``log_dir``."""
    # through this interpreter, so that it runs where no console script is installed
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(ranks), "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_port())]
    if ranks > 1:
        cmd.insert(3, "--multi_gpu")
    env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run([*cmd, str(TRAINER), *args, "--steps", str(steps), "--log-dir", str(log_dir)], env=env,
                          capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"{ranks}-rank run failed ({proc.returncode}):\n{proc.stderr[-3000:]}")


def analyze(*args: str) -> dict:
    proc = subprocess.run([sys.executable, "-m", "logkit.cli", *args, "--json", "--no-cache"], capture_output=True,
                          text=True, timeout=300)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"analyze_logs {' '.join(args)} failed: {proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def measured_rate(folder: Path) -> float:
    """The steady samples/s of the one session under ``folder`` (its whole-run figure without a steady one)."""
    (s,) = analyze(str(folder))["sessions"]
    return s["steady_samples_per_second"] or s["samples_per_second"]


def validate(name: str, out: Path, steps: int, sizes=(3, 4)) -> list[dict]:
    """Run ``name`` at 1, 2 and ``sizes`` ranks under ``out/name``; one row per forecast size."""
    args = CONFIGS[name]
    fit = out / name / "fit"
    for ranks in (1, 2):
        launch(args, ranks, fit, steps)
    for n in sizes:
        launch(args, n, out / name / f"n{n}", steps)
    rows = {r["world_size"]: r for r in analyze(str(fit), "--forecast", ",".join(map(str, sizes)))["forecast"]}
    table = []
    for n in sizes:
        f, measured = rows[n], measured_rate(out / name / f"n{n}")
        err = f["samples_per_s"] / measured - 1 if f["samples_per_s"] else None  # None: no forecast, and why
        table.append({"config": name, "world_size": n, "forecast": f["samples_per_s"], "lo": f["lo"], "hi": f["hi"],
                      "measured": measured, "error": err, "covered": bool(f["lo"] and f["lo"] <= measured <= f["hi"]),
                      "dominant": f["note"], "basis": f["basis"]})
    return table


def markdown(rows: list[dict]) -> str:
    out = ["| configuration | ranks | forecast samples/s (80% interval) | measured | error | covered |",
           "|---|---|---|---|---|---|"]
    for r in rows:
        config = f"| {r['config']} ({' '.join(CONFIGS[r['config']])}) | {r['world_size']} |"
        if r["forecast"] is None:
            out.append(f"{config} {r['basis']} | {r['measured']:.1f} | - | no |")
            continue
        out.append(f"{config} {r['forecast']:.1f} ({r['lo']:.1f}-{r['hi']:.1f}) | {r['measured']:.1f} | "
                   f"{r['error']:+.1%} | {'yes' if r['covered'] else 'no'} |")
    return "\n".join(out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--out", required=True, type=Path, help="folder for the runs' logs")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--only", action="append", choices=sorted(CONFIGS), help="only this configuration (repeatable)")
    args = p.parse_args(argv)
    rows = []
    started = time.time()
    for name in args.only or CONFIGS:
        rows += validate(name, args.out, args.steps)
        print(markdown(rows[-2:]).splitlines()[-2:], file=sys.stderr, flush=True)
    print(markdown(rows))
    configs = {r["config"] for r in rows}
    within = all(r["error"] is not None and abs(r["error"]) <= TOLERANCE for r in rows)
    covered = sum(all(r["covered"] for r in rows if r["config"] == c) for c in configs)
    load = os.getloadavg()[0]
    print(f"\nwithin {TOLERANCE:.0%}: {'all' if within else 'not all'} of {len(rows)} forecasts; the interval covered "
          f"both sizes in {covered} of {len(configs)} configurations ({time.time() - started:.0f} s, load {load:.1f})")
    return 0 if within and covered >= min(4, len(configs)) else 1


if __name__ == "__main__":
    sys.exit(main())
