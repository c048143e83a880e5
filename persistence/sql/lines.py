"""Stored lines: a record's line compressed when that pays (`COMPRESS_AT`), and unpacked when read.

The zstd contexts are not thread-safe, and the store's work runs in several threads
(`persistence._zstd.ZstdContexts` keeps one per thread).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Final

import zstandard

from codec import StoredRecord
from persistence._zstd import ZstdContexts
from persistence.errors import CorruptLogError
from persistence.sql.schema import COMPRESS_AT

__all__ = ["Lines"]

_MAX_LINE: Final = 256 * 1024 * 1024


class Lines:
    """A record as its row, and rows back as records."""

    def __init__(self) -> None:
        self._zstd = ZstdContexts(level=3)

    def row(self, session_id: str, record: StoredRecord) -> dict[str, Any]:
        """``record``'s row of ``history_records``, its line compressed when that makes it smaller."""
        compressed, data = False, record.line
        if len(data) >= COMPRESS_AT:
            packed = self._zstd.compress(data)
            if len(packed) < len(data):
                compressed, data = True, packed
        return {
            "session_id": session_id,
            "seq": record.seq,
            "members": record.members,
            "compressed": compressed,
            "data": data,
            "kind": record.kind,
            "key": record.key,
            "time0": record.time0,
            "time1": record.time1,
        }

    def unpack(self, seq: int, compressed: bool, data: bytes) -> bytes:
        """A stored line as it was written; `CorruptLogError` if it does not decompress."""
        if not compressed:
            return bytes(data)
        try:
            return self._zstd.decompressor().decompress(data, max_output_size=_MAX_LINE)
        except zstandard.ZstdError as exc:
            raise CorruptLogError(f"stored record at seq {seq} does not decompress: {exc}") from exc

    def records(self, rows: Sequence[Any]) -> list[StoredRecord]:
        """The records of rows read by `Statements.stored`."""
        return [
            StoredRecord(seq, members, self.unpack(seq, compressed, data), kind, bytes(key), time0, time1)
            for seq, members, compressed, data, kind, key, time0, time1 in rows
        ]
