"""A record padded with spaces to the terminal's width (tqdm clears the bar's line so, and the Trainer's log
dict printed while a bar is shown keeps the padding): the padding is no part of the record. A real excerpt
(``tests/data/frameworks/transformers_28683_bar_glued_eval_dicts.log``, cited in its README) padded here."""

from __future__ import annotations

from tests.support.excerpts import load, reader

text = reader("frameworks")


def test_log_dicts_padded_to_the_terminal_width_are_read(tmp_path):
    lines = text("transformers_28683_bar_glued_eval_dicts.log").splitlines()
    body = "\n".join(line.ljust(400) if line.startswith("{") else line for line in lines) + "\n"
    (tmp_path / "plain").mkdir()
    (tmp_path / "padded").mkdir()
    plain = load(tmp_path / "plain", text("transformers_28683_bar_glued_eval_dicts.log"))
    padded = load(tmp_path / "padded", body)
    ev = padded.evals[padded.evals["name"] == "eval_loss"]
    # line 2: {'eval_loss': 0.6605485081672668, ..., 'epoch': 50.0}
    assert 0.6605485081672668 in set(ev["value"])
    assert len(padded.evals) == len(plain.evals) and len(padded.diagnostics) == len(plain.diagnostics)
