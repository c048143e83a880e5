"""Stored lines (persistence/sql/lines.py): compressed only when that makes them smaller, and read back as written."""

from __future__ import annotations

import os

import pytest

from codec import StoredRecord
from persistence.errors import CorruptLogError
from persistence.sql.lines import Lines
from persistence.sql.schema import COMPRESS_AT


def test_a_line_is_compressed_when_that_pays_and_read_back_whole() -> None:
    lines = Lines()
    for line in (b"a" * COMPRESS_AT, b"a" * (COMPRESS_AT - 1), os.urandom(COMPRESS_AT * 2)):
        row = lines.row("s", StoredRecord(3, 1, line, 0, b"k", 5, 6))
        assert row["compressed"] is (line == b"a" * COMPRESS_AT)
        assert lines.unpack(3, row["compressed"], row["data"]) == line
        columns = ("seq", "members", "compressed", "data", "kind", "key", "time0", "time1")
        assert lines.records([tuple(row[name] for name in columns)]) == [StoredRecord(3, 1, line, 0, b"k", 5, 6)]


def test_a_line_that_does_not_decompress_is_corrupt() -> None:
    with pytest.raises(CorruptLogError, match="seq 7"):
        Lines().unpack(7, True, b"not zstd")
