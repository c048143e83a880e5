"""The JavaScript codec twin (clients/js/src) against the Python codec, byte for byte.

A long-lived node process (clients/js/test/oracle.js) answers one JSON request per line.
Random sessions must pack to the bytes `pack` gives; Python-packed rows, and rows and
events with one field broken, must decode to the same events or fail with the same error
class; JSON values must re-encode to msgspec's bytes; the service's `records` frames of
random intervals must expand to their events; and our golden pages must expand to the
events `read_page` gives.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any
from urllib.parse import parse_qs, urlsplit

import msgspec
import pytest
from hypothesis import given, settings, strategies as st

from codec import (
    MAX_SAFE_INTEGER,
    CodecError,
    Event,
    decode_json,
    decode_storage_line,
    encode,
    expand_records,
    pack,
    stored_batch,
)
from history_client import read_page
from history_service.follow_frames import records_frame
from testing.events import plain, reasoning, text, tool
from testing.golden import GOLDEN_DIR
from testing.strategies import batches, json_number_texts, json_values, layouts, sessions
from tests.codec.test_chunk_rows import REJECTIONS

NODE = shutil.which("node")
if NODE is None:
    pytest.skip("node is not on PATH (scripts/with-node installs it)", allow_module_level=True)

ORACLE = Path(__file__).resolve().parents[2] / "clients" / "js" / "test" / "oracle.js"
T0 = 1_700_000_000_000
NON_JSON_REJECTIONS = {"nan-time0", "infinite-time0", "nan-dt"}


class Oracle:
    """The node process: one request line in, one answer line out."""

    def __init__(self, process: subprocess.Popen[str]) -> None:
        self.process = process

    def ask(self, request: dict[str, Any]) -> dict[str, Any]:
        stdin, stdout = self.process.stdin, self.process.stdout
        assert stdin is not None and stdout is not None
        stdin.write(json.dumps(request) + "\n")
        stdin.flush()
        line = stdout.readline()
        assert line, f"the node oracle exited with {self.process.wait(5)}"
        answer: dict[str, Any] = json.loads(line)
        assert not str(answer.get("error", "")).startswith("crash"), answer["message"]
        return answer


@pytest.fixture(scope="module")
def oracle() -> Iterator[Oracle]:
    assert NODE is not None
    process = subprocess.Popen(
        [NODE, str(ORACLE)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, encoding="utf-8"
    )
    yield Oracle(process)
    pipes: list[IO[str] | None] = [process.stdin, process.stdout]
    for pipe in pipes:
        if pipe is not None:
            pipe.close()
    process.wait(10)


def lines_of(records: list[Any]) -> list[str]:
    return [encode(record).decode() for record in records]


def python_decode(line: str) -> dict[str, Any]:
    """What the Python codec makes of one storage line: its events' bytes, or its error class."""
    try:
        events = expand_records([decode_storage_line(line.encode())])
    except CodecError as exc:
        return {"ok": False, "error": type(exc).__name__, "message": str(exc)}
    return {"ok": True, "lines": lines_of(events)}


def same_outcome(js: dict[str, Any], python: dict[str, Any]) -> None:
    assert js["ok"] == python["ok"], (js, python)
    if python["ok"]:
        assert js["lines"] == python["lines"]
    else:
        assert js["error"] == python["error"], (js["message"], python["message"])


def check_session(oracle: Oracle, events: list[Event]) -> list[str]:
    """JS packs ``events`` to Python's bytes, and decodes each Python record to Python's events."""
    packed = lines_of(pack(events))
    assert oracle.ask({"op": "pack", "lines": lines_of(events)})["lines"] == packed
    answer = oracle.ask({"op": "decode", "lines": packed})
    for js, line in zip(answer["results"], packed, strict=True):
        same_outcome(js, python_decode(line))
    return packed


@settings(max_examples=150, deadline=None)
@given(st.one_of(batches(), sessions()))
def test_js_packs_and_decodes_random_sessions_like_python(oracle: Oracle, events: list[Event]) -> None:
    check_session(oracle, events)


def test_every_row_kind_name_presence_spelling_and_negative_dt(oracle: Oracle) -> None:
    events = [plain(0)]
    events += [text(1 + k, T0 - 7 * k, "t", index=0) for k in range(3)]  # negative dt
    events += [text(4 + k, T0, "f", index=0, turn=1.0) for k in range(3)]  # 1.0 is another block than 1
    events += [reasoning(7 + k, T0 + k, "r") for k in range(4)]
    events += [tool(11 + k, T0 + k, "{", name="bash") for k in range(3)]
    events += [tool(14 + k, T0 + k, "}") for k in range(3)]
    events += [text(17, -MAX_SAFE_INTEGER, "a"), text(18, MAX_SAFE_INTEGER, "b"), text(19, MAX_SAFE_INTEGER, "c")]
    packed = check_session(oracle, events)
    assert [json.loads(line)["type"] for line in packed] == [
        "turn/start",
        "text-chunks",
        "text-chunks",
        "reasoning-chunks",
        "tool-call-chunks",
        "tool-call-chunks",
        "assistant/chunk",
        "assistant/chunk",
        "assistant/chunk",
    ]
    assert '"turn":1.0' in packed[2] and '"dt":[-7,-7]' in packed[1]
    assert '"name":"bash"' in packed[4] and '"name"' not in packed[5]


@pytest.mark.parametrize("value", [v for v in REJECTIONS if v.id not in NON_JSON_REJECTIONS])
def test_the_malformed_row_table_fails_alike(oracle: Oracle, value: dict[str, Any]) -> None:
    line = encode(value).decode()
    python = python_decode(line)
    assert python["error"] == "RowFormatError"
    (js,) = oracle.ask({"op": "decode", "lines": [line]})["results"]
    assert (js["error"], js["message"]) == (python["error"], python["message"])


DELETE = object()
ROW_PATHS: list[tuple[Any, ...]] = [
    ("type",),
    ("seq0",),
    ("time0",),
    ("data",),
    ("extra",),
    ("data", "turn"),
    ("data", "step"),
    ("data", "index"),
    ("data", "dt"),
    ("data", "dt", 0),
    ("data", "members"),
    ("data", "members", 0),
    ("data", "id"),
    ("data", "name"),
    ("data", "extra"),
]
EVENT_PATHS: list[tuple[Any, ...]] = [
    ("type",),
    ("seq",),
    ("time",),
    ("data",),
    ("ignorable",),
    ("sourceEventSeqs",),
    ("sourceEventSeqs", 0),
    ("surfaceOp",),
    ("conversationOp",),
    ("conversationOp", "op"),
    ("conversationOp", "start"),
    ("conversationOp", "end"),
    ("conversationOp", "extra"),
    ("extra",),
]
EDGE_INTS = st.sampled_from([-1, 0, MAX_SAFE_INTEGER, MAX_SAFE_INTEGER + 1, -MAX_SAFE_INTEGER - 1, 2**64])
REPLACEMENTS = st.one_of(
    st.just(DELETE),
    EDGE_INTS,
    st.sampled_from([1.0, 0.5, -0.0, True, None, "append", "replace", "text-chunks", "", [], {}]),
    st.fixed_dictionaries({"op": st.just("replace"), "start": EDGE_INTS, "end": EDGE_INTS}),
    json_values(max_leaves=4),
)


def mutated(value: dict[str, Any], path: tuple[Any, ...], replacement: Any) -> dict[str, Any]:
    """``value`` with the member at ``path`` replaced, added or deleted; a path through a
    missing or non-container member leaves the value as it is."""
    out: Any = msgspec.json.decode(encode(value))
    target = out
    for key in path[:-1]:
        if key == "members":
            key = "args" if "args" in target else "texts"
        if not isinstance(target, dict | list) or (isinstance(target, dict) and key not in target):
            return out  # type: ignore[no-any-return]
        if isinstance(target, list) and not (0 <= key < len(target)):
            return out  # type: ignore[no-any-return]
        target = target[key]
    last = path[-1]
    if last == "members" and isinstance(target, dict):
        last = "args" if "args" in target else "texts"
    if isinstance(target, list):
        if target:
            target[0] = replacement if replacement is not DELETE else "x"
    elif isinstance(target, dict):
        if replacement is DELETE:
            target.pop(last, None)
        else:
            target[last] = replacement
    return out  # type: ignore[no-any-return]


@st.composite
def broken_records(draw: st.DrawFn) -> str:
    """One storage line of a packed session, with one field replaced, added or deleted."""
    records = pack(draw(sessions().filter(lambda events: len(events) > 0)))
    rows = [record for record in records if type(record) is not Event]
    prefer_rows = bool(rows) and draw(st.booleans())
    chosen = draw(st.sampled_from(rows if prefer_rows else records))
    record: dict[str, Any] = msgspec.json.decode(encode(chosen))
    is_row = record["type"].endswith("-chunks")
    if not is_row and draw(st.booleans()):
        record["conversationOp"] = {"op": "replace", "start": 1, "end": 2}
    path = draw(st.sampled_from(ROW_PATHS if is_row else EVENT_PATHS))
    return encode(mutated(record, path, draw(REPLACEMENTS))).decode()


@settings(max_examples=300, deadline=None)
@given(broken_records())
def test_broken_rows_and_events_decode_or_fail_alike(oracle: Oracle, line: str) -> None:
    (js,) = oracle.ask({"op": "decode", "lines": [line]})["results"]
    same_outcome(js, python_decode(line))


@settings(max_examples=200, deadline=None)
@given(json_values())
def test_json_values_reencode_to_msgspec_bytes(oracle: Oracle, value: Any) -> None:
    # A spelling is kept by the container that holds the number (README.md), so the value goes in a list.
    data = encode([value]).decode()
    (js,) = oracle.ask({"op": "json", "texts": [data]})["results"]
    assert js == {"ok": True, "text": data}


@settings(max_examples=200, deadline=None)
@given(st.lists(json_number_texts(), min_size=1, max_size=4))
def test_number_spellings_become_msgspec_canonical(oracle: Oracle, numbers: list[str]) -> None:
    texts = [f"[{number}]" for number in numbers]
    answers = oracle.ask({"op": "json", "texts": texts})["results"]
    for text_, js in zip(texts, answers, strict=True):
        try:
            python = encode(decode_json(text_)).decode()
        except CodecError as exc:
            assert (js["ok"], js["error"]) == (False, type(exc).__name__), text_
        else:
            assert js == {"ok": True, "text": python}, text_


@settings(max_examples=100, deadline=None)
@given(events=sessions(), data=st.data())
def test_js_expands_the_services_records_frames_to_their_events(
    oracle: Oracle, events: list[Event], data: st.DataObject
) -> None:
    if not events:
        return
    stored, at = [], 0
    for size in data.draw(layouts(len(events))):
        stored += stored_batch(events[at : at + size])
        at += size
    start = data.draw(st.integers(0, len(events) - 1))
    stop = data.draw(st.integers(start + 1, len(events)))
    frame = records_frame(stored, start, stop, "inc")
    answer = oracle.ask({"op": "records", "data": frame.split(b"\ndata: ")[1].rstrip(b"\n").decode()})
    assert answer == {"ok": True, "lines": lines_of(events[start:stop])}


class GoldenLine(msgspec.Struct):
    path: str
    status: int
    body: msgspec.Raw


def golden_pages() -> list[Any]:
    out = []
    for path in sorted((GOLDEN_DIR / "service").glob("*.pages.jsonl")):
        for line in path.read_bytes().splitlines():
            golden = msgspec.json.decode(line, type=GoldenLine)
            if not bytes(golden.body).startswith(b'{"sha256"'):
                name = f"{path.name.split('.')[0]}:{golden.path.split('/v1/sessions/')[1]}"
                out.append(pytest.param(golden, id=name))
    return out


def as_floats(line: str) -> Any:
    return json.loads(line, parse_int=float)


@pytest.mark.parametrize("golden", golden_pages())
def test_golden_pages_expand_to_python_events(oracle: Oracle, golden: GoldenLine) -> None:
    query = {name: int(values[0]) for name, values in parse_qs(urlsplit(golden.path).query).items()}
    through, before = query.get("through"), query.get("before")
    body = bytes(golden.body)
    python = lines_of(list(read_page(body, through=through, before=before).events()))
    answer = oracle.ask({"op": "page", "body": body.decode(), "through": through, "before": before})
    assert answer["lines"] == python
    # JSON.parse keeps values, not spellings: 3.0 reads as 3, and integers beyond 2^53 round.
    assert [as_floats(line) for line in answer["fast"]] == [as_floats(line) for line in python]
