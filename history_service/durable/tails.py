"""Where the streams a subscription links stand: each one's tail, and the life its offsets name (§13.3, §13.6).

In docs/protocol.md an offset carries its stream's life, so every offset a subscription
shows (an ack, a wake's tail) is written in the life of the stream as this process last
read it. A stream deleted and made again has a new life: its old acks no longer name it.
"""

from __future__ import annotations

from collections.abc import Iterable

from history_service.durable.subscription import Link, Subscription
from persistence import StreamGoneError, StreamNotFoundError, StreamStore


class Tails:
    """Reads of linked streams' heads for the subscriptions, keeping each stream's life for the offsets they show."""

    def __init__(self, streams: StreamStore | None) -> None:
        self._streams = streams
        # Each stream's life as last read, by name, then owner.
        self._lives: dict[str, dict[str, int]] = {}

    async def head(self, name: str, owner: str) -> int | None:
        """The stream's tail, or None when it is no stream of the owner's."""
        assert self._streams is not None
        try:
            meta = await self._streams.head(name, owner)
        except (StreamNotFoundError, StreamGoneError):
            self.forget(name, owner)
            return None
        self._lives.setdefault(name, {})[owner] = meta.life
        return meta.tail

    async def tail(self, name: str, owner: str) -> int:
        return await self.head(name, owner) or 0

    async def at(self, name: str, owner: str) -> tuple[int, int]:
        """The stream's tail now, and its life."""
        tail = await self.tail(name, owner)
        return tail, self.life(name, owner)

    async def link(self, name: str, owner: str, *, explicit: bool = False) -> Link:
        """A new link to ``name``, acked at its tail now, in its life now."""
        tail, life = await self.at(name, owner)
        return Link(acked=tail, explicit=explicit, life=life)

    async def of(self, sub: Subscription) -> dict[str, int]:
        """The tail of each stream ``sub`` links; a link acked in an earlier life of its stream starts again."""
        tails = {name: await self.tail(name, sub.owner) for name in list(sub.links)}
        sub.relive({name: life for name in tails if (life := self._lives.get(name, {}).get(sub.owner)) is not None})
        return tails

    def forget(self, name: str, owner: str) -> None:
        """The stream was deleted: a stream made again under its name has another life."""
        if (owners := self._lives.get(name)) is not None:
            owners.pop(owner, None)
            if not owners:
                del self._lives[name]

    def forget_all(self, name: str | None) -> None:
        """Another process wrote ``name`` (``None``: any stream), of whichever owner: its life is read again."""
        if name is None:
            self._lives.clear()
        else:
            self._lives.pop(name, None)

    def life(self, name: str, owner: str) -> int:
        """The life of the stream as last read; 0 (a stream from before lives) when none was."""
        return self._lives.get(name, {}).get(owner, 0)

    async def lives(self, names: Iterable[str], owner: str) -> dict[str, int]:
        """The life of each of ``names``, read for those this process has not read yet."""
        names = list(names)
        for name in names:
            if owner not in self._lives.get(name, {}):
                await self.head(name, owner)
        return {name: self.life(name, owner) for name in names}
