"""A folder where no session is found: the message says which formats were looked for and, for each file
looked at, why it was not read."""

from __future__ import annotations

from logkit.ingest.discover import MAX_LISTED, nothing_found


def test_each_file_looked_at_says_why_it_was_not_read(tmp_path):
    (tmp_path / "notes.md").write_text("# my run\n")
    (tmp_path / "out.txt").write_text("epoch 1 done\n")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "blob.log").write_bytes(b"\x00\x01\x02binary")
    (tmp_path / "s_errors.log").write_text("2026-11-22T01:55:42Z | ERROR | disk full\n")
    lines = nothing_found(tmp_path).splitlines()
    assert lines[0] == f"no logkit sessions found under {tmp_path}"
    assert lines[1].startswith("  formats looked for: ") and all(
        f in lines[1] for f in ("console", "nccl_tests", "nvidia_smi_csv", "gpustat", "trainer_state"))
    why = dict(ln.strip().split(": not read: ") for ln in lines[2:])
    # a .md file may be the Trainer's model card: looked at by its first bytes, as a .txt is
    assert why[str(tmp_path / "notes.md")] == "its first bytes ('# my run') are none of the formats looked for"
    assert why[str(tmp_path / "out.txt")] == "its first bytes ('epoch 1 done') are none of the formats looked for"
    assert why[str(tmp_path / "sub" / "blob.log")].startswith("its first bytes (b'\\x00\\x01\\x02binary')")
    assert "errors log" in why[str(tmp_path / "s_errors.log")]


def test_an_empty_folder_and_a_long_one(tmp_path):
    assert nothing_found(tmp_path).splitlines()[2] == "  no files in it"
    for i in range(MAX_LISTED + 5):
        (tmp_path / f"f{i:02d}.txt").write_text("x\n")
    lines = nothing_found(tmp_path).splitlines()
    assert len(lines) == 2 + MAX_LISTED + 1 and lines[-1] == "  ... and 5 more files, none of a format looked for"
