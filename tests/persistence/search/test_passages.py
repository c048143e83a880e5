"""Passages (docs/protocol.md §14.2): what each event gives, blocks joined across appends, bounded passages."""

from __future__ import annotations

from hypothesis import given, settings, strategies as st

from codec import Event
from persistence.search.passages import MAX_EVENT_TEXT, MAX_PASSAGE, Passage, joined, of_batch, of_events
from testing.events import plain, reasoning, text, tool

T0 = 1_700_000_000_000


def kinds(passages: list[Passage]) -> list[tuple[int, str, str]]:
    return [(p.seq, p.kind, p.text) for p in passages]


def test_each_kind_of_event_gives_its_passage_and_others_none() -> None:
    events = [
        plain(0, "session/title", {"title": "Fix it"}),
        plain(1, "user/message", {"content": [{"type": "text", "text": "hello"}, {"type": "image", "url": "x"}]}),
        plain(2, "step/start", {"step": 1}),
        reasoning(3, T0, "think"),
        text(4, T0, "answer"),
        tool(5, T0, '{"a": 1}', name="grep"),
        plain(6, "tool/call", {"callId": "c2", "name": "ls", "arguments": {"dir": "/tmp"}}),
        plain(7, "tool/result", {"message": {"content": [{"type": "text", "text": "ok"}]}}),
        plain(8, "tool/result", {"error": "permission denied", "content": []}),
        plain(9, "tool/result", {"content": {"rows": 2}}),
        plain(10, "assistant/message", {"content": "built from deltas"}, sourceEventSeqs=(4,)),
        plain(11, "assistant/message", {"message": {"content": [{"type": "text", "text": "whole"}]}}),
        plain(12, "approval/asked", {"tool": "rm"}),
    ]
    assert kinds(of_batch(events)) == [
        (0, "title", "Fix it"),
        (1, "user", "hello\n" + '{"type":"image","url":"x"}'),
        (3, "reasoning", "think"),
        (4, "assistant", "answer"),
        (5, "tool_call", 'grep {"a": 1}'),
        (6, "tool_call", 'ls {"dir":"/tmp"}'),
        (7, "tool_result", "ok"),
        (8, "tool_result", "permission denied"),
        (9, "tool_result", '{"rows":2}'),
        (11, "assistant", "whole"),
    ]


def test_a_whole_message_gives_a_passage_of_each_kind_it_holds() -> None:
    content = [
        {"type": "reasoning", "text": "plan"},
        {"type": "text", "text": "done"},
        {"type": "tool-call", "id": "c", "name": "edit", "arguments": '{"f": "a.py"}'},
    ]
    found = of_batch([plain(0, "assistant/message", {"content": content})])
    assert kinds(found) == [(0, "assistant", "done"), (0, "reasoning", "plan"), (0, "tool_call", 'edit {"f": "a.py"}')]


def test_a_blocks_deltas_join_until_another_block_or_event_comes_between() -> None:
    events = [text(0, T0, "he"), text(1, T0 + 1, "llo"), reasoning(2, T0, "hm"), text(3, T0, "again")]
    assert kinds(of_batch(events)) == [(0, "assistant", "hello"), (2, "reasoning", "hm"), (3, "assistant", "again")]
    assert [(p.seq, p.last_seq, p.time) for p in of_batch(events)][0] == (0, 1, T0)


def test_the_next_appends_first_delta_continues_the_sessions_last_passage() -> None:
    last = of_batch([text(0, T0, "ret")])[0]
    rewritten, new = joined(last, of_batch([text(1, T0, "ry.py"), plain(2, "turn/end", {})]))
    assert rewritten == Passage(0, 1, T0, "assistant", "retry.py", last.run) and new == []
    # Not right after it (an event came between), or another block: a passage of its own.
    assert joined(last, of_batch([text(2, T0, "x")])) == (None, of_batch([text(2, T0, "x")]))
    assert joined(last, of_batch([text(1, T0, "x", index=9)]))[0] is None


def test_an_empty_delta_extends_its_run_and_an_empty_message_gives_nothing() -> None:
    events = [text(0, T0, "rate li"), text(1, T0, ""), text(2, T0, "mit"), plain(3, "user/message", {"text": ""})]
    assert kinds(of_events([events[:1], events[1:2], events[2:]])) == [(0, "assistant", "rate limit")]


def test_an_events_text_is_indexed_up_to_its_bound_and_a_nul_reads_as_a_replacement() -> None:
    found = of_batch([plain(0, "tool/result", {"content": "a\x00b" + "x" * 100_000})])
    assert len(found) == 1 and found[0].text.startswith("a\ufffdb") and len(found[0].text) == MAX_EVENT_TEXT


def test_a_long_block_is_cut_into_bounded_passages_at_token_starts() -> None:
    words = [f"word{n} " for n in range(1000)]
    found = of_events([[text(seq, T0, piece) for seq, piece in enumerate(words)]])
    assert len(found) > 1 and all(len(p.text) <= MAX_PASSAGE for p in found)
    assert "".join(p.text for p in found) == "".join(words)
    assert all(p.text[0].isalnum() or p.text[0] == " " for p in found)
    assert all(not (a.text[-1].isalnum() and b.text[0].isalnum()) for a, b in zip(found, found[1:], strict=False))
    assert {p.seq for p in found} == {0} and found[-1].last_seq == 999


# Events of a session: deltas of a few blocks, in runs, with other events between.
_PIECES = st.text(st.sampled_from("ab 北京.x"), max_size=600)
_EVENT = st.one_of(
    st.tuples(st.just("text"), st.integers(0, 1), _PIECES),
    st.tuples(st.just("reasoning"), st.just(0), _PIECES),
    st.tuples(st.just("user"), st.just(0), _PIECES),
    st.tuples(st.just("tool"), st.integers(0, 1), _PIECES),
)


def _events(specs: list[tuple[str, int, str]]) -> list[Event]:
    out: list[Event] = []
    for seq, (kind, index, piece) in enumerate(specs):
        if kind == "text":
            out.append(text(seq, T0 + seq, piece, index=index))
        elif kind == "reasoning":
            out.append(reasoning(seq, T0 + seq, piece))
        elif kind == "tool":
            out.append(tool(seq, T0 + seq, piece, call_id=f"c{index}", index=index + 5))
        else:
            out.append(plain(seq, "user/message", {"text": piece}, time=T0 + seq))
    return out


@settings(max_examples=300, deadline=None)
@given(st.lists(_EVENT, min_size=1, max_size=60), st.data())
def test_a_sessions_passages_are_the_same_however_its_events_were_batched(
    specs: list[tuple[str, int, str]], data: st.DataObject
) -> None:
    events = _events(specs)
    cuts = sorted(data.draw(st.sets(st.integers(1, len(events) - 1), max_size=len(events))) if len(events) > 1 else [])
    batches = [events[a:b] for a, b in zip([0, *cuts], [*cuts, len(events)], strict=True)]
    whole = of_events([events])
    assert of_events(batches) == whole
    assert all(len(p.text) <= MAX_PASSAGE for p in whole)
