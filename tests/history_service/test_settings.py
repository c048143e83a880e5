"""Settings come from HISTORY_* once, with overrides, and refuse bad values."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from history_service import app
from history_service.settings import ServerSettings, Settings, environment_variables, read_token_file
from persistence import HistoryStore, MemoryStore


def test_defaults_and_environment() -> None:
    assert Settings.from_env({}) == Settings()
    settings = Settings.from_env(
        {
            "HISTORY_STORE": "jsonl:///x",
            "HISTORY_AUTH": "token",
            "HISTORY_SERVICE_TOKENS": "a, b,,",
            "HISTORY_PING_INTERVAL": "2.5",
        }
    )
    assert (settings.store_url, settings.auth, settings.tokens, settings.ping_interval) == (
        "jsonl:///x",
        "token",
        ("a", "b"),
        2.5,
    )
    assert Settings.from_env({"HISTORY_ENABLE_TEST_SEED": "1"}).enable_test_seed
    assert not Settings.from_env({"HISTORY_ENABLE_TEST_SEED": "true"}).enable_test_seed
    assert Settings.from_env({"HISTORY_STORE": "a"}, store_url="b", auth=None).store_url == "b"
    assert Settings.from_env({"HISTORY_SESSION_CACHE": "50"}).session_cache == 50


@pytest.mark.parametrize(
    ("environ", "message"),
    [
        ({"HISTORY_AUTH": "token"}, "needs at least one service token"),
        ({"HISTORY_AUTH": "basic"}, r"invalid setting \(HISTORY_AUTH\)"),
        ({"HISTORY_PORT": "99999"}, r"invalid setting \(HISTORY_PORT\): port must be from 1 to 65535"),
        ({"HISTORY_HTTP": "h2"}, r"invalid setting \(HISTORY_HTTP\)"),
        ({"HISTORY_MAX_BODY_BYTES": "lots"}, "is not a valid int"),
        ({"HISTORY_MAX_BODY_BYTES": "0"}, "max_body_bytes must be positive"),
        ({"HISTORY_PING_INTERVAL": "-1"}, "ping_interval must be positive"),
        ({"HISTORY_SESSION_CACHE": "0"}, "session_cache must be positive"),
        ({"HISTORY_STORE_TIMEOUT": "0"}, "store_timeout must be positive"),
        ({"HISTORY_STORE_TIMEOUT": "soon"}, "is not a valid float"),
    ],
)
def test_bad_values_are_refused_at_startup(environ: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        ServerSettings.from_env(environ)


def test_token_file_ignores_blanks_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "tokens"
    path.write_text("# gateway\nalpha\n\n  beta  \n")
    assert read_token_file(path) == ("alpha", "beta")


def test_a_bad_variable_is_named_even_when_flags_are_passed_as_none() -> None:
    with pytest.raises(ValueError, match=r"\(HISTORY_MAX_BODY_BYTES\)"):
        Settings.from_env({"HISTORY_MAX_BODY_BYTES": "-5"}, port=None, host=None)


def test_the_environment_sets_the_log_format_and_level() -> None:
    settings = Settings.from_env({"HISTORY_LOG_FORMAT": "json", "HISTORY_LOG_LEVEL": "debug"})
    assert (settings.log_format, settings.log_level) == ("json", "debug")
    assert (Settings().log_format, Settings().log_level) == ("text", "info")
    with pytest.raises(ValueError, match=r"\(HISTORY_LOG_LEVEL\)"):
        Settings.from_env({"HISTORY_LOG_LEVEL": "loud"})


def test_the_follow_cap_leaves_room_below_the_connection_limit() -> None:
    assert Settings().follower_cap == 3072
    assert Settings(limit_concurrency=100).follower_cap == 75
    assert Settings.from_env({"HISTORY_MAX_FOLLOWERS": "10", "HISTORY_LIMIT_CONCURRENCY": "20"}).follower_cap == 10
    assert Settings(limit_concurrency=4).follower_cap == 2
    for cap in (99, 100, 0):
        with pytest.raises(ValueError, match="limit_concurrency - 2"):
            Settings(limit_concurrency=100, max_followers=cap)
    assert Settings(limit_concurrency=100, max_followers=98).follower_cap == 98
    settings = Settings.from_env({"HISTORY_INFLIGHT_BYTES": "1000", "HISTORY_INFLIGHT_WAIT": "0.5"})
    assert (settings.inflight_bytes, settings.inflight_wait) == (1000, 0.5)
    with pytest.raises(ValueError, match="inflight_bytes"):
        Settings(inflight_bytes=0)


@pytest.mark.anyio
async def test_the_store_timeout_is_read_and_reaches_the_store(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = Settings.from_env({"HISTORY_STORE": "memory://", "HISTORY_STORE_TIMEOUT": "0.25"})
    assert (settings.store_timeout, Settings().store_timeout) == (0.25, 5.0)
    opened: list[dict[str, object]] = []

    async def open_store(url: str, **options: object) -> HistoryStore:
        opened.append({"url": url, **options})
        return MemoryStore()

    monkeypatch.setattr(app, "open_store", open_store)
    application = app.create_app(settings)
    async with application.router.lifespan_context(application):
        pass
    assert [(o["url"], o["timeout"]) for o in opened] == [("memory://", 0.25)]


def documented_variables() -> set[str]:
    """The variables in the first column of docs/protocol.md §11's settings tables (§11.3 to §11.5)."""
    text = (Path(__file__).resolve().parents[2] / "docs" / "protocol.md").read_text(encoding="utf-8")
    section = text[text.index("### 11.3 ") : text.index("\n## 12.")]
    cells = [line.strip().split("|")[1] for line in section.splitlines() if line.strip().startswith("| `")]
    return {name for cell in cells for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cell)}


def readme_variables() -> set[str]:
    """The variables in the first column of README.md's table under "Configuration"."""
    text = (Path(__file__).resolve().parents[2] / "README.md").read_text(encoding="utf-8")
    section = text[text.index("## Configuration") : text.index("**Store URLs**")]
    cells = [line.strip().split("|")[1] for line in section.splitlines() if line.strip().startswith("| `")]
    return {name for cell in cells for name in re.findall(r"`([A-Z][A-Z0-9_]+)`", cell)}


def test_every_variable_is_named_on_its_field_and_documented() -> None:
    variables = environment_variables()
    assert variables["HISTORY_PORT"] == "ServerSettings.port" and variables["HISTORY_STORE"] == "Settings.store_url"
    assert documented_variables() == set(variables)
    assert readme_variables() == set(variables), "README.md's Configuration table lists every variable, and no other"


def test_the_retention_is_a_duration_and_the_sweep_is_bounded() -> None:
    settings = Settings.from_env({"HISTORY_RETENTION": "30d", "HISTORY_SWEEP_INTERVAL": "0"})
    assert (settings.retention_ms, settings.sweep_interval, settings.sweep_batch) == (30 * 86_400_000, 0, 100)
    assert Settings().retention_ms is None
    with pytest.raises(ValueError, match=r"HISTORY_RETENTION='30' a duration: a whole number and a unit"):
        Settings.from_env({"HISTORY_RETENTION": "30"})
    with pytest.raises(ValueError, match="sweep_batch must be positive"):
        Settings(sweep_batch=0)
    with pytest.raises(ValueError, match="sweep_interval must not be negative"):
        Settings(sweep_interval=-1)
    with pytest.raises(ValueError, match="retention_ms must be positive"):
        Settings(retention_ms=0)


def test_each_field_reads_the_variable_it_names() -> None:
    server = ServerSettings.from_env(
        {"HISTORY_PORT": "9000", "HISTORY_WORKERS": "3", "HISTORY_STORE": "jsonl:///x", "HISTORY_METRICS": "0"},
        host="::1",
    )
    assert (server.host, server.port, server.workers) == ("::1", 9000, 3)
    assert (server.app.store_url, server.app.metrics) == ("jsonl:///x", False)
    # The app's settings never read the launcher's variables.
    assert not {"port", "host", "workers", "http"} & set(Settings.__struct_fields__)


def test_the_workers_are_a_count_or_auto() -> None:
    assert ServerSettings.from_env({"HISTORY_WORKERS": "auto"}).workers == "auto"
    assert ServerSettings.from_env({"HISTORY_WORKERS": "auto"}, workers=2).workers == 2
    for bad in ("0", "x", "-1"):
        with pytest.raises(ValueError, match=rf"HISTORY_WORKERS='{bad}' a whole number, 1 or more, or auto"):
            ServerSettings.from_env({"HISTORY_WORKERS": bad})
    with pytest.raises(ValueError, match="workers must be positive, or auto"):
        ServerSettings(workers=0)
