"""The store's rules, each against a model of what it means, written another way."""

from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from persistence import SeqConflictError, SessionClosedError
from persistence.rules import BatchPlan, PageSpan, confirm_resend, dense_gap, expiry, page_span, plan_batch
from testing.events import plain, text

heads = st.integers(min_value=-1, max_value=40)
# Seqs are at least 0: the codec refuses any other before a store sees it.
seq_lists = st.one_of(
    st.lists(st.integers(min_value=0, max_value=45), max_size=8),
    st.builds(lambda first, count: list(range(first, first + count)), st.integers(0, 45), st.integers(0, 8)),
)


@given(seq_lists, heads)
def test_plan_batch_appends_after_the_head_and_flags_only_stored_seqs_as_a_resend(seqs: list[int], head: int) -> None:
    stored = set(range(head + 1))
    dense = all(b == a + 1 for a, b in zip(seqs, seqs[1:], strict=False))
    if not seqs:
        assert plan_batch("s", seqs, head) == BatchPlan(head + 1, head, 0, writes=False, resend=False)
    elif dense and seqs[0] == head + 1:
        plan = plan_batch("s", seqs, head)
        assert plan == BatchPlan(seqs[0], seqs[-1], len(seqs), writes=True, resend=False)
        assert not stored & set(seqs)
    elif dense and set(seqs) <= stored:
        plan = plan_batch("s", seqs, head)
        assert plan == BatchPlan(seqs[0], head, len(seqs), writes=False, resend=True)
        assert (plan.first_seq, plan.to_seq) == (seqs[0], seqs[-1] + 1)
    else:
        with pytest.raises(SeqConflictError) as refused:
            plan_batch("s", seqs, head)
        assert (refused.value.session_id, refused.value.head_seq) == ("s", head)


@given(seq_lists)
def test_dense_gap_finds_the_first_seq_out_of_step(seqs: list[int]) -> None:
    gap = dense_gap(seqs)
    if gap is None:
        assert seqs == list(range(seqs[0], seqs[0] + len(seqs))) if seqs else True
    else:
        assert seqs[:gap] == list(range(seqs[0], seqs[0] + gap)) and seqs[gap] != seqs[0] + gap


def test_a_gap_is_named_in_the_refusal() -> None:
    with pytest.raises(SeqConflictError, match=r"events\[2\]\.seq is 5, expected 4"):
        plan_batch("s", [2, 3, 5], 1)
    with pytest.raises(SeqConflictError, match="batch starts at seq 4 but the session head is 1; expected 2"):
        plan_batch("s", [4, 5], 1)


@given(st.lists(st.sampled_from(["a", "b"]), min_size=1, max_size=5), st.integers(0, 4), st.booleans())
def test_confirm_resend_accepts_exactly_the_stored_events(values: list[str], flip: int, shorter: bool) -> None:
    stored = [text(i, 100 + i, value) for i, value in enumerate(values)]
    confirm_resend("s", [text(i, 100 + i, value) for i, value in enumerate(values)], stored, len(stored) - 1)
    changed = list(stored)
    if shorter:
        changed = changed[:-1] or [plain(0)]
    else:
        at = flip % len(changed)
        changed[at] = text(at, 100 + at, values[at] + "!")
    with pytest.raises(SeqConflictError, match="differs from the stored events"):
        confirm_resend("s", changed, stored, len(stored) - 1)


optional_seqs = st.one_of(st.none(), st.integers(min_value=-3, max_value=50))


@given(heads, optional_seqs, optional_seqs)
def test_page_span_ends_after_through_or_the_head_and_before_before(
    head: int, through: int | None, before: int | None
) -> None:
    span = page_span(head, through, before)
    ends = [head + 1 if through is None else through + 1]
    if before is not None:
        ends.append(before)
    assert span == PageSpan(min(ends), beyond_head=through is not None and through > head)
    # Seqs the page may hold: at most the head, below ``before``, at most ``through``.
    held = [seq for seq in range(head + 1) if (before is None or seq < before) and (through is None or seq <= through)]
    if span.reads:
        assert held == list(range(span.to_seq))
    else:
        assert span.beyond_head or held == []


@given(seq_lists, heads)
def test_a_closed_session_plans_nothing_but_a_resend(seqs: list[int], head: int) -> None:
    try:
        open_plan: BatchPlan | None = plan_batch("s", seqs, head)
    except SeqConflictError:
        open_plan = None
    if open_plan is not None and open_plan.resend:
        assert plan_batch("s", seqs, head, closed=True) == open_plan
    else:
        with pytest.raises(SessionClosedError) as refused:
            plan_batch("s", seqs, head, closed=True)
        assert refused.value.head_seq == head


def test_a_differing_resend_to_a_closed_session_is_refused_as_closed() -> None:
    stored, sent = [plain(3)], [plain(3, "other")]
    confirm_resend("s", stored, stored, 5, closed=True)
    with pytest.raises(SessionClosedError):
        confirm_resend("s", sent, stored, 5, closed=True)
    with pytest.raises(SeqConflictError):
        confirm_resend("s", sent, stored, 5)


times = st.integers(min_value=0, max_value=2**52)


@given(st.none() | times, times, st.none() | st.integers(min_value=1, max_value=2**50))
def test_a_session_expires_at_the_sooner_of_its_own_time_and_the_retention(
    expires_at: int | None, touched_at: int, retention_ms: int | None
) -> None:
    at = expiry(expires_at, touched_at, retention_ms)
    candidates = [t for t in (expires_at, None if retention_ms is None else touched_at + retention_ms) if t is not None]
    assert at == (min(candidates) if candidates else None)
    if retention_ms is not None and at is not None:
        # A later write never brings the expiry sooner; a session's own time is a ceiling it never passes.
        later = expiry(expires_at, touched_at + 1, retention_ms)
        assert later is not None and later >= at
        assert expires_at is None or later <= expires_at
