"""Golden wire files: hand-written sessions and their exact packed bytes.

Regenerate the ``*.packed.jsonl`` files with ``HISTORY_WRITE_GOLDEN=1``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from codec import encode, encode_lines, expand_records, pack, read_session_log
from testing.golden import GOLDEN_DIR, check_golden

SESSIONS = sorted((GOLDEN_DIR / "codec").glob("*.events.jsonl"))


def test_there_are_golden_sessions():
    assert {path.name.split(".")[0] for path in SESSIONS} >= {"text-turn", "tool-calls", "edges"}


@pytest.mark.parametrize("events_path", SESSIONS, ids=lambda p: p.name.split(".")[0])
def test_events_file_is_canonical(events_path: Path) -> None:
    data = events_path.read_bytes()
    log = read_session_log(data)
    assert encode(log.header) + b"\n" + encode_lines(log.events) == data


@pytest.mark.parametrize("events_path", SESSIONS, ids=lambda p: p.name.split(".")[0])
def test_packed_bytes_match_golden(events_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    log = read_session_log(events_path.read_bytes())
    packed = encode(log.header) + b"\n" + encode_lines(pack(log.events))
    golden = events_path.with_name(events_path.name.replace(".events.", ".packed."))
    check_golden(golden, packed, capsys)
    assert read_session_log(golden.read_bytes()).events == log.events
    assert expand_records(pack(log.events)) == log.events
