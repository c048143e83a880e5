"""``GET /metrics``: every family after a mix of traffic, read back with prometheus-client's own parser."""

from __future__ import annotations

import os
import signal
import struct
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import anyio
import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.multiprocess import MultiProcessCollector
from prometheus_client.parser import text_string_to_metric_families
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from codec import Event, encode
from history_service.app import create_app
from history_service.edge import Edge
from history_service.metrics import PrometheusMetrics
from history_service.settings import ServerSettings, Settings
from persistence import MemoryStore, PageRead, StoreError
from testing.asgi import serving
from testing.postgres import PG_URL, empty_postgres
from testing.servers import ServerProcess, free_port, serve_in_thread, wait_healthy

JSON = {"Content-Type": "application/json"}
PAGE = "/v1/sessions/{session_id}/page"
FOLLOW = "/v1/sessions/{session_id}/follow"
APPEND = "/v1/sessions/{session_id}/events"
REQUESTS = "history_http_request_duration_seconds_count"


class Exposition:
    """A scrape as prometheus-client's parser reads it: the families, and every sample with its labels."""

    def __init__(self, text: str) -> None:
        self.types: dict[str, str] = {}
        self.samples: dict[str, list[tuple[dict[str, str], float]]] = {}
        for family in text_string_to_metric_families(text):
            self.types[family.name] = family.type
            for sample in family.samples:
                self.samples.setdefault(sample.name, []).append((sample.labels, sample.value))

    def value(self, name: str, **labels: str) -> float:
        """The sum of the samples of ``name`` whose labels include ``labels``."""
        return sum(v for found, v in self.samples.get(name, []) if labels.items() <= found.items())

    def labels(self, name: str, label: str) -> set[str]:
        return {found[label] for found, _ in self.samples.get(name, [])}


def events(first: int, count: int, pad: int = 300) -> bytes:
    return encode({"events": [Event("note", seq, seq, {"pad": "x" * pad}) for seq in range(first, first + count)]})


def scrape(client: httpx.Client, url: str = "/metrics", **headers: str) -> Exposition:
    response = client.get(url, headers=headers)
    assert response.status_code == 200, response.text
    assert response.headers["content-type"].startswith("text/plain")
    return Exposition(response.text)


def eventually(check: Callable[[], bool], timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "the metrics never showed it"
        time.sleep(0.05)


def read_until(lines: Iterator[str], wanted: str) -> None:
    """Read up to the line ``wanted``; an ``id: <seq>`` matches the id of that seq in any incarnation."""
    for line in lines:
        if line == wanted or (
            wanted.startswith("id: ") and line.startswith("id: ") and line.endswith(f":{wanted[4:]}")
        ):
            return
    raise AssertionError(f"the stream ended before {wanted!r}")


@pytest.fixture
def server(tmp_path: Path) -> Iterator[str]:
    # A follow buffer smaller than one batch, so a follower falls behind it.
    settings = Settings(store_url=f"sqlite:///{tmp_path / 'metrics.db'}", ping_interval=0.5, follow_buffer=4)
    with serve_in_thread(settings) as running:
        yield running.url


def test_a_mix_of_traffic_shows_in_every_family(server: str) -> None:
    with httpx.Client(base_url=server, timeout=30) as client:
        assert client.post("/v1/sessions", json={"id": "s1", "createdAt": 1}).status_code == 201
        assert client.post("/v1/sessions/s1/events", content=events(0, 10), headers=JSON).status_code == 201
        assert client.post("/v1/sessions/s1/events", content=events(0, 10), headers=JSON).status_code == 200
        assert client.post("/v1/sessions/s1/events", content=events(20, 1), headers=JSON).status_code == 409
        assert client.get("/v1/sessions/s1/page", headers={"Accept-Encoding": "identity"}).status_code == 200
        for _ in range(2):
            immutable = client.get("/v1/sessions/s1/page", params={"through": 9}, headers={"Accept-Encoding": "gzip"})
            assert immutable.status_code == 200 and immutable.headers["content-encoding"] == "gzip"
        assert client.get("/v1/sessions/nobody/page").status_code == 404
        assert client.get("/no/such/path").status_code == 404

        with client.stream("GET", "/v1/sessions/s1/follow") as live:
            lines = live.iter_lines()
            read_until(lines, "event: snapshot")
            open_now = scrape(client)
            assert open_now.value("history_follow_streams_open") == 1
            # Timed to its opening frames, so it is counted while it is still open.
            assert open_now.value(REQUESTS, route=FOLLOW, status="200") == 1
            # One batch larger than the follow buffer: the follower falls behind it and reads the store.
            assert client.post("/v1/sessions/s1/events", content=events(10, 20), headers=JSON).status_code == 201
            read_until(lines, "id: 29")
        # Once the first has left, the resumed follower reads 5..29 from the store in one frame.
        eventually(lambda: scrape(client).value("history_follow_streams_open") == 0)
        with client.stream("GET", "/v1/sessions/s1/follow", params={"after": 4, "packed": 1}) as resumed:
            read_until(resumed.iter_lines(), "id: 29")
        eventually(lambda: scrape(client).value("history_follow_streams_open") == 0)
        seen = scrape(client)

    assert seen.value(REQUESTS, route="/v1/sessions", method="POST", status="201") == 1
    assert seen.value(REQUESTS, route=APPEND, method="POST", status="201") == 2
    assert seen.value(REQUESTS, route=APPEND, method="POST", status="200") == 1
    assert seen.value(REQUESTS, route=APPEND, method="POST", status="409") == 1
    assert seen.value(REQUESTS, route=PAGE, method="GET", status="200") == 3
    assert seen.value(REQUESTS, route=PAGE, method="GET", status="404") == 1
    assert seen.value(REQUESTS, route="unmatched", status="404") == 1
    assert seen.value(REQUESTS, route=FOLLOW, status="200") == 2
    assert seen.value(REQUESTS, route="/metrics", status="200") >= 1
    assert not any("s1" in route or "nobody" in route for route in seen.labels(REQUESTS, "route"))
    assert seen.types["history_http_request_duration_seconds"] == "histogram"
    assert seen.value("history_http_request_duration_seconds_bucket", route=PAGE, le="+Inf") == 4

    sent = "history_http_response_bytes_total"
    assert seen.value(sent, route=PAGE, coding="gzip") > 0
    assert seen.value(sent, route=PAGE, coding="identity") > 0
    # httpx accepts gzip, so the follows were sent in it (§5.4).
    assert seen.value(sent, route=FOLLOW, coding="gzip") > 0
    assert seen.labels(sent, "coding") <= {"identity", "gzip", "br", "zstd"}

    # The follow snapshot is the immutable page at the head, so it came from the cache too.
    assert seen.value("history_pages_total", source="cache", kind="immutable") == 2
    assert seen.value("history_pages_total", source="built", kind="immutable") == 1
    assert seen.value("history_pages_total", source="built", kind="head") == 1
    assert seen.value("history_page_build_seconds_count") == 2
    assert seen.value("history_page_build_seconds_sum") > 0

    assert seen.types["history_follow_streams_open"] == "gauge"
    assert seen.value("history_follow_streams_open") == 0
    assert seen.value("history_follow_frames_total", frame="snapshot") == 1
    # Seqs 10..29 to the first follower, one frame each; 5..29 to the resumed one, packed in one frame (§5.5).
    assert seen.value("history_follow_frames_total", frame="event") == 20
    assert seen.value("history_follow_frames_total", frame="records") == 1
    assert seen.value("history_follow_catch_ups_total", reason="behind") == 1
    assert seen.value("history_follow_catch_ups_total", reason="resume") == 1

    for family in ("history_appended_events", "history_append_batches", "history_seq_conflicts"):
        assert seen.types[family] == "counter"
    assert seen.types["history_store_errors"] == "counter"


class FlakyStore(MemoryStore):
    """A memory store whose page reads fail while ``failing`` is set."""

    failing = False

    async def read_page(
        self,
        session_id: str,
        *,
        through: int | None,
        before: int | None,
        max_messages: int,
        max_bytes: int | None = None,
    ) -> PageRead:
        if self.failing:
            raise StoreError("the disk went away")
        return await super().read_page(
            session_id, through=through, before=before, max_messages=max_messages, max_bytes=max_bytes
        )


@pytest.mark.anyio
async def test_appends_conflicts_and_store_errors_are_counted() -> None:
    store = FlakyStore()
    async with serving(create_app(Settings(), store=store)) as client:
        assert (await client.post("/v1/sessions", json={"id": "s1", "createdAt": 1})).status_code == 201
        for status in (201, 200):
            response = await client.post("/v1/sessions/s1/events", content=events(0, 3), headers=JSON)
            assert response.status_code == status
        assert (await client.post("/v1/sessions/s1/events", content=events(7, 1), headers=JSON)).status_code == 409
        store.failing = True
        assert (await client.get("/v1/sessions/s1/page")).status_code == 503
        seen = Exposition((await client.get("/metrics")).text)
    assert seen.value("history_appended_events_total") == 3
    assert seen.value("history_append_batches_total", result="stored") == 1
    assert seen.value("history_append_batches_total", result="idempotent") == 1
    assert seen.value("history_seq_conflicts_total") == 1
    assert seen.value("history_store_errors_total", kind="StoreError") == 1


@pytest.mark.anyio
async def test_in_token_mode_metrics_need_the_service_token_but_no_principal() -> None:
    settings = Settings(auth="token", tokens=("t",))
    async with serving(create_app(settings, store=MemoryStore())) as client:
        refused = await client.get("/metrics")
        assert refused.status_code == 401 and refused.json()["error"]["code"] == "unauthorized"
        assert refused.headers["www-authenticate"] == "Bearer"
        assert (await client.get("/metrics", headers={"Authorization": "Bearer nope"})).status_code == 401
        allowed = await client.get("/metrics", headers={"Authorization": "Bearer t"})
        assert allowed.status_code == 200
        assert "history_http_request_duration_seconds" in Exposition(allowed.text).types


@pytest.mark.anyio
async def test_a_scraper_that_asks_for_openmetrics_gets_it() -> None:
    async with serving(create_app(Settings(), store=MemoryStore())) as client:
        response = await client.get("/metrics", headers={"Accept": "application/openmetrics-text; version=1.0.0"})
    assert response.headers["content-type"].startswith("application/openmetrics-text")
    assert response.text.endswith("# EOF\n")


@pytest.mark.anyio
async def test_with_metrics_off_nothing_is_counted_or_served() -> None:
    app = create_app(Settings(metrics=False), store=MemoryStore())
    edge = app.build_middleware_stack()
    assert isinstance(edge, Edge) and not edge.metrics.enabled
    async with serving(app) as client:
        assert (await client.get("/metrics")).status_code == 404


@pytest.mark.anyio
async def test_two_apps_in_one_process_count_apart() -> None:
    async with (
        serving(create_app(Settings(), store=MemoryStore())) as busy,
        serving(create_app(Settings(), store=MemoryStore())) as idle,
    ):
        for _ in range(3):
            assert (await busy.get("/healthz")).status_code == 200
        assert Exposition((await busy.get("/metrics")).text).value(REQUESTS, route="/healthz") == 3
        assert Exposition((await idle.get("/metrics")).text).value(REQUESTS, route="/healthz") == 0


async def _fails(request: Request) -> Response:
    raise RuntimeError("boom")


async def _ok(request: Request) -> Response:
    return Response(b"x" * 10)


@pytest.mark.anyio
async def test_the_edge_counts_failures_as_500_and_odd_methods_as_other() -> None:
    metrics = PrometheusMetrics()
    app = Edge(Starlette(routes=[Route("/fail/{n}", _fails), Route("/ok", _ok, methods=["GET"])]), metrics=metrics)
    transport = httpx.ASGITransport(app=app, raise_app_exceptions=False)
    async with httpx.AsyncClient(transport=transport, base_url="http://testserver") as client:
        assert (await client.get("/fail/1")).status_code == 500
        assert (await client.get("/fail/2")).status_code == 500
        assert (await client.request("BREW", "/ok")).status_code == 405
        assert (await client.get("/ok")).status_code == 200
    seen = Exposition(generate_latest(metrics.registry).decode())
    assert seen.value(REQUESTS, route="/fail/{n}", method="GET", status="500") == 2
    assert seen.value(REQUESTS, route="/ok", method="other", status="405") == 1
    assert seen.value("history_http_response_bytes_total", route="/ok", coding="identity") >= 10


@pytest.mark.parametrize(
    ("environ", "expected"),
    [
        ({}, {"metrics": True, "metrics_port": None, "metrics_dir": None}),
        ({"HISTORY_METRICS": "0"}, {"metrics": False}),
        ({"HISTORY_METRICS_PORT": "9100"}, {"metrics": True, "metrics_port": 9100}),
        ({"PROMETHEUS_MULTIPROC_DIR": "/run/metrics"}, {"metrics_dir": "/run/metrics"}),
    ],
    ids=["default", "off", "port", "multiprocess-dir"],
)
def test_metrics_settings_come_from_the_environment(environ: dict[str, str], expected: dict[str, Any]) -> None:
    settings = Settings.from_env(environ)
    assert {name: getattr(settings, name) for name in expected} == expected


@pytest.mark.parametrize(
    "environ",
    [
        {"HISTORY_METRICS": "yes"},
        {"HISTORY_METRICS_PORT": "8000"},
        {"HISTORY_METRICS_PORT": "0"},
        {"HISTORY_METRICS_PORT": "9100", "HISTORY_METRICS": "0"},
    ],
    ids=["not-0-or-1", "the-api-port", "out-of-range", "port-without-metrics"],
)
def test_bad_metrics_settings_refuse_to_start(environ: dict[str, str]) -> None:
    with pytest.raises(ValueError, match="METRICS|metrics"):
        ServerSettings.from_env(environ)


def test_serve_with_a_metrics_port_serves_them_there_without_auth(tmp_path: Path) -> None:
    metrics_port = free_port()
    server = ServerProcess(
        f"sqlite:///{tmp_path / 'h.db'}", env={"HISTORY_AUTH": "token", "HISTORY_SERVICE_TOKENS": "t"}
    )
    server.start("--metrics-port", str(metrics_port))
    try:
        assert httpx.get(f"{server.url}/readyz").status_code == 200
        # Served there instead: the API port has no /metrics, with the service token or without it.
        assert httpx.get(f"{server.url}/metrics").status_code == 404
        assert httpx.get(f"{server.url}/metrics", headers={"Authorization": "Bearer t"}).status_code == 404
        with httpx.Client(base_url=f"http://127.0.0.1:{metrics_port}") as client:
            seen = scrape(client)
        assert seen.value(REQUESTS, route="/readyz", status="200") == 1
        assert seen.value(REQUESTS, route="unmatched", status="404") == 2
        assert "unauthenticated at" in server.stderr() and "not on the API port" in server.stderr()
    finally:
        server.stop()


@pytest.mark.anyio
async def test_an_app_with_a_metrics_port_serves_no_metrics_on_its_own_port() -> None:
    """Issue 23: `--metrics-port` serves the metrics there instead, as its help says, and the document agrees."""
    async with serving(create_app(Settings(metrics_port=9100), store=MemoryStore())) as client:
        assert (await client.get("/metrics")).status_code == 404
        assert "/metrics" not in (await client.get("/openapi.json")).json()["paths"]
        assert (await client.get("/readyz")).status_code == 200


def test_under_a_launcher_of_ones_own_the_metrics_port_is_ignored(tmp_path: Path) -> None:
    """Issue 23: only `serve` opens the metrics port, so under `uvicorn --factory` the API port keeps /metrics."""
    port = free_port()
    env = {**os.environ, "HISTORY_STORE": f"sqlite:///{tmp_path / 'h.db'}", "HISTORY_METRICS_PORT": str(free_port())}
    argv = [sys.executable, "-m", "uvicorn", "--factory", "history_service.app:app_factory", "--port", str(port)]
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) as process:
        try:
            wait_healthy(f"http://127.0.0.1:{port}", process)
            assert httpx.get(f"http://127.0.0.1:{port}/metrics").status_code == 200
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)


def test_serve_no_metrics_serves_none(tmp_path: Path) -> None:
    server = ServerProcess(f"sqlite:///{tmp_path / 'h.db'}")
    server.start("--no-metrics")
    try:
        assert httpx.get(f"{server.url}/metrics").status_code == 404
        assert "metrics off" in server.stderr()
    finally:
        server.stop()


def readyz_served(samples_file: Path) -> float:
    """The ``/readyz`` requests one worker's histogram file holds."""
    try:
        merged = MultiProcessCollector.merge([str(samples_file)])  # type: ignore[no-untyped-call]
    except struct.error:
        return 0  # made that instant, and not yet sized
    return sum(
        float(sample.value)
        for family in merged
        for sample in family.samples
        if sample.name == REQUESTS and sample.labels["route"] == "/readyz"
    )


@pytest.mark.skipif(not PG_URL, reason="HISTORY_TEST_PG_URL is not set; run under scripts/with-postgres")
@pytest.mark.parametrize("metrics_port", [False, True], ids=["each-worker", "metrics-port"])
def test_two_workers_report_the_sum_of_both(tmp_path: Path, metrics_port: bool) -> None:
    assert PG_URL
    anyio.run(empty_postgres, PG_URL)
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    metrics_url = f"http://127.0.0.1:{free_port()}" if metrics_port else base
    temp = tmp_path / "tmp"
    temp.mkdir()
    code = "import sys; from history_service.cli.program import main; sys.exit(main())"
    argv = [sys.executable, "-c", code, "serve", "--workers", "2", "--store", PG_URL, "--port", str(port)]
    if metrics_port:
        argv += ["--metrics-port", metrics_url.rsplit(":", 1)[1]]
    # The launcher makes its samples directory under TMPDIR: here, where the test can look into it.
    env = {**os.environ, "TMPDIR": str(temp)}
    with open(tmp_path / "stderr", "wb") as log, subprocess.Popen(argv, env=env, stderr=log) as process:
        try:
            wait_healthy(base, process)
            [directory] = temp.glob("history-metrics-*")
            sent = 0
            # One connection per request, so requests reach either worker; until each has served some.
            while sorted(readyz_served(path) > 0 for path in directory.glob("histogram_*.db")) != [True, True]:
                # 503 until the worker listens for other processes' appends: counted all the same.
                httpx.get(f"{base}/readyz")
                sent += 1
                assert sent < 2000, "every request reached one worker"
            assert httpx.post(f"{base}/v1/sessions", json={"id": "s1", "createdAt": 1}).status_code == 201
            with httpx.stream("GET", f"{base}/v1/sessions/s1/follow") as live:
                # Held: a line iterator that is dropped closes the stream.
                lines = live.iter_lines()
                read_until(lines, "event: snapshot")
                for _ in range(6):
                    # Whichever process answers, it reports both workers' requests and the one open stream.
                    with httpx.Client(base_url=metrics_url) as client:
                        seen = scrape(client)
                    assert seen.value(REQUESTS, route="/readyz") == sent
                    assert seen.value("history_follow_streams_open") == 1
        finally:
            process.send_signal(signal.SIGTERM)
            process.wait(60)
    assert process.returncode == 0, (tmp_path / "stderr").read_text()
    assert not directory.exists()
