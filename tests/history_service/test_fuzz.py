"""Contract fuzzing: schemathesis drives a real server (SQLite, token auth) from the OpenAPI document.

Every operation gets valid and invalid inputs (positive and negative generation), and
missing or wrong credentials; the seeded sessions are read through every read operation; and
the links create → append → page and follow are walked statefully. Every response must come
without a 5xx, with a status the document declares for its operation, a body and headers its
schemas accept, and, for valid input, without a refusal the document does not explain.

``make test`` runs `EXAMPLES` cases per operation; ``make fuzz`` sets ``HISTORY_FUZZ_EXAMPLES``
higher and lets Hypothesis pick new inputs each run.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from collections.abc import Iterator
from typing import Any, Final

import brotli
import httpx
import hypothesis
import pytest
import schemathesis
import zstandard
from hypothesis import HealthCheck

from history_service import openapi
from testing.seeding import SCENARIOS
from testing.servers import ServerProcess

# 100 cases per operation (Hypothesis' default), valid and invalid, plus schemathesis' boundary
# cases and 20 stateful scenarios of up to 6 calls: about 15 s of `make test` on 2 cores,
# seeding included, against a suite budget of 20 min. That meets nearly every status each
# operation declares, and it is the same cases every run (derandomized), so CI is repeatable.
# `make fuzz` runs 1000 per operation, with new inputs each run.
EXAMPLES: Final = int(os.environ.get("HISTORY_FUZZ_EXAMPLES", "100"))
DEEP: Final = "HISTORY_FUZZ_EXAMPLES" in os.environ
TOKEN: Final = "fuzz-token"
PRINCIPAL: Final = "fuzzer"
Case = schemathesis.Case[Any]
CREDENTIALS: Final = {"Authorization": f"Bearer {TOKEN}", "X-Principal": PRINCIPAL}
FOLLOWS: Final = ["followSession", "followChildSession"]
OPERATIONS: Final = {
    operation["operationId"]: (path, method.upper())
    for path, item in openapi.document()["paths"].items()
    for method, operation in item.items()
}

CONFIG: Final = schemathesis.Config.from_dict(
    {
        # The credentials come from `auth` alone: were they generated too, a case whose invalid part
        # is a missing credential would be sent with the configured one, and pass for a bug.
        "generation": {
            "mode": "all",
            "max-examples": EXAMPLES,
            "deterministic": not DEEP,
            "with-security-parameters": False,
        },
        "auth": {"openapi": {"serviceToken": {"bearer": TOKEN}, "principal": {"api_key": PRINCIPAL}}},
        "request-timeout": 10,
        "operations": [
            # A follow stream never ends: a fresh one is read to its snapshot, any other for 2 s at most
            # (the server pings every second, so the read wakes up to see the time is up).
            {"include-operation-id": FOLLOWS, "max-stream-events": 1, "request-timeout": 2},
            # A cursor is opaque: only one the service returned is valid, which no schema can say.
            {
                "include-operation-id": "listSessions",
                "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400"]}},
            },
            # The same for a search's cursor; and a q with no letter or digit, or too many words, which no
            # schema can say either (§14.1).
            {
                "include-operation-id": "search",
                "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400"]}},
            },
            # The same, under a session id the fuzzer makes up: an unknown one is 404.
            {
                "include-operation-id": "listSubagents",
                "checks": {"positive_data_acceptance": {"expected-statuses": ["2xx", "400", "404"]}},
            },
        ],
    }
)
schema = schemathesis.openapi.from_dict(openapi.document(), config=CONFIG)

# Sessions the seeder writes, so reads meet real pages: packed rows, tool calls, replaced turns.
SEEDED: Final = {
    name: body if name == "explicit" else {**body, "sessionId": f"seeded-{name}"} for name, body in SCENARIOS.items()
}
SESSIONS: Final = {
    name: body["header"]["id"] if "header" in body else body["sessionId"] for name, body in SEEDED.items()
}
PARENT: Final = SESSIONS["subagent"]
CHILDREN: Final = [
    ({"parent": PARENT, "child": f"{PARENT}.child-1"}, 200),
    ({"parent": PARENT, "child": f"{PARENT}.child-2"}, 200),
    ({"parent": f"{PARENT}.child-1", "child": f"{PARENT}.child-1.grandchild"}, 200),
    ({"parent": PARENT, "child": f"{PARENT}.child-1.grandchild"}, 403),  # not_a_direct_child
]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerProcess]:
    env = {"HISTORY_AUTH": "token", "HISTORY_SERVICE_TOKENS": TOKEN, "HISTORY_ENABLE_TEST_SEED": "1"}
    process = ServerProcess(f"sqlite:///{tmp_path_factory.mktemp('fuzz') / 'fuzz.db'}", env=env)
    process.start()
    try:
        for body in SEEDED.values():
            response = httpx.post(f"{process.url}/v1/test-only/seed", json=body, headers=CREDENTIALS, timeout=60)
            assert response.status_code == 201, response.text
        yield process
        # A failure after a stream's status line is an error frame, not a 5xx: the log tells.
        assert "Traceback" not in process.stderr(), process.stderr()
    finally:
        process.stop()


# Bodies sent with a Content-Encoding are coded with it, so a valid case is one the server can read.
CODERS: Final = {"gzip": gzip.compress, "br": brotli.compress, "zstd": zstandard.ZstdCompressor().compress}
CODINGS: Final = ("", "identity", *CODERS)


def _header(case: Case, name: str) -> str | None:
    return case.headers.get(name) if case.headers else None


def call_kwargs(case: Case, server: ServerProcess) -> dict[str, Any]:
    """Where to send ``case``, and its body coded as its ``Content-Encoding`` says."""
    kwargs: dict[str, Any] = {"base_url": server.url}
    coder = CODERS.get(str(_header(case, "Content-Encoding")).strip().lower())
    if coder is not None and case.media_type == "application/json" and isinstance(case.body, (dict, list)):
        kwargs["data"] = coder(json.dumps(case.body).encode())
    return kwargs


@schema.hook
def filter_failure(context: Any, failure: Any, case: Case, response: Any) -> bool:
    """Keep every failure but those the document cannot rule out, and the known server bugs below."""
    return not any(excused(failure, case, response) for excused in UNSTATABLE)


def _refused(failure: Any, response: Any, code: str, pattern: str) -> bool:
    """A valid case refused with ``code`` and a message matching ``pattern``."""
    if type(failure).__name__ != "RejectedPositiveData" or not response.content.startswith(b"{"):
        return False  # a refusal under /ds is plain text (§13.1): never one of these excuses
    error = json.loads(response.content).get("error", {})
    return bool(error.get("code") == code and re.search(pattern, error.get("message", "")))


def _accepted(failure: Any, component: str) -> bool:
    """An invalid case accepted, whose invalid part is ``component``."""
    return type(failure).__name__ == "AcceptedNegativeData" and f"Invalid component: {component}" in failure.message


def _beyond_the_head(failure: Any, case: Case, response: Any) -> bool:
    # §4.1: through is at most the head, which only the session knows.
    return _refused(failure, response, "invalid_parameter", r"^through \d+ is beyond the head")


def _integral_float(failure: Any, case: Case, response: Any) -> bool:
    # §1.2: 42.0 is an integer to JSON Schema, and a float to the protocol, which keeps the two apart.
    return any(
        _refused(failure, response, code, r"expected `int`, got `float`")
        for code in ("invalid_header", "invalid_event")
    )


def _between_fields(failure: Any, case: Case, response: Any) -> bool:
    # §3.4: a row's dt has one entry fewer than its members, and every member's running time
    # (time0 plus the dt before it) is a safe integer; §2.1: a replace range has start <= end.
    return _refused(failure, response, "invalid_event", r"dt has \d+ entries|running time of member|is before start")


def _http_leniency(failure: Any, case: Case, response: Any) -> bool:
    # The document names the canonical values; HTTP reads a coding in any case, and an empty
    # header as an absent one (RFC 9110 §8.4.1, §5.6.1), and so does the server. Any other
    # invalid part of such a case is refused, so an accepted one was accepted for this.
    if type(failure).__name__ != "AcceptedNegativeData":
        return False
    coding, resume = _header(case, "Content-Encoding"), _header(case, "Last-Event-ID")
    return (coding is not None and coding not in CODINGS[1:] and coding.strip().lower() in CODINGS) or resume == ""


# Sessions the fuzzer created with an expiry (§6.5): once it passes they answer as unknown ones.
EXPIRING: Final[set[str]] = set()


@schema.hook
def after_call(context: Any, case: Case, response: Any) -> None:
    created = case.operation.method.upper() == "POST" and case.operation.path == "/v1/sessions"
    if created and response.status_code == 201:
        body = case.body if isinstance(case.body, dict) else {}
        if "ttlMs" in (case.query or {}) or "expiresAt" in body:
            EXPIRING.add(json.loads(response.content)["id"])


def _expired(failure: Any, case: Case, response: Any) -> bool:
    # §6.5: a session created to expire answers as an unknown one from then on.
    named = (case.path_parameters or {}).values()
    return type(failure).__name__ == "EnsureResourceAvailability" and any(value in EXPIRING for value in named)


def _expiry_in_time(failure: Any, case: Case, response: Any) -> bool:
    # §6.1: an expiresAt is later than the service's clock, and never given with ttlMs.
    return _refused(failure, response, "invalid_header", r"is not in the future|not both")


# Durable Streams refusals (§13.2) of rules between headers, between the body and the stream's
# content type, or on the stream's state; and of a header's own format, which the document
# states as a pattern that schemathesis does not hold its header values to. Each message
# names its rule.
_STREAM_RULES: Final = re.compile(
    r"not both|needs Stream-Forked-From|not valid JSON|an empty array|beyond the source|sub-offset|"
    r"fork offset|needs a body|needs a Content-Type|needs an offset|not an offset|is a whole number|"
    r"RFC 3339|Producer-Id|Producer-Epoch|Producer-Seq|a stream name is|Stream-Closed is"
)


def _stream_rule(failure: Any, case: Case, response: Any) -> bool:
    if type(failure).__name__ != "RejectedPositiveData" or not case.operation.path.startswith("/ds/"):
        return False
    if response.status_code == 410:
        return True  # the stream's state: deleted, and kept for the forks the fuzzer made of it
    return response.status_code == 400 and _STREAM_RULES.search(response.content.decode(errors="replace")) is not None


# What no JSON Schema can state: a refusal that depends on the session's state, on the clock or
# on a rule between fields, and the leniency HTTP asks of a server.
UNSTATABLE: Final = [
    _beyond_the_head,
    _integral_float,
    _between_fields,
    _http_leniency,
    _expired,
    _expiry_in_time,
    _stream_rule,
]


@schema.parametrize()
# These settings replace schemathesis' own, so determinism is asked for here too: the same
# cases every `make test` run, whatever ran before, and no example database to replay.
@hypothesis.settings(deadline=None, suppress_health_check=list(HealthCheck), derandomize=not DEEP, database=None)
def test_every_operation_keeps_its_contract(case: Case, server: ServerProcess) -> None:
    case.call_and_validate(**call_kwargs(case, server))


def _seeded_cases() -> Iterator[Any]:
    for name, session_id in SESSIONS.items():
        session = {"id": session_id}
        for operation in ("getSession", "readPage", "followSession"):
            yield pytest.param(operation, session, {}, 200, id=f"{operation}-{name}")
        # Unpacked, dsh-synthetic's one long message is a 65 MB page: its raw page ends early.
        raw = {"expand": "raw", "through": 3} if name == "dsh-synthetic" else {"expand": "raw"}
        yield pytest.param("readPage", session, raw, 200, id=f"readPage-raw-{name}")
        yield pytest.param("readPage", session, {"through": 3, "maxMessages": 1}, 200, id=f"readPage-through-{name}")
        yield pytest.param("followSession", session, {"after": -1}, 200, id=f"followSession-resume-{name}")
        yield pytest.param("followSession", session, {"after": 10**9}, 200, id=f"followSession-ahead-{name}")
    yield pytest.param("getSession", {"id": f"{PARENT}.child-1"}, {}, 403, id="getSession-child")  # subagent_child
    for i, (address, status) in enumerate(CHILDREN):
        for operation in ("getChildSession", "readChildPage", "followChildSession"):
            yield pytest.param(operation, address, {}, status, id=f"{operation}-{i}")


@pytest.mark.parametrize(("operation_id", "path", "query", "status"), list(_seeded_cases()))
def test_seeded_sessions_keep_the_contract(
    operation_id: str, path: dict[str, str], query: dict[str, Any], status: int, server: ServerProcess
) -> None:
    path_template, method = OPERATIONS[operation_id]
    case = schema[path_template][method].Case(path_parameters=path, query=query)
    response = case.call_and_validate(headers=CREDENTIALS, **call_kwargs(case, server))
    assert response.status_code == status


# The operations that need no credentials, and their answer: the root redirects to the viewer.
PUBLIC: Final = {"healthz": 200, "readyz": 200, "openapi": 200, "root": 308}
WRONG: Final = {"none": {}, "wrong-token": {"Authorization": "Bearer nope", "X-Principal": PRINCIPAL}}


@pytest.mark.parametrize("credentials", list(WRONG), ids=list(WRONG))
@pytest.mark.parametrize("operation_id", list(OPERATIONS))
def test_missing_or_wrong_credentials_are_answered_as_declared(
    operation_id: str, credentials: str, server: ServerProcess
) -> None:
    path_template, method = OPERATIONS[operation_id]
    names = re.findall(r"\{(\w+)\}", path_template)
    case = schema[path_template][method].Case(path_parameters={name: PARENT for name in names})
    response = case.call_and_validate(headers=WRONG[credentials], **call_kwargs(case, server))
    assert response.status_code == PUBLIC.get(operation_id, 401)


def test_the_links_keep_the_contract(server: ServerProcess) -> None:
    """Create, then append, read and follow what was created, as the document's links lead."""

    found: list[BaseException] = []

    class Machine(schema.as_state_machine()):  # type: ignore[misc]
        def get_call_kwargs(self, case: Case) -> dict[str, Any]:
            return call_kwargs(case, server)

        def validate_response(self, response: Any, case: Case, **kwargs: Any) -> None:
            try:
                super().validate_response(response, case, **kwargs)
            except Exception as exc:
                found.append(exc)
                raise

    settings = hypothesis.settings(
        max_examples=max(EXAMPLES // 5, 5),
        stateful_step_count=6,
        deadline=None,
        derandomize=not DEEP,
        suppress_health_check=list(HealthCheck),
    )
    try:
        Machine.run(settings=settings)
    except hypothesis.errors.Flaky:
        # The server keeps what earlier scenarios wrote, so a replay may take other links than the
        # run it repeats: what counts is the failure that run found, if it found one.
        if found:
            raise found[0] from None


# Server bugs this suite found, now fixed; each test keeps its bug from coming back.


def test_a_method_a_path_does_not_have_is_405_with_allow(server: ServerProcess) -> None:
    response = httpx.request("DELETE", f"{server.url}/v1/sessions", timeout=10)
    assert response.status_code == 405
    assert set(response.headers.get("Allow", "").replace(" ", "").split(",")) >= {"GET", "POST"}


def test_follow_refuses_a_bad_after_even_beside_last_event_id(server: ServerProcess) -> None:
    headers = {**CREDENTIALS, "Last-Event-ID": "-1"}
    url = f"{server.url}/v1/sessions/{PARENT}/follow?after=oops"
    with httpx.stream("GET", url, headers=headers, timeout=10) as response:
        assert response.status_code == 400


def test_an_append_refuses_a_replace_object_without_its_op(server: ServerProcess) -> None:
    httpx.post(f"{server.url}/v1/sessions", json={"id": "no-op", "createdAt": 0}, headers=CREDENTIALS, timeout=10)
    event = {"type": "user/message", "seq": 0, "time": 0, "data": {}, "conversationOp": {"start": 0, "end": 0}}
    url = f"{server.url}/v1/sessions/no-op/events"
    response = httpx.post(url, json={"events": [event]}, headers=CREDENTIALS, timeout=10)
    assert response.status_code == 422
