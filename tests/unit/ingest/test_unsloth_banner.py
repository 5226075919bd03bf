"""unsloth's newer training banner (``Data Parallel GPUs``, ``Total batch size (a x b x c) = N``) and a banner
printed again after a retry. A real banner (``tests/data/frameworks/``, cited in its README) and variations
said to be made here; expected values read off the lines by eye."""

from __future__ import annotations

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
