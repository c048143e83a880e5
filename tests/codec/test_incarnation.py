"""Incarnations (docs/protocol.md §2.5): fresh per creation, derived for old headers, and SSE ids that name them."""

from __future__ import annotations

import re

import msgspec
from hypothesis import given, strategies as st

from codec import (
    INCARNATION_PATTERN,
    SessionHeader,
    derived_incarnation,
    event_id,
    incarnation_of,
    new_incarnation,
    parse_event_id,
    written,
)

incarnations = st.from_regex(r"\A[0-9a-z]{1,32}\Z")
seqs = st.integers(min_value=-1, max_value=10**15 - 1)


def test_a_new_incarnation_is_twelve_hex_digits_and_new_each_time() -> None:
    made = {new_incarnation() for _ in range(1000)}
    assert len(made) == 1000 and all(re.fullmatch(r"[0-9a-f]{12}", one) for one in made)
    assert all(re.match(INCARNATION_PATTERN, one) for one in made)


def test_a_header_without_one_has_a_derived_incarnation_that_only_its_id_and_time_decide() -> None:
    header = SessionHeader(id="s1", createdAt=1_700_000_000_000, cwd="/w")
    derived = incarnation_of(header)
    assert derived == derived_incarnation("s1", 1_700_000_000_000) and re.fullmatch(r"[0-9a-f]{12}", derived)
    assert incarnation_of(msgspec.structs.replace(header, cwd="/other", closedAt=5)) == derived
    assert incarnation_of(msgspec.structs.replace(header, createdAt=1)) != derived
    assert incarnation_of(msgspec.structs.replace(header, id="s2")) != derived
    assert incarnation_of(msgspec.structs.replace(header, incarnation="abc")) == "abc"


def test_a_log_is_written_without_a_derived_incarnation_and_with_a_real_one() -> None:
    header = SessionHeader(id="s1", createdAt=3)
    assert written(msgspec.structs.replace(header, incarnation=incarnation_of(header))) == header
    kept = msgspec.structs.replace(header, incarnation="0123456789ab")
    assert written(kept) == kept and written(header) == header


@given(incarnations, seqs)
def test_an_event_id_parses_back_to_its_incarnation_and_seq(incarnation: str, seq: int) -> None:
    assert parse_event_id(event_id(incarnation, seq).decode()) == (incarnation, seq)


@given(seqs)
def test_a_bare_seq_names_no_incarnation(seq: int) -> None:
    assert parse_event_id(str(seq)) == (None, seq)


def test_anything_else_is_not_an_event_id() -> None:
    for text in ["", ":", "a:", ":1", "A:1", "a-b:1", "a:1\n", "a:1.5", "a:b", "x" * 33 + ":1", "a:+1", "1 "]:
        assert parse_event_id(text) is None, text
