"""A tag written before each write, not each line: glued again inside a line printed in pieces. Real
nccl-tests rows (``tests/data/normalise/nccl_tests_119_rows.txt``, cited in its README) with such tags
put on here; expected values read off the rows by eye."""

from __future__ import annotations

import re

import pytest

import logkit
from tests.support.launch import REPO

ROWS = (REPO / "tests" / "data" / "normalise" / "nccl_tests_119_rows.txt").read_text().splitlines()


def tagged(tag: str) -> str:
    """Each row as a per-write tagger writes it: the tag before the row and before each column group
    (nccl-tests prints the size columns, the out-of-place and the in-place group by separate printf calls)."""
    out = []
    for row in ROWS:
        cells = row.split()
        out.append(f"{tag}    {' '.join(cells[:5])}{tag} {' '.join(cells[5:9])}{tag} {' '.join(cells[9:])}")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("tag", ["[0]", "[3]", "[worker-1]"])
def test_tags_glued_inside_rows_are_taken_off(tmp_path, tag):
    path = tmp_path / "bench.log"
    path.write_text(tagged(tag), encoding="utf-8")
    s = logkit.load_session(path)
    assert [f.value for f in s.meta["formats"]] == ["nccl_tests"]
    comm = s.comm.sort_values("size_bytes")
    assert sorted(set(comm["size_bytes"])) == [23068680, 24117256, 25165832]  # the rows' first column
    third = comm[comm["source"] == "bench.log:3"].set_index("placement")
    # row 3: out-of-place 557.4 us, busbw 86.53 GB/s; in-place 553.2 us, 87.20 GB/s
    assert third.loc["out-of-place", "duration_ms"] == pytest.approx(0.5574)
    assert third.loc["out-of-place", "busbw_mb_s"] == pytest.approx(86530)
    assert third.loc["in-place", "busbw_mb_s"] == pytest.approx(87200)
    # the one note is that the rows came without their header (as in the excerpt); no line went unread
    assert [r.startswith("nccl-tests rows without their header") for r in s.diagnostics["reason"]] == [True]


def test_a_tag_inside_a_line_after_a_space_is_text_not_a_tag():
    # only a tag glued to what comes before it is the writer's: "[0]" after a space stays (NCCL's "[0]" device)
    from logkit.ingest.readers.normalise import _strip
    pattern = re.compile(r"\[\d+\][ \t]+")
    assert _strip(pattern, "[0] host:1:1 [0] NCCL INFO x")[0] == "host:1:1 [0] NCCL INFO x"
    assert _strip(pattern, "[0] 1024 256 float sum -1[0] 5.0")[0] == "1024 256 float sum -1  5.0"
