"""The message-boundary index and message-aligned cut selection (docs/protocol.md §4).

Appends alone determine the index, so it can always be rebuilt from a log:

* a *counted message* is a ``user/message`` or ``assistant/message`` that carries a
  ``conversationOp`` (its group starts at its own seq) or is append-origin (its group
  starts at ``min(seq, *sourceEventSeqs)``, so a page never cuts a message from the
  chunks it was built from);
* every ``conversationOp`` hides seqs ``start..end`` inclusive; ranges that touch or
  overlap merge.

A page ending before ``to_seq`` only considers events before ``to_seq``, so a page with an
explicit ``through`` never changes.
"""

from __future__ import annotations

import bisect
from array import array
from collections.abc import Iterable, Iterator, Sequence
from typing import Final, NamedTuple

from msgspec import UNSET

from codec import Event

__all__ = ["HiddenRange", "MessageEntry", "MessageIndex", "index_entries", "merge_ranges", "select_cuts"]

_MESSAGE_TYPES: Final = frozenset({"user/message", "assistant/message"})


class MessageEntry(NamedTuple):
    """A counted message: its seq and the first seq of its group."""

    seq: int
    group_start: int


class HiddenRange(NamedTuple):
    """A ``conversationOp`` range, with the seq of the event that carries it."""

    at: int
    start: int
    end: int


def index_entries(events: Iterable[Event]) -> tuple[list[MessageEntry], list[HiddenRange]]:
    """The index entries an append batch contributes, in seq order."""
    messages: list[MessageEntry] = []
    hidden: list[HiddenRange] = []
    for event in events:
        op = event.conversationOp
        if op is not UNSET:
            hidden.append(HiddenRange(event.seq, op.start, op.end))
        if event.type not in _MESSAGE_TYPES:
            continue
        if op is not UNSET:
            messages.append(MessageEntry(event.seq, event.seq))
        elif event.surfaceOp == "append":
            group = event.seq
            sources = event.sourceEventSeqs
            if sources is not UNSET:
                # A loop, not min(*sources): a message may cite any number of chunks.
                for source in sources:
                    if source < group:
                        group = source
            messages.append(MessageEntry(event.seq, group))
    return messages, hidden


def merge_ranges(hidden: Iterable[HiddenRange], *, before: int) -> list[tuple[int, int]]:
    """Merge the ranges carried by events before ``before`` into sorted, disjoint ``(start, end)`` pairs."""
    spans = sorted((r.start, r.end) for r in hidden if r.at < before)
    merged: list[tuple[int, int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1] + 1:
            if end > merged[-1][1]:
                merged[-1] = (merged[-1][0], end)
        else:
            merged.append((start, end))
    return merged


def _is_hidden(seq: int, merged: Sequence[tuple[int, int]], starts: Sequence[int]) -> bool:
    i = bisect.bisect_right(starts, seq) - 1
    return i >= 0 and seq <= merged[i][1]


def select_cuts(
    messages_desc: Iterable[MessageEntry], hidden: Iterable[HiddenRange], *, to_seq: int, max_messages: int
) -> list[int]:
    """Candidate ``fromSeq`` values for a page ending at ``to_seq``, newest first.

    ``messages_desc`` yields counted messages with ``seq < to_seq`` in descending seq order.
    Candidate *k* is the running minimum of the group starts of the *k* newest visible
    messages. The list ends with the ``max_messages`` cut or, when fewer messages are
    visible, with 0. It is never empty: with no message it is ``[0]``.
    """
    merged = merge_ranges(hidden, before=to_seq)
    starts = [start for start, _ in merged]
    cuts: list[int] = []
    running = to_seq
    count = 0
    for entry in messages_desc:
        if entry.seq >= to_seq or (merged and _is_hidden(entry.seq, merged, starts)):
            continue
        count += 1
        if entry.group_start < running:
            running = entry.group_start
        if not cuts or cuts[-1] != running:
            cuts.append(running)
        if count >= max_messages:
            return cuts
    if not cuts or cuts[-1] != 0:
        cuts.append(0)
    return cuts


class MessageIndex:
    """A session's counted messages (as two int64 arrays) and hidden ranges, in seq order."""

    def __init__(self) -> None:
        self.seqs = array("q")
        self.groups = array("q")
        self.hidden: list[HiddenRange] = []

    def add(self, messages: Iterable[MessageEntry], hidden: Iterable[HiddenRange]) -> None:
        for entry in messages:
            self.seqs.append(entry.seq)
            self.groups.append(entry.group_start)
        self.hidden.extend(hidden)

    def messages_desc(self, to_seq: int) -> Iterator[MessageEntry]:
        seqs, groups = self.seqs, self.groups
        for i in range(bisect.bisect_left(seqs, to_seq) - 1, -1, -1):
            yield MessageEntry(seqs[i], groups[i])

    def cuts(self, to_seq: int, max_messages: int) -> list[int]:
        return select_cuts(self.messages_desc(to_seq), self.hidden, to_seq=to_seq, max_messages=max_messages)
