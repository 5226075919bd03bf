"""The repository explains itself: the field reference of docs/LOG_FORMATS.md is the schema's, and
the examples in the contract's docstrings run."""

from __future__ import annotations

import doctest
import importlib

import pytest

from logkit.schema import doc
from tests.support.launch import REPO

DOCTESTED = ["logkit.schema.records", "logkit.schema.lines", "logkit.schema.values", "logkit.schema.collectives",
             "logkit.schema.files", "logkit.schema.findings", "logkit.schema.vocab", "logkit.schema.meta",
             "logkit.schema.gpu", "logkit.report.format", "logkit.analysis.results.analysis",
             "logkit.analysis.results.rows", "logkit.analysis.results.frames", "logkit.analysis.results.values"]


def test_the_field_reference_is_the_schemas():
    text = (REPO / "docs" / "LOG_FORMATS.md").read_text(encoding="utf-8")
    start, end = text.index(doc.BEGIN), text.index(doc.END) + len(doc.END)
    assert text[start:end] == doc.reference(), "run: python -m logkit.schema.doc, and paste its output"


def test_the_reference_names_every_key_of_every_spec():
    from logkit.schema.records import RECORD_SPECS

    reference = doc.reference()
    for spec in RECORD_SPECS.values():
        for f in spec.fields:
            assert f"| `{'.'.join(f.raw)}` | `{f.name}` |" in reference, (spec.type, f.name)


@pytest.mark.parametrize("module", DOCTESTED)
def test_docstring_examples_run(module):
    result = doctest.testmod(importlib.import_module(module), optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0 and result.failed == 0
