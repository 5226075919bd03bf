"""The script a ChildFailedError block names as FAILED says which framework ran the workers (LLaMA-Factory's
``llamafactory/launcher.py``, ``accelerate test``'s script). A real block (``tests/data/frameworks/``, cited
in its README) and variations said to be made here; expected values read off the lines by eye."""

from __future__ import annotations

import pytest

from tests.support.excerpts import load, reader

text = reader("frameworks")


def test_llamafactory_launcher_failed_names_the_framework(tmp_path):
    # llamafactory#5447 line 4: "/home/sunhao/LLaMA-Factory/src/llamafactory/launcher.py FAILED"
    s = load(tmp_path, text("llamafactory_5447_launcher_failed_block.log"))
    assert s.meta["framework"] == "llamafactory"
    assert s.meta["facts_source"]["framework"].endswith(":4")


@pytest.mark.parametrize("script, framework", [
    ("/usr/lib/python3.10/site-packages/llamafactory/launcher.py", "llamafactory"),  # installed (variation)
    ("/opt/conda/lib/python3.10/site-packages/accelerate/test_utils/scripts/test_script.py", "accelerate"),
    ("train.py", None),  # a user's own script says nothing of a framework
])
def test_the_failed_script_owner(tmp_path, script, framework):
    body = text("llamafactory_5447_launcher_failed_block.log").replace(
        "/home/sunhao/LLaMA-Factory/src/llamafactory/launcher.py", script)
    s = load(tmp_path, body)
    assert s.meta.get("framework") in ({framework} if framework else {None, "torchrun"})


# --- an entry point run as a module (``-m``): torchrun's block names it dotted ---------------------------------
def test_a_dotted_module_failed_names_its_framework(tmp_path):
    # axolotl#2791 line 11: "axolotl.cli.train FAILED" (accelerate launch -m axolotl.cli.train); the frames above
    # it are torchrun's own (torch/distributed/run.py), which say less than the entry point
    s = load(tmp_path, text("axolotl_2791_module_entry_point_failed_block.log"))
    assert s.meta["framework"] == "axolotl"
    assert s.meta["facts_source"]["framework"].endswith(":11")


@pytest.mark.parametrize("module, framework", [
    ("swift.cli.sft", "ms-swift"),  # variation: ms-swift's entry point run as a module
    ("llamafactory.launcher", "llamafactory"),  # variation
    ("my_project.train", None),  # a user's own package names no framework
    ("finetune.py", None),  # a script's file name is no module
])
def test_dotted_entry_points(tmp_path, module, framework):
    body = text("axolotl_2791_module_entry_point_failed_block.log").replace("axolotl.cli.train FAILED",
                                                                            f"{module} FAILED")
    s = load(tmp_path, body)
    assert s.meta.get("framework") == (framework or "torchrun")
