"""The record formats: one line per record, whatever control characters it holds, stamped as datetime would."""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

import httpx
import pytest
from hypothesis import given, strategies as st

from history_service.logs import ACCESS_LOGGER, Timestamps
from tests.history_service.logs.conftest import captured

pytestmark = pytest.mark.anyio


async def test_a_text_line_quotes_what_could_forge_a_line(client: httpx.AsyncClient) -> None:
    with captured("text") as buffer:
        await client.get("/v1/sessions/a%0Afake%20line/page")
    (line,) = [line for line in buffer.getvalue().splitlines() if f"INFO {ACCESS_LOGGER}" in line]
    assert 'GET "/v1/sessions/a\\nfake line/page" 4' in line


# Every character str.splitlines() splits on, and every other C0, DEL and C1 control.
BREAKERS = "".join(chr(c) for c in [*range(0x20), *range(0x7F, 0xA0), 0x2028, 0x2029])


FORGED = "\x85 2026-12-01T00:00:00.000Z INFO history_service.access [forged] GET /admin 200"


@pytest.mark.parametrize("log_format", ["text", "json"])
def test_a_record_is_one_line_whatever_control_characters_its_fields_hold(log_format: str) -> None:
    """R8: one record is one line, in every field: logger name, message, arguments and traceback."""
    try:
        raise ValueError(f"bad{BREAKERS}{FORGED}")
    except ValueError as exc:
        error = exc
    with captured(log_format) as buffer:
        logging.getLogger(f"history_service.x{FORGED}").error("m%s%s", BREAKERS, FORGED, exc_info=error)
    (line,) = buffer.getvalue().splitlines()
    assert not set(BREAKERS) & set(line)
    if log_format == "json":
        record = json.loads(line)
        assert record["message"] == f"m{BREAKERS}{FORGED}" and record["logger"].endswith(FORGED)
        assert f"ValueError: bad{BREAKERS}{FORGED}" in record["exception"]
    else:
        assert "\\u0085 2026-12-01T00:00:00.000Z INFO history_service.access [forged]" in line
        assert "\\nTraceback (most recent call last):\\n" in line and "\\u2028\\u2029" in line


@pytest.mark.parametrize("log_format", ["text", "json"])
async def test_an_access_line_for_a_path_with_a_c1_control_is_one_line(
    client: httpx.AsyncClient, log_format: str
) -> None:
    """R8: msgspec leaves U+0080-U+009F and U+2028 unescaped, which splitlines() splits on."""
    with captured(log_format, logging.INFO) as buffer:
        response = await client.get("/v1/sessions/a%C2%85b%E2%80%A8c/page")
    assert response.status_code == 422
    lines = buffer.getvalue().splitlines()
    assert all(line.startswith("{" if log_format == "json" else "20") for line in lines)
    (access,) = [line for line in lines if ACCESS_LOGGER in line and "INFO" in line]
    if log_format == "json":
        assert json.loads(access)["path"] == "/v1/sessions/a\x85b\u2028c/page"
    else:
        assert 'GET "/v1/sessions/a\\u0085b\\u2028c/page" 422' in access


@given(
    created=st.one_of(
        st.floats(min_value=0, max_value=4e9, allow_nan=False),
        st.integers(0, 4_000_000_000 * 1000).map(lambda ms: ms / 1000),
        st.integers(0, 4_000_000_000).map(lambda s: s + 0.9999995),
    )
)
def test_a_kept_second_stamps_each_record_as_datetime_would(created: float) -> None:
    stamps = Timestamps()
    expected = datetime.fromtimestamp(created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    assert stamps(created) == expected
    # And again, from the second it keeps.
    assert stamps(created) == expected
