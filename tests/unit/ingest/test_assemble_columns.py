"""Columns assembled from several files' pieces (``assemble._chunked``): a column whose pieces hold text in
one file, numbers in another and nothing in a third (a traceback's source location, as read from
sample_logs/real_world/tracebacks: ``../torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:47`` beside a
number and files without the field) becomes one text column, the missing values missing."""

from __future__ import annotations

import pyarrow as pa

from logkit.ingest.assemble import _chunked


def test_text_numbers_and_empty_pieces_make_one_text_column():
    pieces = [pa.array([None, "ProcessGroupNCCL.cpp:47"]), pa.nulls(2), pa.array([1.5, None]), pa.nulls(1)]
    column = _chunked(pieces)
    assert column.type == pa.string()
    assert column.to_pylist() == [None, "ProcessGroupNCCL.cpp:47", None, None, "1.5", None, None]


def test_pieces_of_one_kind_keep_it():
    column = _chunked([pa.array([1, 2]), pa.nulls(1), pa.array([3.5])])
    assert column.type == pa.float64() and column.to_pylist() == [1.0, 2.0, None, 3.5]
