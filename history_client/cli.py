"""The ``history-client`` command line: pages, exports and live follows, as JSON lines."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Final, TextIO

from codec import Event, SessionIdError, cli_args, distribution_version, encode, encode_lines
from history_client.client import HistoryClient
from history_client.errors import ClientError
from history_client.follow import (
    DEFAULT_MAX_DELAY,
    DEFAULT_MAX_RETRIES,
    Backoff,
    ConnectionHook,
    Reconnected,
    Retrying,
)

__all__ = ["main"]

PROGRESS_EVERY: Final = 100_000
WRITE_BATCH: Final = 4096


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="history-client",
        description=(
            "Read session history from a history service. Output is JSON lines on stdout: one exact logical "
            "event per line. Credentials: --token-file or HISTORY_TOKEN, and --principal or HISTORY_PRINCIPAL."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {distribution_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, help: str, description: str) -> argparse.ArgumentParser:
        sub = commands.add_parser(name, help=help, description=description)
        sub.add_argument("url", metavar="URL", help="the service, e.g. http://127.0.0.1:8000")
        sub.add_argument("session", metavar="SESSION", help="the session id")
        sub.add_argument("--child", metavar="ID", help="read this direct subagent child of SESSION instead")
        sub.add_argument("--token-file", type=Path, metavar="PATH", help="a file holding the service token")
        sub.add_argument("--principal", default=os.environ.get("HISTORY_PRINCIPAL"), help="sent as X-Principal")
        sub.add_argument("--timeout", type=float, default=30.0, help="seconds per request (default: %(default)s)")
        return sub

    page = command(
        "page",
        "print one page",
        "Print one validated, message-aligned page: its exact events as JSON lines, or with --json the page "
        "itself (packed records) as one JSON document.",
    )
    page.add_argument("--through", type=int, metavar="N", help="inclusive upper seq (default: the head)")
    page.add_argument("--before", type=int, metavar="N", help="exclusive upper seq, for paging backwards")
    page.add_argument("--max-messages", type=int, metavar="N", help="messages per page (service default: 50)")
    page.add_argument("--max-bytes", type=int, metavar="N", help="byte target for the page body")
    page.add_argument("--json", action="store_true", help="print the page document instead of its events")

    follow = command(
        "follow",
        "follow a session live",
        "Print the tail page's events, then every new event as it is appended, exactly once and in order, "
        "reconnecting with Last-Event-ID when the connection drops. Each failed attempt, with the delay before "
        "the next, and each reconnect are reported on stderr. Stop with Ctrl+C.",
    )
    follow.add_argument("--after", type=int, metavar="N", help="start after seq N instead of at the tail page")
    follow.add_argument(
        "--max-retries",
        type=cli_args.count,
        default=DEFAULT_MAX_RETRIES,
        metavar="N",
        help="give up, with exit status 1, when N retries in a row fail, that is after N + 1 failed attempts "
        "(default: %(default)s)",
    )
    follow.add_argument(
        "--retry-delay",
        type=cli_args.seconds,
        metavar="SECONDS",
        help="the delay before the first retry, doubling with each failure in a row up to --max-delay; each "
        "actual delay is drawn from the upper half of that (default: the server's retry field, 1 s until one "
        "arrives)",
    )
    follow.add_argument(
        "--max-delay",
        type=cli_args.seconds,
        default=DEFAULT_MAX_DELAY,
        metavar="SECONDS",
        help="the longest delay between retries (default: %(default)s)",
    )

    export = command(
        "export",
        "print a whole session",
        "Print every event of a session (or those after --after), oldest first. Progress goes to stderr.",
    )
    export.add_argument("--after", type=int, default=-1, metavar="N", help="only events after seq N")
    export.add_argument("--quiet", action="store_true", help="no progress on stderr")
    return parser


def _token(path: Path | None) -> str | None:
    if path is None:
        return os.environ.get("HISTORY_TOKEN") or None
    return path.read_text().strip()


def _write_events(events: Iterable[Event], out: TextIO, progress: TextIO | None = None) -> int:
    count, batch = 0, []
    for event in events:
        batch.append(event)
        if len(batch) == WRITE_BATCH:
            out.write(encode_lines(batch).decode())
            count += len(batch)
            if progress is not None and count % PROGRESS_EVERY < WRITE_BATCH:
                print(f"history-client: {count:,} events (through seq {event.seq})", file=progress, flush=True)
            batch = []
    if batch:
        out.write(encode_lines(batch).decode())
        count += len(batch)
    return count


def _follow(events: Iterable[Event], out: TextIO) -> None:
    for event in events:
        out.write(encode(event).decode() + "\n")
        out.flush()


def _connection_reporter(err: TextIO) -> ConnectionHook:
    def report(change: Retrying | Reconnected) -> None:
        if isinstance(change, Reconnected):
            attempts = "attempt" if change.failures == 1 else "attempts"
            line = f"reconnected after {change.failures} failed {attempts}"
        else:
            what = "connection lost" if change.opened else "connection failed"
            line = f"{what} (attempt {change.attempt}): {change.reason}; retrying in {_duration(change.delay)} s"
        print(f"history-client: {line}", file=err, flush=True)

    return report


def _duration(seconds: float) -> str:
    return f"{seconds:.1f}" if seconds >= 1 else f"{seconds:.2g}"


def main(argv: Sequence[str] | None = None, *, stdout: TextIO | None = None, stderr: TextIO | None = None) -> int:
    out, err = stdout or sys.stdout, stderr or sys.stderr
    args = _parser().parse_args(argv)
    try:
        token = _token(args.token_file)
    except OSError as exc:
        print(f"history-client: cannot read the token file: {exc}", file=err)
        return 2
    backoff = None
    if args.command == "follow":
        backoff = Backoff(base=args.retry_delay, cap=args.max_delay, max_retries=args.max_retries)
    client = HistoryClient(args.url, token=token, principal=args.principal, timeout=args.timeout, backoff=backoff)
    try:
        with client:
            if args.command == "page":
                page = client.page(
                    args.session,
                    child=args.child,
                    through=args.through,
                    before=args.before,
                    max_messages=args.max_messages,
                    max_bytes=args.max_bytes,
                )
                if args.json:
                    document = {
                        "records": page.records,
                        "hasMore": page.has_more,
                        "fromSeq": page.from_seq,
                        "toSeq": page.to_seq,
                    }
                    out.write(encode(document).decode() + "\n")
                else:
                    _write_events(page.events(), out)
            elif args.command == "follow":
                report = _connection_reporter(err)
                _follow(client.follow(args.session, child=args.child, after=args.after, on_connection=report), out)
            else:
                progress = None if args.quiet else err
                history = client.iter_history(args.session, child=args.child, after=args.after)
                count = _write_events(history, out, progress)
                if progress is not None:
                    print(f"history-client: exported {count:,} events", file=progress)
        out.flush()
    except (ClientError, SessionIdError) as exc:
        print(f"history-client: {exc}", file=err)
        return 1
    except BrokenPipeError:
        # The reader went away (`follow ... | head`): it has what it wanted.
        cli_args.discard(out)
        return 0
    except KeyboardInterrupt:
        return 130
    return 0


if __name__ == "__main__":
    sys.exit(main())
