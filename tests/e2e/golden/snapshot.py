"""The golden snapshot of ``analyze_logs --json`` over every folder of ``sample_logs/``.

Taken before the redesign of the contract and results (the house moved; the figures must not):
``python tests/e2e/golden/snapshot.py`` writes one ``<name>.json`` per folder, holding the command,
its exit code, its JSON document, and the exit codes of the two gates. ``test_golden.py``
runs the same commands and compares. Regenerate only when a figure is meant to change, and
say which in the commit.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
SAMPLES = "sample_logs"
# every folder of sample_logs/ that holds logs (its sub-folders are read again one level down)
FOLDERS = (
    ".", "console", "gpu", "gpu/captures", "gpu/loop_monitored", "gpu/qlora_single_gpu", "gpu/qlora_ultra",
    "gpu_captures", "legacy_summary", "nccl_tests", "qlora_tiny_cpu", "text_logs", "rank_dirs",
    "pipeline_sessions", "verbose_jsonl",
)
SECTIONS = ("--compare", "--communication", "--performance", "--diagnose")
# What sample_logs/ held when the snapshot was taken: the root's snapshot is of these together
# (fixtures added later, such as the real-world corpus, have tests of their own).
SNAPSHOT_TOP = ("console", "gpu", "gpu_captures", "legacy_summary", "nccl_tests", "qlora_tiny_cpu", "text_logs",
                "rank_dirs", "pipeline_sessions", "verbose_jsonl")


def snapshot_root(tmp: Path) -> Path:
    """A folder named sample_logs holding links to what sample_logs held at the snapshot (session ids
    are relative to the folder read, so they come out as they did)."""
    root = tmp / "sample_logs"
    root.mkdir(parents=True, exist_ok=True)
    for name in SNAPSHOT_TOP:
        link = root / name
        if not link.exists():
            link.symlink_to(ROOT / SAMPLES / name, target_is_directory=True)
    return root
# each gate alone, so that one's exit status never hides another's
GATES = (("--fail-on", "warning"), ("--fail-on", "error"), ("--fail-under-efficiency", "0.9"),
         ("--fail-under-efficiency", "0.5"))


def name_of(folder: str) -> str:
    return "root" if folder == "." else folder.replace("/", "__")


def run(args: list[str], cache_dir: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LOGKIT_CACHE_DIR": cache_dir, "PYTHONHASHSEED": "0"}
    # the snapshot's root gathers sample_logs' folders with links: they are followed, as asked
    args = [*args, "--follow-links"]
    return subprocess.run([sys.executable, "-m", "logkit.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=600)


def take(folder: str, cache_dir: str) -> dict:
    path = SAMPLES if folder == "." else f"{SAMPLES}/{folder}"
    # the root is read as the test reads it: the folders sample_logs held at the snapshot, not today's
    read = str(snapshot_root(Path(cache_dir) / "root")) if folder == "." else path
    args = [path, "--json", *SECTIONS, "--no-cache"]
    proc = run([read, *args[1:]], cache_dir)
    gates = [{"args": [path, "--json", "--no-cache", *gate], "exit_code": run([read, "--json", "--no-cache", *gate],
                                                                             cache_dir).returncode} for gate in GATES]
    return {"args": args, "exit_code": proc.returncode, "document": json.loads(proc.stdout) if proc.stdout else None,
            "gates": gates}


def main() -> None:
    only = sys.argv[1:] or FOLDERS  # folders named on the command line, or all
    with tempfile.TemporaryDirectory() as cache:
        for folder in only:
            snap = take(folder, cache)
            (HERE / f"{name_of(folder)}.json").write_text(json.dumps(snap, indent=1, sort_keys=False) + "\n")
            print(folder, snap["exit_code"], [g["exit_code"] for g in snap["gates"]])


if __name__ == "__main__":
    main()
