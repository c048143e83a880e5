"""Durable Streams at ``/ds`` (docs/protocol.md §13): generic streams, sessions as streams, subscriptions."""
