"""The append body ``{"events": [...]}`` (docs/protocol.md §6.2), split into its items and measured first.

An append names its records (events and packed rows) as the items of one array. Decoding
that array builds an object per item, and expanding a row builds an event per member, so
both counts are taken from the bytes (`codec.limits`) before either happens.
"""

from __future__ import annotations

from typing import Final

import msgspec

from codec._paths import DECODE_FAILURES, reason
from codec.errors import BatchTooLargeError, InvalidJsonError, RecordFormatError
from codec.limits import array_within, record_events

__all__ = ["split_batch"]


class _Shell(msgspec.Struct, forbid_unknown_fields=True):
    events: msgspec.Raw


_SHELL: Final = msgspec.json.Decoder(_Shell)
_ITEMS: Final = msgspec.json.Decoder(list[msgspec.Raw])


def split_batch(body: bytes | bytearray, *, max_events: int) -> list[bytes]:
    """The storage lines of an append body, one per item, each still undecoded.

    Raises `InvalidJsonError` for text that is not JSON, `RecordFormatError` for a body that
    is not ``{"events": [...]}`` with at least one item, and `BatchTooLargeError` when the
    items stand for more than ``max_events`` logical events (a row counting its members),
    found before any item is decoded. Bound the body's values with
    `codec.limits.values_within` first: these scans are linear in what it counts.
    """
    too_many = BatchTooLargeError(f"a batch holds at most {max_events} logical events")
    try:
        span = _SHELL.decode(body).events
        if not array_within(bytes(span), max_events):
            raise too_many
        items = _ITEMS.decode(span)
    except msgspec.ValidationError as exc:
        raise RecordFormatError(f'expected {{"events": [...]}}: {exc}') from exc
    except DECODE_FAILURES as exc:
        raise InvalidJsonError(f"invalid JSON: {reason(exc)}") from exc
    if not items:
        raise RecordFormatError("events must not be empty")
    lines = [bytes(item) for item in items]
    if sum(map(record_events, lines)) > max_events:
        raise too_many
    return lines
