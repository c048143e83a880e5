"""Where the streams a subscription links stand: each one's tail, and the life its offsets name (§13.3, §13.6).

In docs/protocol.md an offset carries its stream's life, so every offset a subscription
shows (an ack, a wake's tail) is written in the life of the stream as this process last
read it. A stream deleted and made again has a new life: its old acks no longer name it.
"""

from __future__ import annotations

from collections.abc import Iterable

from persistence import StreamGoneError, StreamNotFoundError, StreamStore


class Tails:
    """Reads of linked streams' heads for the subscriptions, keeping each stream's life for the offsets they show."""

    def __init__(self, streams: StreamStore | None) -> None:
        self._streams = streams
        self._lives: dict[tuple[str, str], int] = {}

    async def head(self, name: str, owner: str) -> int | None:
        """The stream's tail, or None when it is no stream of the owner's."""
        assert self._streams is not None
        try:
            meta = await self._streams.head(name, owner)
        except (StreamNotFoundError, StreamGoneError):
            self._lives.pop((owner, name), None)
            return None
        self._lives[(owner, name)] = meta.life
        return meta.tail

    async def tail(self, name: str, owner: str) -> int:
        return await self.head(name, owner) or 0

    async def of(self, names: Iterable[str], owner: str) -> dict[str, int]:
        return {name: await self.tail(name, owner) for name in list(names)}

    def forget(self, name: str, owner: str) -> None:
        """The stream was deleted: a stream made again under its name has another life."""
        self._lives.pop((owner, name), None)

    def life(self, name: str, owner: str) -> int:
        """The life of the stream as last read; 0 (a stream from before lives) when none was."""
        return self._lives.get((owner, name), 0)

    async def lives(self, names: Iterable[str], owner: str) -> dict[str, int]:
        """The life of each of ``names``, read for those this process has not read yet."""
        names = list(names)
        for name in names:
            if (owner, name) not in self._lives:
                await self.head(name, owner)
        return {name: self.life(name, owner) for name in names}
