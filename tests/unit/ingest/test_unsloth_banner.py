"""unsloth's newer training banner (``Data Parallel GPUs``, ``Total batch size (a x b x c) = N``) and a banner
printed again after a retry. A real banner (``tests/data/frameworks/``, cited in its README) and variations
said to be made here; expected values read off the lines by eye."""

from __future__ import annotations

from logkit.ingest.readers import unsloth_lines
from logkit.ingest.readers.stated_facts import Facts
from tests.support.excerpts import load, reader

text = reader("frameworks")


def test_the_data_parallel_banner(tmp_path):
    s = load(tmp_path, text("unsloth_2425_data_parallel_banner.log"))
    assert s.meta["framework"] == "unsloth"
    assert s.meta["data_parallel_size"] == 1  # line 4: Data Parallel GPUs = 1
    assert s.meta["total_batch_size"] == 64  # line 4: Total batch size (16 x 4 x 1) = 64
    assert s.meta["max_steps"] == 1377  # line 2: Total steps = 1,377
    assert s.meta["facts_source"]["total_batch_size"].endswith(":4")


def test_a_banner_printed_again_says_what_the_run_went_on_with(tmp_path):
    # variation: unsloth retrying with a smaller batch prints its banner again (8 per device, 2754 steps)
    first = text("unsloth_2425_data_parallel_banner.log")
    again = (first.replace("Batch size per device = 16", "Batch size per device = 8")
             .replace("(16 x 4 x 1) = 64", "(8 x 4 x 1) = 32").replace("Total steps = 1,377", "Total steps = 2,754"))
    s = load(tmp_path, first + "  0%|          | 0/1377 [00:00<?, ?it/s]\n" + again)
    assert s.meta["total_batch_size"] == 32 and s.meta["max_steps"] == 2754
    assert s.meta["facts_source"]["total_batch_size"].endswith(":10")  # the second banner's fourth line


def _collapsed(banner: str, spaces: str = " ") -> str:
    """The banner's art as a page or a chat renders it: every run of spaces made ``spaces`` (the rendered
    notebook of https://runalph.ai/notebooks/unsloth/ernie-4-5-21b-a3b-pt-conversational shows unsloth's
    loading banner so: ``\\\\ /| NVIDIA L4.``, ``O^O/ \\_/ \\ Torch``, ``\\ / Bfloat16``)."""
    return "\n".join(spaces.join(line.split()) for line in banner.splitlines()) + "\n"


def test_a_banner_whose_art_lost_its_spaces_is_read_all_the_same():
    """Variations of the real banner of unsloth issue 3066: the art's spaces collapsed to one, and (as a
    chat paste leaves it) the last drawn line run into its text (``\\/Data Parallel GPUs``)."""
    banner = "".join(text("unsloth_3066_banner.log").splitlines(keepends=True)[:5])
    one = _collapsed(banner)
    assert one.splitlines()[3].startswith("\\ / Data Parallel GPUs")
    run_in = one.replace("\\ / Data", "\\/Data")
    for body in (one, run_in):
        facts = Facts("banner.log")
        assert all(unsloth_lines.line(facts, n, line) for n, line in enumerate(body.splitlines(), 1))
        assert facts.value("total_batch_size") == 32  # line 4: Total batch size (16 x 2 x 1) = 32
        assert facts.value("data_parallel_size") == 1  # line 4: Data Parallel GPUs = 1
        assert facts.value("gpus_per_process") == 1  # line 1: Num GPUs used = 1
        assert facts.value("max_steps") == 196  # line 2: Total steps = 196
        facts.derive_all()
        assert facts.value("gpu_count") == 1  # world size 1 (line 4) x 1 GPU per process (line 1)


def test_a_line_that_only_begins_like_the_art_is_not_unsloths():
    facts = Facts("x.log")
    assert not unsloth_lines.line(facts, 1, "\\/usr/lib is not a path")
    assert not unsloth_lines.line(facts, 2, "\\ / 3 = 1")
    assert facts.framework is None
