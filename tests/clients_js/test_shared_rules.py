"""The rules the JavaScript package keeps a copy of agree with the Python ones they copy.

The browser cannot import Python, so clients/js/src holds its own limits, its own session-id
rule, its own header field order and its own reading of an SSE id (`<incarnation>:<seq>`).
Each is checked here against the one Python definition (`codec`, or the route table's
parameters in `history_service.params`), and the id rule also against the pattern
`docs/openapi.json` publishes: constants by value, the id rules by the verdict on the same
ids, edge cases and random ones alike. What the package keeps no copy
of, the content codings, it must not start to spell out.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings, strategies as st

from codec import (
    CHUNK_EVENT_TYPE,
    INCARNATION_PATTERN,
    MAX_DEPTH,
    MAX_SESSION_ID,
    RESERVED_TYPES,
    CodecError,
    SessionHeader,
    check_session_id,
    parse_event_id,
)
from codec.chunk_rows import MIN_RUN, ROW_TAGS
from history_service import openapi, routes
from history_service.encoding import CODINGS
from history_service.params import NoParams, parameters

NODE = shutil.which("node")
pytestmark = pytest.mark.skipif(NODE is None, reason="node is not on PATH (scripts/with-node installs Debian's nodejs)")

ROOT = Path(__file__).resolve().parents[2]
CODEC = (ROOT / "clients" / "js" / "src" / "codec.js").as_uri()
HEADER_FIELDS = (ROOT / "clients" / "js" / "src" / "events.js").as_uri()
INDEX = (ROOT / "clients" / "js" / "src" / "index.js").as_uri()
PROBE = f"""
import {{ readFileSync }} from "node:fs";
import * as codec from {json.dumps(CODEC)};
import {{ HEADER_FIELDS }} from {json.dumps(HEADER_FIELDS)};
import {{ MAX_MESSAGES }} from {json.dumps(INDEX)};
const {{ ids, eventIds }} = JSON.parse(readFileSync(0, "utf8"));
const accepted = ids.map((id) => {{ try {{ codec.checkSessionId(id); return true; }} catch {{ return false; }} }});
const parsed = eventIds.map((text) => {{ const id = codec.parseEventId(text); return id && [id.incarnation, id.seq] }});
console.log(JSON.stringify({{
  CHUNK_EVENT_TYPE: codec.CHUNK_EVENT_TYPE, MAX_DEPTH: codec.MAX_DEPTH, MAX_SESSION_ID: codec.MAX_SESSION_ID,
  MIN_RUN: codec.MIN_RUN, RESERVED_TYPES: [...codec.RESERVED_TYPES].sort(), ROW_TAGS: [...codec.ROW_TAGS].sort(),
  INCARNATION_PATTERN: codec.INCARNATION_PATTERN, HEADER_FIELDS, MAX_MESSAGES, accepted, parsed,
}}));
"""
EDGE_IDS = [
    "",
    ".",
    "..",
    "...",
    "a",
    "s1.child-1",
    "{{sessionId}}",
    "x" * MAX_SESSION_ID,
    "x" * (MAX_SESSION_ID + 1),
    "a b",
    "a/b",
    "é",
    "a\n",
    "\u0130",
    "ＡＢ",
    "@~:_-.{}",
]
ID_CHARS = st.sampled_from("Aa0._:@~{}- /\\\n%é\u0130Ｋ")
EDGE_EVENT_IDS = [
    "5d0c1e9a7b22:41",
    "0:-1",
    "41",
    "-1",
    "-0",
    "z" * 32 + ":9007199254740991",
    "",
    ":5",
    "abc:",
    "ABC:5",
    "a:b:5",
    "z" * 33 + ":5",
    "a:1.5",
    "a: 5",
    "a:" + "9" * 17,
    "a:+5",
    "a:٣",
]
# No line breaks: Python's "$" also matches before a final one, so codec.parse_event_id reads "a:5\n"
# as seq 5, where JavaScript's refuses it. No HTTP header and no SSE id can carry one.
EVENT_ID_CHARS = st.sampled_from("09az:-Z.+ ٣")


def probe(ids: list[str], event_ids: list[str] | None = None) -> dict[str, Any]:
    assert NODE is not None
    given = json.dumps({"ids": ids, "eventIds": event_ids or []})
    run = subprocess.run(
        [NODE, "--input-type=module", "-e", PROBE], input=given, capture_output=True, text=True, timeout=60
    )
    assert run.returncode == 0, run.stderr
    found: dict[str, Any] = json.loads(run.stdout)
    return found


def python_accepts(session_id: str) -> bool:
    try:
        check_session_id(session_id)
    except CodecError:
        return False
    return True


def openapi_accepts(session_id: str) -> bool:
    schema = openapi.document()["components"]["schemas"]["SessionId"]
    # JSON Schema patterns are ECMAScript's, whose "$" (unlike Python's) never matches before a final newline.
    matches = re.fullmatch(schema["pattern"].removeprefix("^").removesuffix("$"), session_id) is not None
    return matches and schema["minLength"] <= len(session_id) <= schema["maxLength"]


def test_the_javascript_constants_are_the_python_ones() -> None:
    found = probe([])
    assert found["CHUNK_EVENT_TYPE"] == CHUNK_EVENT_TYPE
    assert (found["MAX_DEPTH"], found["MAX_SESSION_ID"], found["MIN_RUN"]) == (MAX_DEPTH, MAX_SESSION_ID, MIN_RUN)
    assert found["RESERVED_TYPES"] == sorted(RESERVED_TYPES)
    assert found["ROW_TAGS"] == sorted(ROW_TAGS)
    assert found["INCARNATION_PATTERN"] == INCARNATION_PATTERN
    # The tag ("type") leads, as msgspec encodes it, then the fields in their declared order.
    assert found["HEADER_FIELDS"] == [SessionHeader.__struct_config__.tag_field, *SessionHeader.__struct_fields__]


def test_the_javascript_max_messages_is_the_route_tables_for_pages_and_follows() -> None:
    reading = {
        operation.name: param
        for route in routes.ROUTES
        for operation in route.operations
        for param in parameters(operation.query or NoParams)
        if param.name == "maxMessages"
    }
    assert reading.keys() == {"readPage", "readChildPage", "followSession", "followChildSession"}
    assert {(param.low, param.high) for param in reading.values()} == {(1, probe([])["MAX_MESSAGES"])}


def test_the_javascript_sources_spell_out_no_content_coding() -> None:
    """The browser's fetch negotiates codings; a list of them in the package would be a second declaration."""
    sources = sorted((ROOT / "clients" / "js" / "src").glob("*.js")) + sorted(
        (ROOT / "history_service" / "viewer").glob("*.js")
    )
    assert sources and CODINGS
    spelled = {
        path.name: coding
        for path in sources
        for coding in CODINGS
        if re.search(rf"""["'`]{coding}["'`]""", path.read_text(encoding="utf-8"))
    }
    assert spelled == {}


def test_the_edge_case_ids_get_one_verdict_everywhere() -> None:
    verdicts = probe(EDGE_IDS)["accepted"]
    assert verdicts == [python_accepts(i) for i in EDGE_IDS]
    # The published pattern admits "." and "..", which every check then refuses (docs/protocol.md §2.4).
    assert [openapi_accepts(i) for i in EDGE_IDS] == [
        v or i in (".", "..") for i, v in zip(EDGE_IDS, verdicts, strict=True)
    ]


@settings(max_examples=20, deadline=None)
@given(st.lists(st.text(ID_CHARS, max_size=MAX_SESSION_ID + 2), min_size=1, max_size=200))
def test_random_ids_get_the_python_verdict_in_javascript(ids: list[str]) -> None:
    assert probe(ids)["accepted"] == [python_accepts(i) for i in ids]


def python_parses(text: str) -> list[Any] | None:
    parsed = parse_event_id(text)
    return None if parsed is None else list(parsed)


def test_the_edge_case_event_ids_parse_alike() -> None:
    assert probe([], EDGE_EVENT_IDS)["parsed"] == [python_parses(text) for text in EDGE_EVENT_IDS]


# Sixteen digits may pass 2^53, where a JavaScript number rounds: the service never sends such a seq.
SAFE_EVENT_IDS = st.text(EVENT_ID_CHARS, max_size=40).filter(lambda text: re.search("[0-9]{16}", text) is None)


@settings(max_examples=20, deadline=None)
@given(st.lists(SAFE_EVENT_IDS, min_size=1, max_size=200))
def test_random_event_ids_parse_alike_in_javascript(texts: list[str]) -> None:
    found = probe([], texts)["parsed"]
    assert found == [python_parses(text) for text in texts]
