"""Hostile-reader load for tests and benchmarks: a session built to be expensive, readers that never read, RSS."""

from __future__ import annotations

import socket
from pathlib import Path

import httpx

from codec import encode

__all__ = ["make_wide_session", "open_stalled_follow", "read_head", "rss"]

JSON = {"Content-Type": "application/json"}


def make_wide_session(client: httpx.Client, session_id: str, messages: int, texts: int, size: int) -> None:
    """A session of ``messages`` user messages, each followed by ``texts`` text deltas of about ``size`` bytes.

    The store packs each message's deltas into one row, so every message is one wide record.
    """
    assert client.post("/v1/sessions", json={"id": session_id, "createdAt": 1}).status_code == 201
    seq, batch = 0, []
    for m in range(messages):
        question = {"text": f"q{m}"}
        batch.append({"seq": seq, "time": seq, "type": "user/message", "data": question, "surfaceOp": "append"})
        seq += 1
        for k in range(texts):
            delta = {"turn": 1, "step": 1, "chunk": {"type": "text-delta", "index": 0, "text": f"{k:04}" + "x" * size}}
            batch.append({"seq": seq, "time": seq, "type": "assistant/chunk", "data": delta})
            seq += 1
        if len(batch) >= 20_000 or m == messages - 1:
            response = client.post(f"/v1/sessions/{session_id}/events", content=encode({"events": batch}), headers=JSON)
            assert response.status_code == 201, response.text
            batch = []


def rss(pid: int) -> int:
    """A process's resident memory in bytes (Linux ``/proc``)."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


def read_head(sock: socket.socket) -> bytes:
    """A response's head, read a byte at a time, so that nothing past it leaves the socket."""
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        assert chunk, head
        head += chunk
    return head


def open_stalled_follow(port: int, path: str) -> tuple[socket.socket, int, bytes]:
    """A follow request whose reader reads nothing past the response head: the socket, the status, a refusal's body."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=30)
    sock.sendall(f"GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    head = read_head(sock)
    status = int(head.split(b" ", 2)[1])
    body = b""
    if status != 200:
        fields = dict(line.split(b":", 1) for line in head.split(b"\r\n")[1:] if b":" in line)
        length = int(fields[b"content-length"])
        while len(body) < length:
            body += sock.recv(length - len(body))
    return sock, status, body
