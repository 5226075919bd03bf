"""What the sharded e2e tests check of a run whose rank 1 loads data ``slow_ms`` slower per step, through
the CLI as a user types it (one place for FSDP2, FSDP1 and DeepSpeed)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.support.launch import analyze_logs


def assert_slow_data_rank_1(logs: Path, cwd: Path, slow_ms: float, *, data_times: bool = True) -> None:
    """Rank 1 the straggler with cause data, rank 0 not, and rank 0 waiting for it (>= 80% of the sleep);
    ``data_times``: also rank 1's data time holds the sleep and rank 0's does not."""
    doc = json.loads(analyze_logs(str(logs), "--performance", "--json", cwd=cwd).stdout)
    by_rank = {row["rank"]: row for row in doc["stragglers"]}
    assert by_rank[1]["is_straggler"] and by_rank[1]["cause"] == "data", by_rank
    assert not by_rank[0]["is_straggler"]
    parts = {row["rank"]: row for row in doc["step_breakdown"]}
    if data_times:
        assert parts[1]["data_s"] >= slow_ms / 1e3 and parts[0]["data_s"] < slow_ms / 5e3  # on rank 1 only
    assert parts[0]["wait_s"] >= 0.8 * slow_ms / 1e3  # rank 0 waits for it at its first collective
