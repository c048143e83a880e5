"""The joined-text view: exact text, and the token and visible boundaries with their seq and time."""

from __future__ import annotations

from typing import Any

import pytest

from codec import ReasoningChunks, TextChunks, TextRowData, ToolCallChunks, ToolCallRowData
from history_client import joined_text


def text_row(
    texts: list[str], *, seq0: int = 100, time0: int = 5000, dt: list[int] | None = None, kind: Any = TextChunks
) -> Any:
    dt = [10] * (len(texts) - 1) if dt is None else dt
    return kind(seq0, time0, TextRowData(1, 1, 0, dt, texts))


def test_joined_text_concatenates_members_exactly():
    view = joined_text(text_row(["Hel", "lo", " wörld", "\n"]))
    assert view.text == "Hello wörld\n"
    assert (view.token_start, view.visible_start) == (0, 0)
    assert (view.token_seq, view.token_time) == (100, 5000)


def test_leading_empty_and_blank_members_move_the_boundaries():
    view = joined_text(text_row(["", "", " ", "\n\t", "x", "y"], dt=[1, 2, 3, 4, -5]))
    assert (view.token_start, view.token_seq, view.token_time) == (2, 102, 5003)
    assert (view.visible_start, view.visible_seq, view.visible_time) == (4, 104, 5010)


def test_a_row_that_never_becomes_visible_has_no_visible_start():
    view = joined_text(text_row([" ", "\u3000", "\ufeff"], kind=ReasoningChunks))
    assert view.visible_start is None and view.visible_seq is None and view.visible_time is None
    assert view.token_start == 0


def test_an_all_empty_row_anchors_its_token_at_member_zero():
    assert joined_text(text_row(["", "", ""])).token_start == 0


@pytest.mark.parametrize(("blank", "visible"), [("\u00a0", False), ("\u2028", False), ("\x1c", True), ("\u200b", True)])
def test_blank_follows_ecmascript_trim_not_str_isspace(blank, visible):
    view = joined_text(text_row(["", blank, blank]))
    assert (view.visible_start == 1) is visible


def test_forty_thousand_spaces_then_x():
    members = 40_000
    view = joined_text(text_row([" "] * (members - 1) + ["x"], dt=[0] * (members - 1)))
    assert view.visible_start == members - 1 and view.token_start == 0
    assert view.text == " " * (members - 1) + "x"


def test_tool_call_rows_anchor_at_the_name_or_the_first_fragment():
    named = ToolCallChunks(
        7, 0, ToolCallRowData(turn=1, step=1, index=0, dt=[1, 1], id="c", name="run", args=["", "{", "}"])
    )
    nameless = ToolCallChunks(7, 0, ToolCallRowData(turn=1, step=1, index=0, dt=[1, 1], id="c", args=["", "{", "}"]))
    assert (joined_text(named).text, joined_text(named).token_start, joined_text(named).visible_start) == ("{}", 0, 0)
    assert (joined_text(nameless).token_start, joined_text(nameless).token_time) == (1, 1)


def test_has_visible_uses_the_same_blank_set():
    from history_client import has_visible

    assert not has_visible(" \u3000\ufeff\n") and has_visible("\x1c") and has_visible(" x")
