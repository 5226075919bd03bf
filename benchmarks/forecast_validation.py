"""Validation of the forecast: a workload at 1 and 2 CPU ranks (gloo, ``accelerate launch``, OMP_NUM_THREADS
per rank), the forecast from those runs (``analyze_logs FIT --forecast 3,4 --json``) against the runs measured
at the larger sizes (``analyze_logs RUN --json``: their steady samples/s).

Workloads (``--workload``):

- ``known-cost`` (``known_cost_trainer.py``): sleeps for compute and data, a real all-reduce; ranks need no
  cores. Strong and weak regimes, small and large gradients, and a data-heavy one.
- ``real`` (``real_compute_trainer.py``): a token model's real forward, backward and AdamW steps on
  ``--threads-per-rank`` threads; strong and weak regimes, a 2 MB and a 16 MB model. Each rank needs its
  cores: on a host with fewer cores than ranks x threads the ranks contend, and the table measures that.
- ``qlora`` (``examples/train_qlora.py --tiny``): the tiny Llama, 4-bit NF4 (bitsandbytes) with LoRA
  adapters (peft), transformers' Trainer: per-device batch kept (weak). Needs bitsandbytes and peft.

    python benchmarks/forecast_validation.py --out OUT_DIR                       # known-cost, 1,2 -> 3,4
    python benchmarks/forecast_validation.py --out OUT_DIR --only strong-large
    python benchmarks/forecast_validation.py --out OUT_DIR --workload real --ranks 1,2,3,4,6,8
    python benchmarks/forecast_validation.py --out OUT_DIR --workload qlora --ranks 1,2,3

``--ranks``: every size run; the ``--fit`` sizes (default 1,2) are the forecast's input, the others are
forecast and measured. Prints each row as it is measured, then a Markdown table (configuration, forecast and
80% interval, measured, error, covered) and the verdict: within 15% and the interval covering the
measurement in at least 4 of 5 configurations. Writes under OUT_DIR/WORKLOAD/: each configuration's logs
(``fit/``, ``n3/``...), the CLI's JSON (``fit.json``, ``forecast.json``, ``n3.json``...), ``table.md`` and
``rows.json``, rewritten after each row: ``--budget SECONDS`` stops the run under way when the time is spent
and keeps the rows measured (``benchmarks/gpu/forecast_device.sh`` runs ``real`` and ``qlora`` so).
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import math
import os
import shutil
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TOLERANCE = 0.15


@dataclass(frozen=True)
class Workload:
    """A trainer, its configurations (name -> the trainer's arguments that define it), and how it is told
    its steps, its threads and where to write."""

    script: Path
    configs: dict[str, list[str]]
    steps_flag: str = "--steps"
    threads_flag: str | None = None  # None: the trainer sleeps, it needs no threads
    requires: tuple[str, ...] = ()  # modules the trainer imports beyond torch, accelerate, transformers
    ranks: tuple[int, ...] = (1, 2, 3, 4)

    def argv(self, config: str, steps: int, threads: int, log_dir: Path, run_dir: Path, out: Path) -> list[str]:
        args = [*self.configs[config], self.steps_flag, str(steps), "--log-dir", str(log_dir)]
        if self.threads_flag:
            args += [self.threads_flag, str(threads)]
        if self.script.name == "train_qlora.py":  # one tiny model for every run; each run its own outputs
            args += ["--tiny-dir", str(out / f"tiny-llama-{config}"), "--output-dir", str(run_dir / "outputs")]
        return args


WORKLOADS: dict[str, Workload] = {
    "known-cost": Workload(REPO / "benchmarks" / "known_cost_trainer.py", {
        "strong-small": ["--regime", "strong", "--grad-mb", "1"],
        "strong-large": ["--regime", "strong", "--grad-mb", "16"],
        "weak-small": ["--regime", "weak", "--grad-mb", "1"],
        "weak-large": ["--regime", "weak", "--grad-mb", "16"],
        "strong-large-data": ["--regime", "strong", "--grad-mb", "16", "--data-per-sample", "0.012"],
    }),
    "real": Workload(REPO / "benchmarks" / "real_compute_trainer.py", {
        "strong-small": ["--regime", "strong", "--grad-mb", "2"],
        "strong-large": ["--regime", "strong", "--grad-mb", "16"],
        "weak-small": ["--regime", "weak", "--grad-mb", "2"],
        "weak-large": ["--regime", "weak", "--grad-mb", "16"],
    }, threads_flag="--threads"),
    "qlora": Workload(REPO / "examples" / "train_qlora.py", {
        "weak-tiny": ["--tiny", "--tiny-hidden", "256", "--batch-size", "4"],
    }, steps_flag="--max-steps", threads_flag="--threads", requires=("bitsandbytes", "peft"), ranks=(1, 2, 3)),
}


def missing(workload: Workload) -> list[str]:
    """The modules ``workload`` needs that this interpreter cannot import, each with why (imported, not only
    looked up: a package can be there and fail to load, e.g. built for another torch)."""
    out = []
    for name in workload.requires:
        if importlib.util.find_spec(name) is None:
            out.append(f"{name} (not installed)")
            continue
        try:
            importlib.import_module(name)
        except Exception as exc:  # noqa: BLE001 (any failure to load says the same: it cannot be used)
            out.append(f"{name} ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})")
    return out


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(workload: Workload, config: str, ranks: int, log_dir: Path, steps: int, threads: int, out: Path,
           timeout: float) -> None:
    """One run of the workload's trainer on ``ranks`` CPU ranks, its session under ``log_dir``."""
    # through this interpreter, so that it runs where no console script is installed
    cmd = [sys.executable, "-m", "accelerate.commands.launch", "--num_processes", str(ranks), "--num_machines", "1",
           "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(_port())]
    if ranks > 1:
        cmd.insert(3, "--multi_gpu")
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "CUDA_VISIBLE_DEVICES": "",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    run_dir = log_dir.parent / f"{log_dir.name}-r{ranks}"
    args = workload.argv(config, steps, threads, log_dir, run_dir, out)
    proc = subprocess.Popen([*cmd, str(workload.script), *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=out)
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        stop_tree(proc)
        raise
    if proc.returncode != 0:
        raise RuntimeError(f"{ranks}-rank run failed ({proc.returncode}):\n{err[-3000:]}")


def stop_tree(proc: subprocess.Popen) -> None:
    """End the launcher and its ranks (they run in sessions of their own: the launcher's group is not theirs),
    so that nothing of a stopped run keeps the cores busy under the next one: SIGTERM first (each rank's
    logger ends its session), SIGKILL for what is left after 10 s."""
    from tests.support.launch import kill_tree

    kill_tree(proc.pid, grace_s=10)
    proc.kill()
    proc.communicate()


def analyze(*args: str, save: Path | None = None) -> dict:
    """``analyze_logs ARGS --json`` (its JSON also written to ``save``)."""
    proc = subprocess.run([sys.executable, "-m", "logkit.cli", *args, "--json", "--no-cache"], capture_output=True,
                          text=True, timeout=300, cwd=REPO)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"analyze_logs {' '.join(args)} failed: {proc.stderr[-2000:]}")
    if save is not None:
        save.write_text(proc.stdout)
    return json.loads(proc.stdout)


def measured_rate(doc: dict) -> float:
    """The steady samples/s of the one session of ``doc`` (its whole-run figure without a steady one)."""
    (s,) = doc["sessions"]
    return s["steady_samples_per_second"] or s["samples_per_second"]


def validate(workload: Workload, name: str, out: Path, steps: int, fit_sizes, sizes, threads: int = 1,
             timeout: float = 600, on_row=None, deadline: float = math.inf) -> list[dict]:
    """Run configuration ``name`` at ``fit_sizes`` ranks, forecast ``sizes`` from them, then run and measure each
    of ``sizes`` (``on_row`` called with each row as it is measured); logs and JSON under ``out/name``. A run
    past ``deadline`` (time.monotonic()) is stopped: subprocess.TimeoutExpired."""
    def run(ranks: int, log_dir: Path) -> None:
        left = deadline - time.monotonic()
        if left < 1:
            raise subprocess.TimeoutExpired(f"{name} at {ranks} ranks", 0)
        try:
            launch(workload, name, ranks, log_dir, steps, threads, out, min(timeout, left))
        except subprocess.TimeoutExpired as exc:
            raise subprocess.TimeoutExpired(f"{name} at {ranks} ranks", exc.timeout) from None

    where = out / name
    shutil.rmtree(where, ignore_errors=True)  # a rerun starts afresh: an old run in fit/ would join the fit
    fit = where / "fit"
    for ranks in fit_sizes:
        run(ranks, fit)
    analyze(str(fit), save=where / "fit.json")
    forecast = analyze(str(fit), "--forecast", ",".join(map(str, sizes)), save=where / "forecast.json")
    rows = {r["world_size"]: r for r in forecast["forecast"]}
    if set(sizes) - set(rows):  # the fit runs formed no group at two sizes: nothing to compare
        raise RuntimeError(f"analyze_logs {fit} --forecast gave no row for {sorted(set(sizes) - set(rows))} ranks "
                           f"(its groups: {sorted({r['group'] for r in forecast['forecast']})})")
    table = []
    for n in sizes:
        run(n, where / f"n{n}")
        f, measured = rows[n], measured_rate(analyze(str(where / f"n{n}"), save=where / f"n{n}.json"))
        err = f["samples_per_s"] / measured - 1 if f["samples_per_s"] else None  # None: no forecast, and why
        row = {"config": name, "args": " ".join(workload.configs[name]), "world_size": n,
               "forecast": f["samples_per_s"], "lo": f["lo"], "hi": f["hi"], "measured": measured, "error": err,
               "covered": bool(f["lo"] and f["lo"] <= measured <= f["hi"]), "dominant": f["note"],
               "basis": f["basis"], "load": round(os.getloadavg()[0], 1)}
        table.append(row)
        if on_row:
            on_row(row)
    return table


HEADER = ["| configuration | ranks | forecast samples/s (80% interval) | measured | error | covered |",
          "|---|---|---|---|---|---|"]


def markdown_row(r: dict) -> str:
    config = f"| {r['config']} ({r['args']}) | {r['world_size']} |"
    if r["forecast"] is None:
        return f"{config} {r['basis']} | {r['measured']:.1f} | - | no |"
    return (f"{config} {r['forecast']:.1f} ({r['lo']:.1f}-{r['hi']:.1f}) | {r['measured']:.1f} | "
            f"{r['error']:+.1%} | {'yes' if r['covered'] else 'no'} |")


def markdown(rows: list[dict]) -> str:
    return "\n".join([*HEADER, *map(markdown_row, rows)])


def verdict(rows: list[dict], seconds: float) -> tuple[str, bool]:
    """The summary line, and whether the bar was met."""
    configs = {r["config"] for r in rows}
    within = sum(r["error"] is not None and abs(r["error"]) <= TOLERANCE for r in rows)
    covered = sum(all(r["covered"] for r in rows if r["config"] == c) for c in configs)
    line = (f"within {TOLERANCE:.0%}: {within} of {len(rows)} forecasts ({sum(r['covered'] for r in rows)} covered "
            f"by the interval); the interval covered every size in {covered} of {len(configs)} configurations "
            f"({seconds:.0f} s, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f})")
    return line, within == len(rows) and covered >= min(4, len(configs))


def sizes_arg(text: str) -> list[int]:
    return sorted({int(x) for x in text.split(",") if x.strip()})


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, type=Path, help="folder for the runs' logs and the results")
    p.add_argument("--workload", choices=sorted(WORKLOADS), default="known-cost")
    p.add_argument("--ranks", type=sizes_arg, default=None,
                   help="every size run, e.g. 1,2,3,4,6,8 (default: the workload's, 1,2,3,4 or 1,2,3 for qlora)")
    p.add_argument("--fit", type=sizes_arg, default=[1, 2], help="the sizes the forecast is fitted on")
    p.add_argument("--threads-per-rank", type=int, default=1, help="OMP_NUM_THREADS and torch threads per rank")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--timeout", type=float, default=600, help="seconds one run may take")
    p.add_argument("--budget", type=float, default=None,
                   help="seconds for the whole validation: the run under way then is stopped, and the table "
                        "keeps the rows measured")
    p.add_argument("--only", action="append", help="only this configuration (repeatable)")
    args = p.parse_args(argv)
    workload = WORKLOADS[args.workload]
    unknown = sorted(set(args.only or ()) - set(workload.configs))
    if unknown:
        p.error(f"--only {', '.join(unknown)}: {args.workload}'s configurations are {', '.join(workload.configs)}")
    absent = missing(workload)
    if absent:
        print(f"{args.workload}: not run: {', '.join(absent)} cannot be imported by {sys.executable} (install "
              f"them, or put them on PYTHONPATH)", file=sys.stderr)
        return 2
    ranks = args.ranks or list(workload.ranks)
    fit_sizes = [n for n in ranks if n in args.fit]
    sizes = [n for n in ranks if n not in args.fit]
    if len(fit_sizes) < 2 or not sizes:
        p.error(f"--ranks {ranks} with --fit {args.fit}: two fit sizes and one size to forecast at least")
    out = (args.out / args.workload).resolve()
    out.mkdir(parents=True, exist_ok=True)
    print(f"{args.workload}: fit on {fit_sizes} ranks, forecast and measure {sizes}; {args.threads_per_rank} "
          f"thread(s) per rank, {args.steps} steps, {os.cpu_count()} cores", flush=True)
    print("\n".join(HEADER), flush=True)
    rows: list[dict] = []
    failed: list[str] = []
    started = time.time()

    def record(row: dict | None = None) -> tuple[str, bool]:
        """Print the row, and write the table so far (a run stopped by a time limit keeps what it measured)."""
        if row is not None:
            rows.append(row)
            print(markdown_row(row), flush=True)
        line, met = verdict(rows, time.time() - started)
        notes = "".join(f"\n{f}" for f in failed)
        (out / "table.md").write_text(f"{markdown(rows)}\n\n{line}{notes}\n")
        (out / "rows.json").write_text(json.dumps(rows, indent=1) + "\n")
        return line, met

    deadline = time.monotonic() + args.budget if args.budget else math.inf
    for name in args.only or workload.configs:
        try:
            validate(workload, name, out, args.steps, fit_sizes, sizes, args.threads_per_rank, args.timeout,
                     on_row=record, deadline=deadline)
        except subprocess.TimeoutExpired as exc:
            spent = time.monotonic() >= deadline - 1
            failed.append(f"{name}: stopped: {exc.cmd} ran out of time ({'--budget' if spent else '--timeout'})")
            print(failed[-1], flush=True)
            if spent:
                break
        except RuntimeError as exc:  # the next configuration still runs
            failed.append(f"{name}: failed: {exc}")
            print(failed[-1], file=sys.stderr, flush=True)
    line, met = record()
    print(f"\n{line}", flush=True)
    return 0 if met and not failed else 1


if __name__ == "__main__":
    sys.exit(main())
