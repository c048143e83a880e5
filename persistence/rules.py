"""The store's rules (docs/protocol.md §4.1, §6), each once, as pure functions of plain values.

* `plan_batch`: the head check of an append, which says whether to store the batch, do
  nothing, or confirm a re-send; a closed session takes nothing but a re-send (`next_plan`
  is the plan an append hopes for, checking once that its seqs are dense);
* `confirm_resend`: the resend check, which says whether a re-send is exactly the events
  stored at its seqs;
* `page_span`: a page's exclusive end, whether it is empty, and whether its ``through`` is
  past the head;
* `expiry`: when a session expires, from its own ``expiresAt`` and the store-wide retention
  (`alive`: whether that is still to come);
* `check_life`: whether a write reached the life of the id (`Life`) it was checked against.

The sealing plan is `persistence.sealing.plan_append`. Backends execute what these return,
and the service and the CLI act on it; none of them checks again.
"""

from __future__ import annotations

from collections.abc import Sequence

from msgspec import Struct

from codec import Event, SessionHeader, encode, incarnation_of
from persistence.errors import SeqConflictError, SessionClosedError, SessionNotFoundError

__all__ = [
    "BatchPlan",
    "Life",
    "PageSpan",
    "alive",
    "check_life",
    "confirm_resend",
    "dense_gap",
    "expiry",
    "next_plan",
    "page_span",
    "plan_batch",
]


class Life(Struct, frozen=True):
    """One life of a session id (docs/protocol.md §2.5): its incarnation, and the principal that owns it.

    A write given a life acts on that life alone (`check_life`): the id may have been deleted
    since it was checked, and created again, by anyone.
    """

    incarnation: str
    owner: str


def check_life(session_id: str, life: Life | None, header: SessionHeader, owner: str) -> None:
    """Raise `SessionNotFoundError` unless the session stored as ``header`` and ``owner`` is ``life`` (``None``: any).

    A store calls it where the write itself is decided: in its transaction, or under its lock.
    """
    if life is not None and (owner != life.owner or incarnation_of(header) != life.incarnation):
        raise SessionNotFoundError(session_id)


class BatchPlan(Struct, frozen=True):
    """What an append of a batch does at a head.

    ``writes``: store the batch; ``resend``: compare it with the stored events at
    ``[first_seq, to_seq)`` (`confirm_resend`) and store nothing; neither: an empty batch.
    ``head_seq`` is the head once the plan is carried out.
    """

    first_seq: int
    head_seq: int
    count: int
    writes: bool
    resend: bool

    @property
    def to_seq(self) -> int:
        return self.first_seq + self.count


class PageSpan(Struct, frozen=True):
    """Where a page ends (exclusive), and whether its ``through`` is past the head, which is refused."""

    to_seq: int
    beyond_head: bool

    @property
    def reads(self) -> bool:
        """Whether the page has records to read: it is neither empty nor refused."""
        return self.to_seq > 0 and not self.beyond_head


def dense_gap(seqs: Sequence[int]) -> int | None:
    """The index of the first seq that does not follow the one before it, or ``None`` when ``seqs`` are dense."""
    if not seqs:
        return None
    first = seqs[0]
    for i, seq in enumerate(seqs):
        if seq != first + i:
            return i
    return None


def next_plan(seqs: Sequence[int]) -> BatchPlan | None:
    """The plan of a batch written just after the head it expects (``seqs[0] - 1``); ``None`` if empty or not dense.

    What a SQL append tries first, before it reads the head: an append's one density check,
    which `plan_batch` then takes as ``dense``.
    """
    if not seqs or dense_gap(seqs) is not None:
        return None
    first, count = seqs[0], len(seqs)
    return BatchPlan(first, first + count - 1, count, writes=True, resend=False)


def plan_batch(
    session_id: str, seqs: Sequence[int], head_seq: int, *, closed: bool = False, dense: bool = False
) -> BatchPlan:
    """The head check: a batch with these seqs, at a session whose head is ``head_seq`` (-1 when empty).

    A batch must be dense and start at ``head_seq + 1``. One that lies wholly at or before
    the head may be a re-send. Anything else raises `SeqConflictError`, carrying the head.
    A ``closed`` session takes only a re-send: any other batch, an empty one or a conflicting
    one too, raises `SessionClosedError` (and so does a re-send that `confirm_resend` refuses).
    ``dense``: the seqs are known dense already (`next_plan`).
    """
    if not closed:
        return _planned(session_id, seqs, head_seq, dense)
    try:
        plan = _planned(session_id, seqs, head_seq, dense)
    except SeqConflictError:
        raise SessionClosedError(session_id, head_seq=head_seq) from None
    if not plan.resend:
        raise SessionClosedError(session_id, head_seq=head_seq)
    return plan


def _planned(session_id: str, seqs: Sequence[int], head_seq: int, dense: bool) -> BatchPlan:
    if not seqs:
        return BatchPlan(head_seq + 1, head_seq, 0, writes=False, resend=False)
    first, count = seqs[0], len(seqs)
    gap = None if dense else dense_gap(seqs)
    if gap is not None:
        raise SeqConflictError(
            f"batch seqs are not dense: events[{gap}].seq is {seqs[gap]}, expected {first + gap}",
            session_id=session_id,
            head_seq=head_seq,
        )
    if first == head_seq + 1:
        return BatchPlan(first, first + count - 1, count, writes=True, resend=False)
    if first > head_seq + 1 or first + count - 1 > head_seq:
        raise SeqConflictError(
            f"batch starts at seq {first} but the session head is {head_seq}; expected {head_seq + 1}",
            session_id=session_id,
            head_seq=head_seq,
        )
    return BatchPlan(first, head_seq, count, writes=False, resend=True)


def confirm_resend(
    session_id: str, events: Sequence[Event], stored: Sequence[Event], head_seq: int, *, closed: bool = False
) -> None:
    """The resend check: ``events`` must be exactly the ``stored`` events at their seqs, else `SeqConflictError`.

    On a ``closed`` session the refusal is `SessionClosedError`: it takes nothing but an exact re-send.
    """
    if len(stored) == len(events) and encode(list(stored)) == encode(list(events)):
        return
    if closed:
        raise SessionClosedError(session_id, head_seq=head_seq)
    raise SeqConflictError(
        f"batch at seqs {events[0].seq}..{events[-1].seq} differs from the stored events; head is {head_seq}",
        session_id=session_id,
        head_seq=head_seq,
    )


def page_span(head_seq: int, through: int | None, before: int | None) -> PageSpan:
    """A page's span: it ends after ``through`` (else after the head), and no later than ``before``.

    It is empty when that end is at or before seq 0, and refused when ``through`` is past the head.
    """
    to_seq = head_seq + 1 if through is None else through + 1
    if before is not None:
        to_seq = min(to_seq, before)
    return PageSpan(to_seq, beyond_head=through is not None and through > head_seq)


def expiry(expires_at: int | None, touched_at: int, retention_ms: int | None) -> int | None:
    """When a session expires (docs/protocol.md §6.5), in epoch ms; ``None``: never.

    The sooner of its own ``expiresAt`` and ``retention_ms`` after its last write
    (``touched_at``: its creation, its last append, or its close). The retention is the
    store's ceiling: a session may ask to go sooner, never to stay longer.
    """
    kept = None if retention_ms is None else touched_at + retention_ms
    if expires_at is None:
        return kept
    return expires_at if kept is None else min(expires_at, kept)


def alive(expires_at: int | None, touched_at: int, retention_ms: int | None, now: int) -> bool:
    """Whether a session's own expiry time (`expiry`) is still to come at ``now``: what a listing's count keeps."""
    at = expiry(expires_at, touched_at, retention_ms)
    return at is None or at > now
