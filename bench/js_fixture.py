"""The page bodies the JavaScript benchmark reads (clients/js/bench/page.bench.js).

``python -m bench.js_fixture DIR`` writes the ``realistic`` tail page twice: packed
(``DIR/page.packed.json``) and as ``?expand=raw`` sends it, every record an
``{"event":…}`` (``DIR/page.raw.json``), with ``DIR/page.meta.json`` naming its interval.
The bodies are what the service sends: `encode` of the page, as `bench.test_page_path` builds it.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Final

from bench.fixtures import realistic, tail_cut
from codec import Page, PageRecord, encode, pack_page

__all__ = ["MAX_MESSAGES", "main", "write_pages"]

MAX_MESSAGES: Final = 50  # the service's default


def write_pages(out: Path, *, scale: int = 1) -> dict[str, int]:
    """Write the packed and raw tail page bodies of ``realistic`` into ``out``; return their figures."""
    events = realistic(scale=scale)
    cut = tail_cut(events, MAX_MESSAGES)
    tail = events[cut:]
    packed = encode(Page(pack_page(tail), cut > 0, cut, len(events)))
    raw = encode(Page([PageRecord(event=event) for event in tail], cut > 0, cut, len(events)))
    out.mkdir(parents=True, exist_ok=True)
    (out / "page.packed.json").write_bytes(packed)
    (out / "page.raw.json").write_bytes(raw)
    meta = {"fromSeq": cut, "toSeq": len(events), "events": len(tail), "packedBytes": len(packed), "rawBytes": len(raw)}
    (out / "page.meta.json").write_text(json.dumps(meta))
    return meta


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="the directory to write the page bodies into")
    parser.add_argument("--scale", type=int, default=1, help="divide every run length, for smoke runs")
    args = parser.parse_args(argv)
    print(json.dumps(write_pages(args.out, scale=args.scale)))


if __name__ == "__main__":
    main()
