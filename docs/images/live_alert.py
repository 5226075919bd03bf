"""Makes ``docs/images/live_alert.svg``: the live view (``analyze_logs --follow``) of a real 2-rank CPU run
whose rank 1 loads its data slower (a straggler) and then stops before its gradient sync at a step (a
stall), drawn when the stall alert is raised.

    python docs/images/live_alert.py            # about a minute on 2 cores

The run is ``examples/train_accelerate_loop.py`` under ``accelerate launch`` (gloo), its stall watch set
to write stall records after 15 s (they say where each rank is); the view is followed in this process
(``run.follow.Follower``) and drawn by ``report.live_view.snapshot_view`` on a recording rich console.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO))

import psutil  # noqa: E402
from rich.console import Console  # noqa: E402

from logkit.report.live_view import snapshot_view  # noqa: E402
from logkit.run.follow import Follower  # noqa: E402

BIN = Path(sys.executable).parent
OUT = Path(__file__).with_suffix(".svg")


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="logkit-alert-") as tmp:
        logs = Path(tmp) / "logs"
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        env = {**os.environ, "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}
        launch = subprocess.Popen(
            [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
             "--mixed_precision", "no", "--dynamo_backend", "no", "--main_process_port", str(port),
             str(REPO / "examples/train_accelerate_loop.py"), "--log-dir", str(logs), "--hidden", "64",
             "--steps", "300", "--sleep", "0.1", "--slow-rank", "1", "--slow-data", "0.05", "--hang-at", "120",
             "--pg-timeout", "300", "--log-setting", "stall_min_s=15"],
            cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        follower = Follower(logs)
        try:
            deadline = time.monotonic() + 300
            while time.monotonic() < deadline:
                snap, _ = follower.step()
                if any(a.kind == "stall" for s in snap.sessions for a in s.alerts):
                    break
                time.sleep(1.0)
            else:
                raise SystemExit("no stall alert within 300 s")
        finally:
            for proc in [*psutil.Process(launch.pid).children(recursive=True), psutil.Process(launch.pid)]:
                proc.kill()  # the ranks run in sessions of their own: the launcher's group is not all of them
            launch.wait()
            follower.close()
        console = Console(record=True, width=150, file=open(os.devnull, "w"), force_terminal=True)  # noqa: SIM115
        console.print(snapshot_view(snap, "logs"))
        console.save_svg(str(OUT), title="analyze_logs logs --follow")
    print(f"written {OUT} ({OUT.stat().st_size // 1024} KB)")


if __name__ == "__main__":
    main()
