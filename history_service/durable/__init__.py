"""Durable Streams at ``/ds`` (docs/protocol.md §10): generic streams, sessions as streams, subscriptions."""
