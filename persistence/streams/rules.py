"""The rules of Durable Streams writes and reads, written once for every store (docs/protocol.md §13).

Each function runs inside one of a store's transactions, handed as a `Tx`: the memory
store's is its dicts on the event loop, the SQL store's a unit of a group commit. So a
producer's state always commits with the append it admitted, and a fork's reference with
the fork.
"""

from __future__ import annotations

import secrets
from typing import Final, Protocol

import msgspec

from codec import MAX_LIFE, PIECE_BYTES, InvalidJsonError, fragment_values, json_pieces, pieces, values_within
from persistence.errors import (
    ProducerFencedError,
    ProducerGapError,
    StreamBodyTooLargeError,
    StreamClosedError,
    StreamConflictError,
    StreamGoneError,
    StreamNotFoundError,
    StreamRequestError,
    StreamValueTooLargeError,
)
from persistence.streams.model import (
    AppendOutcome,
    AppendRequest,
    Chunk,
    CreateRequest,
    Producer,
    ProducerClaim,
    StreamMeta,
    media_type,
)

__all__ = [
    "MAX_FORK_DEPTH",
    "MAX_SUB_PREFIX",
    "PRODUCER_TTL_MS",
    "Tx",
    "append",
    "create",
    "delete",
    "live",
    "read",
    "sweep",
    "touch",
]

# A producer not heard from for this long is forgotten: its next write starts a new one.
PRODUCER_TTL_MS: Final = 7 * 24 * 3600 * 1000
OCTET_STREAM: Final = "application/octet-stream"
# A read walks a fork's chain to its root: bounded, so no read recurses or queries without end.
MAX_FORK_DEPTH: Final = 32
# A sub-offset copies part of an append into the fork: bounded, so an empty PUT cannot copy a large one.
MAX_SUB_PREFIX: Final = 1024 * 1024


class Tx(Protocol):
    """A store's view of its streams within one transaction."""

    def meta(self, name: str) -> StreamMeta | None: ...

    def save(self, meta: StreamMeta) -> None: ...

    def drop(self, name: str) -> None:
        """Remove the stream: its metadata, chunks and producers."""

    def producer(self, name: str, producer_id: str) -> Producer | None: ...

    def save_producer(self, name: str, producer_id: str, state: Producer) -> None: ...

    def add(self, name: str, chunk: Chunk) -> None: ...

    def ends_at(self, name: str, position: int) -> bool:
        """Whether one of the stream's own chunks ends at ``position``."""

    def chunks(self, name: str, after: int, through: int | None, budget: int) -> list[Chunk]:
        """The stream's own chunks ending past ``after`` (and at or before ``through``), in order.

        It stops before the chunk that would take them past ``budget`` bytes; it returns at
        least one when any is there. A chunk is one stored piece of an append.
        """


def live(tx: Tx, name: str, owner: str, now: int) -> StreamMeta:
    """The stream as a caller may use it, or `StreamNotFoundError` / `StreamGoneError`."""
    meta = tx.meta(name)
    if meta is None or meta.owner != owner:
        raise StreamNotFoundError(f"no stream {name!r}")
    if meta.gone or (meta.expired(now) and meta.refs > 0):
        raise StreamGoneError(f"stream {name!r} was deleted")
    if meta.expired(now):
        raise StreamNotFoundError(f"no stream {name!r}")
    return meta


def create(tx: Tx, request: CreateRequest, now: int) -> tuple[StreamMeta, bool]:
    """The stream ``request`` names, and whether this created it (else it was there, configured alike)."""
    existing = tx.meta(request.name)
    if existing is not None:
        if existing.expired(now) and not existing.gone and existing.refs == 0:
            _remove(tx, existing)
        elif existing.gone or existing.expired(now):
            # Expired with forks, it is gone already to every read; the sweeper marks it so.
            raise StreamConflictError("the stream was deleted but still has forks: its name cannot be reused yet")
        elif existing.owner != request.owner or not _same(existing, request):
            raise StreamConflictError("the stream exists with another configuration")
        else:
            return existing, False
    meta = StreamMeta(
        name=request.name,
        owner=request.owner,
        content_type=request.content_type or OCTET_STREAM,
        created_ms=now,
        accessed_ms=now,
        ttl_seconds=request.ttl_seconds,
        expires_at=request.expires_at,
        expires_ms=request.expires_ms,
        closed=request.closed,
        life=secrets.randbelow(MAX_LIFE) + 1,
    )
    source, prefix = None, b""
    if request.forked_from is not None:
        meta, source, prefix = _fork(tx, meta, request, now)
    # Checked before anything is written: a refused body leaves no trace, on a store without rollback too.
    stored = _pieces(meta, request.body, request.max_values, allow_empty=True) if request.body else []
    if source is not None:
        tx.save(msgspec.structs.replace(source, refs=source.refs + 1))
    if prefix:
        tx.add(meta.name, Chunk(meta.tail, prefix))
    meta = msgspec.structs.replace(meta, tail=_add(tx, meta.name, meta.tail, stored))
    tx.save(meta)
    return meta, True


def _same(existing: StreamMeta, request: CreateRequest) -> bool:
    wanted = request.content_type
    if wanted is None and request.forked_from is None:
        wanted = OCTET_STREAM
    return (
        (wanted is None or media_type(wanted) == media_type(existing.content_type))
        and request.ttl_seconds == existing.ttl_seconds
        and request.expires_at == existing.expires_at
        and request.closed == existing.closed
        and request.forked_from == existing.forked_from
        and (request.fork_at is None or request.fork_at == existing.fork_at)
        and request.fork_sub == existing.fork_sub
    )


def _fork(tx: Tx, meta: StreamMeta, request: CreateRequest, now: int) -> tuple[StreamMeta, StreamMeta, bytes]:
    """The fork as it will be (its tail past its sub-offset prefix), its source, and the prefix; nothing is written."""
    source_name = request.forked_from
    assert source_name is not None
    source = tx.meta(source_name)
    if source is None or source.owner != request.owner or (source.expired(now) and not source.gone):
        raise StreamNotFoundError(f"no source stream {source_name!r}")
    if source.gone:
        raise StreamConflictError("the source stream was deleted but still has forks")
    if request.content_type and media_type(request.content_type) != media_type(source.content_type):
        raise StreamConflictError("a fork's content type must be its source's")
    if source.depth >= MAX_FORK_DEPTH:
        raise StreamRequestError(f"a fork chain is at most {MAX_FORK_DEPTH} forks deep")
    at = source.tail if request.fork_at is None else request.fork_at
    if request.fork_life is not None and not source.owns(request.fork_life, at):
        raise StreamRequestError("the fork offset is not an offset of the source: it is of another life of its name")
    if not 0 <= at <= source.tail:
        raise StreamRequestError("the fork offset is beyond the source's tail")
    if at not in (0, source.tail, source.fork_at) and not _boundary(tx, source, at):
        raise StreamRequestError("a fork offset is an offset the source gave: between two of its appends")
    prefix = _sub_prefix(tx, source, at, request.fork_sub) if request.fork_sub else b""
    ttl, expires_at, expires_ms = request.ttl_seconds, request.expires_at, request.expires_ms
    if ttl is None and expires_at is None:
        ttl, expires_at, expires_ms = source.ttl_seconds, source.expires_at, source.expires_ms
    meta = msgspec.structs.replace(
        meta,
        content_type=source.content_type,
        ttl_seconds=ttl,
        expires_at=expires_at,
        expires_ms=expires_ms,
        forked_from=source.name,
        depth=source.depth + 1,
        fork_at=at,
        fork_sub=request.fork_sub,
        tail=at,
        source_lives=((source.life, at), *((life, min(through, at)) for life, through in source.source_lives)),
    )
    return msgspec.structs.replace(meta, tail=at + len(prefix)), source, prefix


def _boundary(tx: Tx, meta: StreamMeta, at: int) -> bool:
    """Whether one of the chunks a read of ``meta`` sees ends exactly at ``at`` (through its sources)."""
    for _ in range(MAX_FORK_DEPTH + 1):
        if meta.forked_from is None or meta.fork_at is None or at > meta.fork_at:
            return tx.ends_at(meta.name, at)
        if at == meta.fork_at:
            return True
        source = tx.meta(meta.forked_from)
        if source is None:
            return False
        meta = source
    return False


def _sub_prefix(tx: Tx, source: StreamMeta, at: int, sub: int) -> bytes:
    """The first ``sub`` bytes (JSON: values) of the source's chunk that starts at ``at``, as the fork's own."""
    if sub > MAX_SUB_PREFIX:
        raise StreamRequestError(f"a fork sub-offset copies at most {MAX_SUB_PREFIX} bytes or values")
    first, _ = collect(tx, source, at, 1)
    if not first:
        raise StreamRequestError("a fork sub-offset needs data past the fork offset")
    data = first[0].data
    if source.json:
        values = fragment_values(data)
        if sub > len(values):
            raise StreamRequestError("the fork sub-offset is past the chunk's values")
        return b"".join(value + b"," for value in values[:sub])
    if sub > len(data):
        raise StreamRequestError("the fork sub-offset is past the chunk's bytes")
    return data[:sub]


def append(tx: Tx, request: AppendRequest, now: int) -> AppendOutcome:
    """Append ``request.body``, close the stream, or both, under the producer's and Stream-Seq's rules."""
    meta = live(tx, request.name, request.owner, now)
    claim = request.producer
    if meta.closed:
        if claim is not None and meta.closed_by == claim:
            return AppendOutcome(
                status="duplicate", tail=meta.tail, closed=True, producer_seq=claim.seq, life=meta.life
            )
        if not request.body and claim is None:
            return AppendOutcome(status="appended", tail=meta.tail, closed=True, life=meta.life)
        raise StreamClosedError(f"stream {meta.name!r} is closed", tail=meta.tail, life=meta.life)
    if request.body and request.content_type and media_type(request.content_type) != media_type(meta.content_type):
        raise StreamConflictError(f"the stream's content type is {meta.content_type}")
    admitted: Producer | None = None
    if claim is not None:
        verdict = _admit(tx, meta.name, claim, now)
        if isinstance(verdict, int):
            return AppendOutcome(
                status="duplicate", tail=meta.tail, closed=meta.closed, producer_seq=verdict, life=meta.life
            )
        admitted = verdict
    if request.body and request.stream_seq is not None:
        if meta.stream_seq is not None and request.stream_seq <= meta.stream_seq:
            raise StreamConflictError(f"Stream-Seq {request.stream_seq!r} does not follow {meta.stream_seq!r}")
    tail = meta.tail
    if request.body:
        tail = _add(tx, meta.name, tail, _pieces(meta, request.body, request.max_values))
    if claim is not None and admitted is not None:
        tx.save_producer(meta.name, claim.id, admitted)
    meta = msgspec.structs.replace(
        meta,
        tail=tail,
        accessed_ms=now,
        stream_seq=request.stream_seq if request.body and request.stream_seq is not None else meta.stream_seq,
        closed=meta.closed or request.close,
        closed_by=claim if request.close else meta.closed_by,
    )
    tx.save(meta)
    return AppendOutcome(
        status="appended",
        tail=tail,
        closed=meta.closed,
        producer_seq=None if claim is None else claim.seq,
        life=meta.life,
    )


def _pieces(meta: StreamMeta, body: bytes, max_values: int | None, *, allow_empty: bool = False) -> list[bytes]:
    """An append's body as it is stored: its pieces (`codec.pieces`), a JSON stream's as fragments of whole values."""
    if not meta.json:
        return pieces(body, PIECE_BYTES, text=media_type(meta.content_type).startswith("text/"))
    # Counted from the bytes before they are decoded, as every JSON body of the API is (docs/protocol.md §11.3).
    if max_values is not None and not values_within(body, max_values):
        raise StreamBodyTooLargeError(f"the body holds more than {max_values} JSON values")
    try:
        found = json_pieces(body, PIECE_BYTES, allow_empty=allow_empty)
    except InvalidJsonError as exc:
        raise StreamRequestError(str(exc)) from exc
    if any(len(piece) > PIECE_BYTES for piece in found):
        raise StreamValueTooLargeError(f"a value of a JSON stream is at most {PIECE_BYTES - 1} bytes")
    return found


def _add(tx: Tx, name: str, tail: int, stored: list[bytes]) -> int:
    """Store the pieces after ``tail``, each a chunk; the new tail."""
    for piece in stored:
        if piece:
            tail += len(piece)
            tx.add(name, Chunk(tail, piece))
    return tail


def _admit(tx: Tx, name: str, claim: ProducerClaim, now: int) -> Producer | int:
    """The producer's next state when ``claim`` is admitted, or the seq it duplicates; raises when it is refused."""
    state = tx.producer(name, claim.id)
    if state is not None and now - state.updated_ms > PRODUCER_TTL_MS:
        state = None
    if state is None or claim.epoch > state.epoch:
        if claim.seq != 0:
            if state is None:
                raise ProducerGapError("a new producer starts at seq 0", expected=0, received=claim.seq)
            raise StreamRequestError("a new producer epoch starts at seq 0")
        return Producer(claim.epoch, 0, now)
    if claim.epoch < state.epoch:
        raise ProducerFencedError(f"producer epoch {claim.epoch} is stale", epoch=state.epoch)
    if claim.seq <= state.seq:
        return state.seq
    if claim.seq == state.seq + 1:
        return Producer(claim.epoch, claim.seq, now)
    raise ProducerGapError("producer seq skips ahead", expected=state.seq + 1, received=claim.seq)


def delete(tx: Tx, name: str, owner: str, now: int) -> None:
    """Delete the stream; one that forks still read through is only marked gone until the last goes."""
    meta = live(tx, name, owner, now)
    if meta.refs > 0:
        tx.save(msgspec.structs.replace(meta, gone=True))
    else:
        _remove(tx, meta)


def sweep(tx: Tx, name: str, now: int) -> bool:
    """Delete the stream if it has expired; whether it did anything."""
    meta = tx.meta(name)
    if meta is None or not meta.expired(now) or meta.gone:
        return False
    if meta.refs > 0:
        tx.save(msgspec.structs.replace(meta, gone=True))
    else:
        _remove(tx, meta)
    return True


def _remove(tx: Tx, meta: StreamMeta) -> None:
    """Drop the stream, then each source that was kept only for it."""
    tx.drop(meta.name)
    while meta.forked_from is not None:
        source = tx.meta(meta.forked_from)
        if source is None:
            return
        source = msgspec.structs.replace(source, refs=max(source.refs - 1, 0))
        if source.refs or not source.gone:
            tx.save(source)
            return
        tx.drop(source.name)
        meta = source


def touch(tx: Tx, name: str, now: int) -> None:
    """Restart a TTL stream's clock: a read or a write keeps it alive."""
    meta = tx.meta(name)
    if meta is not None and meta.ttl_seconds is not None and not meta.expired(now) and meta.accessed_ms != now:
        tx.save(msgspec.structs.replace(meta, accessed_ms=now))


def read(
    tx: Tx, name: str, owner: str, after: int | None, budget: int, now: int, life: int | None = None
) -> tuple[StreamMeta, list[Chunk], bool]:
    """The stream, its chunks past ``after`` within ``budget`` bytes (at least one), and whether they reach its tail.

    ``after`` is an offset's position in the stream's ``life``: `StreamGoneError` for another
    life, `StreamRequestError` unless it lies between two pieces (or at the start or tail).
    ``None`` reads only the stream's state.
    """
    meta = live(tx, name, owner, now)
    if life is not None and life != meta.life:
        raise StreamGoneError(f"the offset is of an earlier life of stream {name!r}, which was deleted")
    if after is None:
        return meta, [], True
    if after not in (0, meta.tail, meta.fork_at) and not (0 < after < meta.tail and _boundary(tx, meta, after)):
        raise StreamRequestError("not an offset of the stream: an offset lies between two of its pieces")
    # Capped at the tail just read: on a reader that sees each statement's own snapshot (PostgreSQL
    # autocommit), an append between the two reads must not land past the offset answered.
    chunks, complete = collect(tx, meta, after, budget, meta.tail)
    return meta, chunks, complete


def collect(tx: Tx, meta: StreamMeta, after: int, budget: int, cap: int | None = None) -> tuple[list[Chunk], bool]:
    """The chunks a read of ``meta`` past ``after`` sees, through its sources, and whether the read is complete."""
    found: list[Chunk] = []
    if meta.forked_from is not None and meta.fork_at is not None and after < meta.fork_at:
        source = tx.meta(meta.forked_from)
        if source is not None:
            through = meta.fork_at if cap is None else min(cap, meta.fork_at)
            found, complete = collect(tx, source, after, budget, through)
            if not complete:
                return found, False
            budget -= sum(len(chunk.data) for chunk in found)
        after = max(after, meta.fork_at)
    end = meta.tail if cap is None else min(cap, meta.tail)
    if after >= end:
        return found, True
    own = tx.chunks(meta.name, after, cap, max(budget, 1))
    if found and own and len(own[0].data) > budget:
        # The source's part filled the budget: the first own piece goes to the next read.
        return found, False
    found += own
    return found, not own or own[-1].end >= end
