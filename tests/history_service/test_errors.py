"""Every error of every package has one answer, from one table, in the shape docs/protocol.md §11 gives."""

from __future__ import annotations

import ast
import io
import logging
import re
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

import codec.errors
import history_service.errors
import persistence.errors
from codec.errors import (
    BatchTooLargeError,
    CodecError,
    EventValidationError,
    InvalidJsonError,
    RecordFormatError,
    RowFormatError,
    SessionIdError,
)
from history_service.answers import ERRORS, EXCEPTION_HANDLERS, answer_for
from history_service.app import create_app
from history_service.errors import (
    BodyTooLarge,
    CommandError,
    ContentEncodingError,
    ContentTooLargeError,
    DuplicateHeader,
    HistoryServiceError,
    InvalidAck,
    InvalidBatch,
    InvalidEvent,
    InvalidHeader,
    InvalidParameter,
    InvalidParent,
    InvalidSeed,
    NoAcceptableCoding,
    NoAcceptableType,
    NoPendingWork,
    NotADirectChild,
    NotJson,
    NotOwner,
    Overloaded,
    RequestError,
    SubagentChild,
    SubscriptionBodyTooLarge,
    SubscriptionExists,
    SubscriptionInvalid,
    SubscriptionLimit,
    SubscriptionNotFound,
    SubscriptionRefused,
    ThroughBeyondHead,
    Unauthenticated,
    UnsupportedEncoding,
    ViewerUnavailable,
    WakeClaimed,
    WakeFenced,
    WakeTokenExpired,
    WakeTokenInvalid,
    WebhookUrlRejected,
)
from history_service.logs import LogHandler, Tracebacks
from history_service.settings import Settings
from persistence import MemoryStore
from persistence.errors import (
    CorruptLogError,
    InvalidSessionIdError,
    ProducerFencedError,
    ProducerGapError,
    SchemaVersionError,
    SearchQueryError,
    SearchUnsupportedError,
    SeqConflictError,
    SessionClosedError,
    SessionExistsError,
    SessionNotFoundError,
    StoreError,
    StoreNotFoundError,
    StreamBodyTooLargeError,
    StreamClosedError,
    StreamConflictError,
    StreamError,
    StreamGoneError,
    StreamNotFoundError,
    StreamRequestError,
    StreamValueTooLargeError,
)
from testing.asgi import serving

ROOT = Path(__file__).resolve().parents[2]
BASES: dict[str, type[Exception]] = {
    "codec": CodecError,
    "persistence": StoreError,
    "history_service": HistoryServiceError,
}

# The classes answered as an ancestor is, on purpose; every other class has an entry of its own.
INHERITED: dict[type[Exception], type[Exception]] = {
    # Raised only as one of its subclasses.
    RequestError: HistoryServiceError,
    # Never answered over HTTP: the subscriptions answer a bad callback token with their own
    # 401, and a command's failure is a line on stderr.
    CommandError: HistoryServiceError,
    # Placed by history_service.requests as a header's, the batch's or an item's; unplaced, an
    # internal failure on the service's own data.
    EventValidationError: CodecError,
    RowFormatError: CodecError,
    RecordFormatError: CodecError,
    # The store cannot serve: 503 store_unavailable.
    StoreNotFoundError: StoreError,
    SchemaVersionError: StoreError,
    CorruptLogError: StoreError,
}

# A path, a driver's words: what a logged error's message must never carry to the caller.
SECRET = "/srv/history/db: disk I/O error"

EXAMPLES: dict[type[Exception], Exception] = {
    HistoryServiceError: HistoryServiceError(SECRET),
    InvalidParameter: InvalidParameter("limit must be an integer from 1 to 1000, got '0'"),
    DuplicateHeader: DuplicateHeader("the request carries 2 X-Principal headers; send one"),
    Unauthenticated: Unauthenticated("missing or invalid service token"),
    NoAcceptableCoding: NoAcceptableCoding("no acceptable content coding; identity is refused"),
    NoAcceptableType: NoAcceptableType("Accept refuses both types a session reads as"),
    NotJson: NotJson("request bodies must be sent as Content-Type: application/json"),
    UnsupportedEncoding: UnsupportedEncoding("Content-Encoding 'lz4' is not supported; use zstd, br or gzip"),
    BodyTooLarge: BodyTooLarge("the body exceeds 100 bytes"),
    InvalidHeader: InvalidHeader("header.createdAt: expected `int`"),
    InvalidBatch: InvalidBatch("events must not be empty"),
    InvalidEvent: InvalidEvent("events[1].time: expected `int`", index=1),
    InvalidSeed: InvalidSeed("the explicit scenario needs header and events"),
    ContentEncodingError: ContentEncodingError("corrupt gzip body: invalid stored block lengths"),
    ContentTooLargeError: ContentTooLargeError("gzip body decodes to more than 100 bytes"),
    NotOwner: NotOwner("s"),
    SubagentChild: SubagentChild("c", parent="p"),
    NotADirectChild: NotADirectChild("g", parent="p"),
    InvalidParent: InvalidParent("p"),
    ThroughBeyondHead: ThroughBeyondHead(9, 4),
    Overloaded: Overloaded("more than 33554432 bytes of pages and snapshots are in flight"),
    ViewerUnavailable: ViewerUnavailable(),
    CodecError: CodecError(SECRET),
    InvalidJsonError: InvalidJsonError("invalid JSON: unexpected character"),
    SessionIdError: SessionIdError("id: must not be empty"),
    BatchTooLargeError: BatchTooLargeError("the batch holds more than 10 logical events"),
    StoreError: StoreError(SECRET),
    SessionNotFoundError: SessionNotFoundError("s"),
    SessionExistsError: SessionExistsError("s"),
    SeqConflictError: SeqConflictError(
        "batch starts at seq 9 but the session head is 4; expected 5", session_id="s", head_seq=4
    ),
    InvalidSessionIdError: InvalidSessionIdError("a session id must not be empty"),
    SearchQueryError: SearchQueryError("q holds no word to search for: give letters or digits"),
    SearchUnsupportedError: SearchUnsupportedError("JsonlStore keeps no search index"),
    SessionClosedError: SessionClosedError("s", head_seq=4),
    StreamError: StreamError("the stream refuses the request"),
    StreamRequestError: StreamRequestError("Stream-TTL is a whole number of seconds"),
    StreamValueTooLargeError: StreamValueTooLargeError("a value of a JSON stream is at most 1048575 bytes"),
    StreamNotFoundError: StreamNotFoundError("no stream 'a'"),
    StreamGoneError: StreamGoneError("stream 'a' was deleted"),
    StreamConflictError: StreamConflictError("the stream exists with another configuration"),
    StreamBodyTooLargeError: StreamBodyTooLargeError("the body holds more than 2000000 JSON values"),
    StreamClosedError: StreamClosedError("stream 'a' is closed", tail=5),
    ProducerFencedError: ProducerFencedError("producer epoch 0 is stale", epoch=1),
    ProducerGapError: ProducerGapError("producer seq skips ahead", expected=1, received=3),
    SubscriptionRefused: SubscriptionRefused(SECRET),
    SubscriptionNotFound: SubscriptionNotFound("Subscription not found"),
    SubscriptionInvalid: SubscriptionInvalid("lease_ttl_ms must be an integer from 1000 to 600000"),
    SubscriptionBodyTooLarge: SubscriptionBodyTooLarge("the body exceeds 100 bytes"),
    WebhookUrlRejected: WebhookUrlRejected("webhook.url must use https"),
    WakeTokenInvalid: WakeTokenInvalid("Token invalid"),
    WakeTokenExpired: WakeTokenExpired("Token expired"),
    WakeFenced: WakeFenced("Wake generation is stale"),
    SubscriptionExists: SubscriptionExists("Subscription already exists with another configuration"),
    SubscriptionLimit: SubscriptionLimit("too many subscriptions: delete one first"),
    WakeClaimed: WakeClaimed("the wake is held", holder="w1", generation=2),
    NoPendingWork: NoPendingWork("Subscription has no pending work"),
    InvalidAck: InvalidAck("Ack offset is beyond stream tail"),
}

# The codes whose bodies carry fields besides code and message (docs/protocol.md §11.1).
FIELDS: dict[str, dict[str, Any]] = {
    "seq_conflict": {"headSeq": 4},
    "session_closed": {"headSeq": 4},
    "invalid_event": {"index": 1},
}

# Codes outside the table of §11, and the document that gives them instead.
DOCUMENTED_ELSEWHERE = {"viewer_unavailable": "docs/deploy.md"}


def subclasses(cls: type[Exception]) -> Iterator[type[Exception]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from subclasses(sub)


def error_classes() -> list[type[Exception]]:
    """Every error class of the three packages: the subclasses of each package's base, at every depth."""
    found = {
        cls
        for package, base in BASES.items()
        for cls in subclasses(base)
        if cls.__module__ == package or cls.__module__.startswith(package + ".")
    }
    return sorted(found, key=lambda cls: (cls.__module__, cls.__qualname__))


def protocol_codes() -> dict[str, int]:
    """The code and status of each row of docs/protocol.md §11.1's table."""
    text = (ROOT / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = text[text.index("### 11.1 Error bodies") : text.index("### 11.2")]
    return {code: int(status) for status, code in re.findall(r"^\| (\d{3}) \| `([a-z_]+)` \|", section, re.M)}


def test_the_walk_finds_every_error_class_the_error_modules_define() -> None:
    walked = set(error_classes())
    for module in (codec.errors, persistence.errors, history_service.errors):
        defined = {
            value
            for value in vars(module).values()
            if isinstance(value, type) and issubclass(value, Exception) and value.__module__ == module.__name__
        }
        assert defined, module.__name__
        assert defined <= walked, f"{module.__name__} defines errors outside its package's tree"


@pytest.mark.parametrize("error", error_classes(), ids=lambda cls: cls.__qualname__)
def test_every_error_class_has_an_answer_of_its_own_or_an_intended_one(error: type[Exception]) -> None:
    answer = answer_for(error)
    assert answer is not None
    if error in ERRORS:
        assert error not in INHERITED
    else:
        assert error in INHERITED, f"{error.__qualname__} has no answer of its own; map it in ERRORS"
        assert answer is ERRORS[INHERITED[error]]
    assert 400 <= answer.status <= 599
    assert re.fullmatch(r"[a-z]+(_[a-z]+)*", answer.code)


def test_every_answer_is_the_status_the_protocol_gives_its_code() -> None:
    documented = protocol_codes()
    assert len(documented) >= 25
    for error, answer in ERRORS.items():
        if answer.code in documented:
            assert answer.status == documented[answer.code], error.__qualname__
        else:
            where = DOCUMENTED_ELSEWHERE[answer.code]
            assert f"{answer.status} `{answer.code}`" in (ROOT / where).read_text(encoding="utf-8")


def test_every_code_of_the_protocol_has_an_answer() -> None:
    routing = {"not_found", "method_not_allowed"}  # Starlette's own, answered by the HTTPException entry
    assert set(protocol_codes()) | set(DOCUMENTED_ELSEWHERE) == {answer.code for answer in ERRORS.values()} | routing


def test_the_app_hands_every_mapped_error_to_the_table() -> None:
    app = create_app(Settings(), store=MemoryStore())
    assert app.exception_handlers == dict(EXCEPTION_HANDLERS)
    assert set(ERRORS) <= set(app.exception_handlers)


def raising(exc: BaseException) -> Starlette:
    async def endpoint(request: Request) -> Response:
        raise exc

    return Starlette(routes=[Route("/", endpoint, methods=["GET"])], exception_handlers=EXCEPTION_HANDLERS)


async def answered(exc: BaseException) -> httpx.Response:
    transport = httpx.ASGITransport(app=raising(exc), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        return await client.get("/")


def test_every_mapping_has_an_example() -> None:
    assert set(EXAMPLES) == set(ERRORS)
    assert all(type(example) is error for error, example in EXAMPLES.items())


@pytest.mark.anyio
@pytest.mark.parametrize("error", list(ERRORS), ids=lambda cls: cls.__qualname__)
async def test_an_error_is_answered_with_its_status_code_message_and_fields(
    error: type[Exception], caplog: pytest.LogCaptureFixture
) -> None:
    answer = ERRORS[error]
    with caplog.at_level(logging.ERROR, logger="history_service"):
        response = await answered(EXAMPLES[error])
    assert response.status_code == answer.status
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert list(body) == ["error"]
    assert body["error"] == {"code": answer.code, "message": body["error"]["message"], **FIELDS.get(answer.code, {})}
    message = body["error"]["message"]
    assert isinstance(message, str) and message
    if answer.logged:
        # The caller learns that it failed; the log, not the body, says what failed.
        assert SECRET not in response.text and "/" not in message
        assert SECRET in caplog.text
    else:
        assert caplog.text == ""


@pytest.mark.anyio
async def test_another_principals_session_is_answered_as_an_unknown_one() -> None:
    hidden, unknown = await answered(NotOwner("s")), await answered(SessionNotFoundError("s"))
    assert (hidden.status_code, hidden.json()) == (unknown.status_code, unknown.json())
    assert hidden.json()["error"]["message"] == "no session 's'"


@pytest.mark.anyio
async def test_a_bad_credential_is_answered_with_a_bearer_challenge() -> None:
    response = await answered(Unauthenticated("missing or invalid service token"))
    assert response.headers["www-authenticate"] == "Bearer"


@pytest.mark.anyio
async def test_a_subagent_child_is_answered_with_its_address_through_its_parent() -> None:
    response = await answered(SubagentChild("c", parent="p"))
    assert "/v1/sessions/p/subagents/c" in response.json()["error"]["message"]


@pytest.mark.anyio
async def test_router_errors_and_unexpected_failures_have_codes_too(caplog: pytest.LogCaptureFixture) -> None:
    transport = httpx.ASGITransport(app=raising(RuntimeError(SECRET)), raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        missing, wrong_method = await client.get("/nowhere"), await client.post("/")
        with caplog.at_level(logging.ERROR, logger="history_service"):
            failed = await client.get("/")
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "not_found")
    assert (wrong_method.status_code, wrong_method.json()["error"]["code"]) == (405, "method_not_allowed")
    assert failed.status_code == 500
    assert failed.json()["error"] == {"code": "internal", "message": "internal server error"}
    assert SECRET in caplog.text


class FailingStore(MemoryStore):
    """A memory store that fails, as a lost database connection would, to read the sessions in ``failing``.

    Only their records fail to read while their rows still read if ``records_only`` is set.
    """

    def __init__(self) -> None:
        super().__init__()
        self.failing: set[str] = set()
        self.records_only = False

    async def get_session(self, session_id: str) -> Any:
        if session_id in self.failing and not self.records_only:
            raise StoreError(f"{SECRET} reading {session_id}")
        return await super().get_session(session_id)

    async def read_stored(self, session_id: str, from_seq: int, to_seq: int) -> Any:
        if session_id in self.failing:
            raise StoreError(f"{SECRET} reading {session_id}")
        return await super().read_stored(session_id, from_seq, to_seq)


@pytest.fixture
async def failing() -> AsyncIterator[tuple[httpx.AsyncClient, FailingStore]]:
    store = FailingStore()
    async with serving(create_app(Settings(enable_test_seed=True), store=store)) as client:
        response = await client.post("/v1/test-only/seed", json={"scenario": "subagent", "sessionId": "p"})
        assert response.status_code == 201
        yield client, store


@pytest.mark.anyio
@pytest.mark.parametrize(
    "address",
    [
        "/v1/sessions/p/subagents/p.child-1",
        "/v1/sessions/p/subagents/p.child-1/page",
        "/v1/sessions/p/subagents/p.child-1/follow",
        "/v1/sessions/p.child-1/subagents/p.child-1.grandchild/page",
    ],
)
async def test_a_store_failure_reading_a_child_is_503_like_every_other_read(
    failing: tuple[httpx.AsyncClient, FailingStore], address: str, caplog: pytest.LogCaptureFixture
) -> None:
    client, store = failing
    store.failing = {"p.child-1", "p.child-1.grandchild"}
    with caplog.at_level(logging.ERROR, logger="history_service"):
        response = await client.get(address)
    assert response.status_code == 503 and response.json()["error"]["code"] == "store_unavailable"
    assert SECRET not in response.text and SECRET in caplog.text


@pytest.mark.anyio
async def test_a_store_failure_once_a_follow_stream_is_open_ends_it_with_an_error_frame(
    failing: tuple[httpx.AsyncClient, FailingStore], caplog: pytest.LogCaptureFixture
) -> None:
    client, store = failing
    # Access is checked before the stream opens; the snapshot's read of records then fails inside it.
    store.failing, store.records_only = {"p"}, True
    with caplog.at_level(logging.ERROR, logger="history_service"):
        response = await client.get("/v1/sessions/p/follow")
    assert response.status_code == 200
    assert response.text.endswith('event: error\ndata: {"code":"store_unavailable"}\n\n')
    assert SECRET not in response.text and SECRET in caplog.text


# Only the edge picks a status: errors.py's table (and requests.py's request errors, which it maps).
EDGE = {"answers.py"}
ERROR_BODY_NAMES = {"ApiError", "HTTPException", "error_response", "JSONResponse"}


def _callee(call: ast.Call) -> str:
    func = call.func
    return func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""


def _status(node: ast.expr) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int and 400 <= node.value <= 599:
        return node.value
    return None


def status_literals(tree: ast.AST) -> list[int]:
    """Error statuses a module picks: 400 to 599 as ``status_code=``, or passed to a raised error or a response."""
    raised = {id(node.exc) for node in ast.walk(tree) if isinstance(node, ast.Raise) and node.exc is not None}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        if id(node) in raised or _callee(node).endswith("Response") or _callee(node) == "_json":
            args = [*node.args, *(keyword.value for keyword in node.keywords)]
        else:
            args = [keyword.value for keyword in node.keywords if keyword.arg in ("status", "status_code")]
        found += [status for arg in args if (status := _status(arg)) is not None]
    return found


def test_no_module_but_the_edge_picks_an_error_status_or_builds_an_error_body() -> None:
    offenders: dict[str, list[object]] = {}
    for path in sorted((ROOT / "history_service").glob("*.py")):
        if path.name in EDGE:
            continue
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        names = sorted({node.id for node in ast.walk(tree) if isinstance(node, ast.Name)} & ERROR_BODY_NAMES)
        statuses: list[object] = list(status_literals(tree))
        if path.name in ("endpoints.py", "routes.py"):
            # readyz answers a probe, not an error: 503 with its own body while follow cannot see every append.
            # The route table declares that answer for the OpenAPI document.
            statuses = [status for status in statuses if status != 503]
        if names or statuses:
            offenders[path.name] = [*names, *statuses]
    assert offenders == {}


def test_the_status_scan_sees_a_status_where_it_would_be_picked() -> None:
    assert status_literals(ast.parse("raise Problem(404, 'session_not_found')")) == [404]
    assert status_literals(ast.parse("Response(b'', status_code=413)")) == [413]
    assert status_literals(ast.parse("JSONResponse({}, 422)")) == [422]
    assert status_literals(ast.parse("store.list_sessions(owner, limit=min(500, left))")) == []


class OutageStore(MemoryStore):
    """A store whose database is down: every read fails as the driver's refused connection."""

    async def get_session(self, session_id: str) -> Any:
        try:
            raise ConnectionRefusedError(f"{SECRET}: connection refused")
        except ConnectionRefusedError as exc:
            raise StoreError(f"store unavailable: {exc}") from exc


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


@pytest.mark.anyio
async def test_an_outage_logs_one_line_per_failed_request_and_a_traceback_per_window() -> None:
    """R7: 646 identical store failures logged 5 MB of tracebacks; now the first, then a count a window."""
    clock = Clock()
    buffer = io.StringIO()
    handler = LogHandler(Settings(log_format="text"), buffer)
    root = logging.getLogger()
    previous = root.level
    root.addHandler(handler)
    root.setLevel(logging.INFO)
    try:
        app = create_app(Settings(), store=OutageStore(), tracebacks=Tracebacks(window=10, clock=clock))
        async with serving(app) as client:
            for n in range(30):
                if n == 20:
                    clock.now += 10
                response = await client.get("/v1/sessions/s/page", headers={"X-Request-ID": f"r-{n}"})
                assert response.status_code == 503
    finally:
        root.removeHandler(handler)
        root.setLevel(previous)
    lines = [line for line in buffer.getvalue().splitlines() if line.split(" ")[2].startswith("history_service")]
    errors = [line for line in lines if " ERROR history_service.errors " in line]
    assert len(lines) == len(errors) + 30, "an error line and an access line per request, and nothing else"
    shown = [n for n, line in enumerate(errors) if "Traceback (most recent call last)" in line]
    counts = [n for n, line in enumerate(errors) if "repeated" in line]
    assert shown == [0, 21] and counts == [20, 31]
    assert "StoreError from ConnectionRefusedError repeated 19 times in the 10 s after its traceback" in errors[20]
    assert "repeated 9 times" in errors[31]
    per_request = [line for line in errors if "store_unavailable on GET /v1/sessions/s/page" in line]
    assert [line.split("[", 1)[1].split("]", 1)[0] for line in per_request] == [f"r-{n}" for n in range(30)]
    assert all(SECRET in line for line in per_request)
