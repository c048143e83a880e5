"""A JSONL root's layout: the root marker, each session's directory name and file names."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Final

import msgspec

from codec import SessionHeader, encode
from persistence.base import DEFAULT_OWNER
from persistence.errors import CorruptLogError, InvalidSessionIdError, SchemaVersionError, StoreError
from persistence.jsonl.files import write_atomic

__all__ = [
    "CLOSED_NAME",
    "FORMAT_VERSION",
    "INDEX_NAME",
    "MODES",
    "OWNER_NAME",
    "ROOT_MARKER",
    "RootMarker",
    "closed_at",
    "encode_segment",
    "named_for",
    "open_root",
    "owner_of",
    "read_marker",
    "touched_at",
    "with_closed",
]

FORMAT_VERSION: Final = 1
MODES: Final = ("none", "zstd")
ROOT_MARKER: Final = ".history-store.json"
INDEX_NAME: Final = "index.jsonl"
OWNER_NAME: Final = "owner"
# Present once the session is closed: its closedAt, as decimal text, written atomically.
CLOSED_NAME: Final = "closed"
_MAX_DIR_NAME: Final = 240
_SAFE: Final = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-")


def closed_at(directory: Path) -> int | None:
    """The session's ``closedAt``, from its `CLOSED_NAME` file; ``None`` while it is open."""
    try:
        text = (directory / CLOSED_NAME).read_bytes()
    except FileNotFoundError:
        return None
    try:
        return int(text)
    except ValueError:
        raise CorruptLogError(f"{directory / CLOSED_NAME}: not a closedAt time: {text[:40]!r}") from None


def owner_of(directory: Path) -> str:
    """The session's owner, from its `OWNER_NAME` file: `DEFAULT_OWNER` for a log placed without one."""
    try:
        return (directory / OWNER_NAME).read_text()
    except FileNotFoundError:
        return DEFAULT_OWNER


def touched_at(directory: Path) -> int:
    """When the session was last written, in epoch ms: its index's time (created or appended to), or its close's.

    Raises ``FileNotFoundError`` when the directory is gone (deleted meanwhile).
    """
    touched = (directory / INDEX_NAME).stat().st_mtime_ns
    try:
        touched = max(touched, (directory / CLOSED_NAME).stat().st_mtime_ns)
    except FileNotFoundError:
        pass
    return touched // 1_000_000


def with_closed(header: SessionHeader, at: int | None) -> SessionHeader:
    """``header`` with ``closedAt`` when ``at`` (from `closed_at`) says the session is closed."""
    if at is None or header.closedAt is not msgspec.UNSET:
        return header
    return msgspec.structs.replace(header, closedAt=at)


def encode_segment(session_id: str) -> str:
    """A directory name for ``session_id``: safe characters kept, every other UTF-16 unit as ``~XXXX``.

    Dots are escaped too, so no id can name ``.``, ``..`` or a hidden entry of the root. A
    name that would pass `_MAX_DIR_NAME` characters (file systems allow 255 bytes) becomes
    ``~~`` and a hash of the id instead; escaping never writes two ``~`` in a row, so the two
    kinds of name cannot meet, and the header inside names the id itself.
    """
    if not session_id:
        raise InvalidSessionIdError("a session id must not be empty")
    out = []
    for char in session_id:
        if char in _SAFE:
            out.append(char)
        else:
            data = char.encode("utf-16-be")
            out.extend(f"~{int.from_bytes(data[i : i + 2], 'big'):04X}" for i in range(0, len(data), 2))
    name = "".join(out)
    if len(name) > _MAX_DIR_NAME:
        return "~~" + hashlib.blake2b(session_id.encode("utf-8", "surrogatepass"), digest_size=32).hexdigest()
    return name


class RootMarker(msgspec.Struct, frozen=True):
    format: int
    compression: str


_MARKER: Final = msgspec.json.Decoder(RootMarker)


def read_marker(data: bytes) -> RootMarker:
    """A root marker's contents (`msgspec.DecodeError` when unreadable)."""
    return _MARKER.decode(data)


def open_root(root: Path, compression: str | None) -> str:
    """Create ``root`` and its marker if needed, and return its compression mode (see `JsonlStore.open`)."""
    root.mkdir(parents=True, exist_ok=True)
    marker = root / ROOT_MARKER
    if marker.exists():
        try:
            found = read_marker(marker.read_bytes())
        except msgspec.DecodeError as exc:
            raise StoreError(f"{marker} is unreadable: {exc}") from exc
        if found.format != FORMAT_VERSION:
            raise SchemaVersionError(f"{root} has JSONL store format {found.format}; this build reads {FORMAT_VERSION}")
        if compression is not None and found.compression != compression:
            raise StoreError(
                f"{root} holds compression={found.compression} logs, not compression={compression}; "
                "leave ?compression out to use the store's own"
            )
        compression = found.compression
    else:
        compression = compression or "none"
        write_atomic(marker, encode(RootMarker(FORMAT_VERSION, compression)))
    return compression


def named_for(name: str, header: SessionHeader) -> bool:
    """Whether a directory ``name`` is the one ``header``'s id names."""
    # A log placed in a directory its id does not name is unreachable by id: do not list it.
    try:
        return encode_segment(header.id) == name
    except InvalidSessionIdError:
        return False
