"""One definition of a control character, read by principals, stream names and log lines alike."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from history_service.control import CONTROL, has_control
from history_service.durable.streams import plain

CONTROLS = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0))]


@pytest.mark.parametrize("char", CONTROLS, ids=lambda c: f"U+{ord(c):04X}")
def test_every_c0_del_and_c1_character_is_a_control_character(char):
    assert has_control(f"a{char}b")
    assert not plain(f"stream{char}name")


@given(st.text(st.characters(blacklist_categories=["Cc"])))
def test_text_of_no_cc_character_holds_none(text):
    assert not has_control(text)
    assert CONTROL.search(text) is None


@given(st.characters(whitelist_categories=["Cc"]))
def test_the_definition_is_unicodes_category_cc(char):
    assert has_control(char)
