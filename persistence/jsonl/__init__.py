"""The JSONL file store: one directory per session, in the deepseek-harness line format (`persistence.jsonl.store`)."""

from __future__ import annotations

from persistence.jsonl.layout import FORMAT_VERSION, INDEX_NAME, ROOT_MARKER, encode_segment
from persistence.jsonl.store import JsonlStore

__all__ = ["FORMAT_VERSION", "INDEX_NAME", "JsonlStore", "ROOT_MARKER", "encode_segment"]
