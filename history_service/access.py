"""Who may see a session (docs/protocol.md §8.2): its owner, and a subagent child only through its parent's address.

To anyone else a session answers exactly as an unknown id does, so ids leak nothing.
"""

from __future__ import annotations

from history_service.errors import NotADirectChild, NotOwner, SubagentChild
from persistence import SessionInfo, subagent_parent

__all__ = ["check_visible"]


def check_visible(principal: str, session_id: str, child: str | None, info: SessionInfo) -> None:
    """Refuse, as §8 says, a session ``info`` that the address ``session_id`` (and ``child``) may not show the caller.

    For a child address the parent is checked apart; ``info`` is then the child's.
    """
    if child is None:
        if info.owner != principal:
            raise NotOwner(session_id)
        parent = subagent_parent(info.header)
        if parent is not None:
            raise SubagentChild(session_id, parent=parent)
    elif subagent_parent(info.header) != session_id:
        if info.owner == principal:
            raise NotADirectChild(child, parent=session_id)
        raise NotOwner(child)
