"""Where work leaves the event loop: a read, a decode, a hash or a splice of this many bytes.

Below it the work is quicker than the hop to a worker thread and back; above it, it runs in
a thread so the loop keeps answering other requests meanwhile. One figure for every store and
for the service's bodies and pages, so a page is never inline in one place and threaded in
the next for the same size.
"""

from __future__ import annotations

from typing import Final

__all__ = ["OFF_LOOP_BYTES"]

OFF_LOOP_BYTES: Final = 256 * 1024
