"""A query Struct's fields read as parameters: range, values, default and the setting that gives one."""

from __future__ import annotations

from typing import Annotated

import pytest
from msgspec import Meta, Struct

from codec import INCARNATION_PATTERN, MAX_SAFE_INTEGER
from history_service.params import (
    CONTENT_ENCODING,
    EVENT_ID_PATTERN,
    LAST_EVENT_ID,
    FollowParams,
    PageParams,
    Param,
    parameter,
    parameters,
)
from history_service.settings import Settings


def test_a_page_query_reads_as_its_parameters_in_declared_order() -> None:
    assert parameters(PageParams) == (
        Param(
            name="through",
            kind="integer",
            description="Inclusive upper seq, at most the head.",
            low=-1,
            high=MAX_SAFE_INTEGER,
        ),
        Param(
            name="before",
            kind="integer",
            description="Exclusive upper seq, to page backwards.",
            low=0,
            high=MAX_SAFE_INTEGER,
        ),
        Param(
            name="maxMessages",
            kind="integer",
            description="Most counted messages (§4.3).",
            low=1,
            high=1000,
            default=50,
        ),
        Param(
            name="maxBytes",
            kind="integer",
            description="Byte target.",
            low=1,
            high=MAX_SAFE_INTEGER,
            setting="default_max_bytes",
        ),
        Param(name="expand", kind="enum", description='Every record as `{"event"}`, unpacked.', values=("raw",)),
        Param(
            name="incarnation",
            kind="string",
            description="The session's incarnation (§2.5); another one answers as an unknown session.",
            pattern=INCARNATION_PATTERN,
        ),
    )


def test_a_setting_named_for_a_default_is_a_settings_field() -> None:
    named = [param.setting for param in parameters(PageParams) if param.setting is not None]
    assert named and all(name in Settings.__struct_fields__ for name in named)


def test_a_header_reads_like_a_query_field_and_keeps_its_own_description() -> None:
    after = next(param for param in parameters(FollowParams) if param.name == "after")
    header = parameter(LAST_EVENT_ID.name, LAST_EVENT_ID.type, description=LAST_EVENT_ID.description)
    # An SSE id, `<incarnation>:<seq>` (§5.1): a string of a pattern, whose seq part is as `after`.
    assert (header.kind, header.pattern) == ("string", EVENT_ID_PATTERN) and (after.low, after.high) == (
        -1,
        MAX_SAFE_INTEGER,
    )
    assert header.description.startswith("An SSE `id` (§5.1)") and header.description != after.description
    coding = parameter(CONTENT_ENCODING.name, CONTENT_ENCODING.type)
    assert (coding.kind, coding.values) == ("enum", ("identity", "zstd", "br", "gzip"))


def test_a_field_of_a_type_no_parameter_may_have_is_refused() -> None:
    class Odd(Struct, frozen=True):
        weights: Annotated[list[int], Meta(min_length=1)] = []

    with pytest.raises(TypeError, match="weights"):
        parameters(Odd)
