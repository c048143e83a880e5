"""The ``history-service`` program: its commands and their flags, and `main`, which runs one.

Every command reads the same settings as ``serve`` (``HISTORY_*`` variables, then flags),
says on stderr which store it uses, and reports a failure as one line on stderr with a
non-zero exit. Only ``serve`` and ``import`` may create a store.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Final, TextIO
from urllib.parse import urlsplit

from codec import count, discard, distribution_version, port, workers_count
from history_service.cli import PROG
from history_service.durations import duration_ms
from history_service.errors import CommandError
from history_service.params import DEFAULT_MAX_MESSAGES
from history_service.settings import (
    DEFAULT_STORE,
    ServerSettings,
    Settings,
    environment_variables,
    read_token_file,
)

try:
    import anyio

    from history_service.cli import launcher, store_commands
    from persistence import DEFAULT_OWNER, StoreError, describe_url
except ModuleNotFoundError as missing:  # a client-only install: say what to install, not a traceback
    _MISSING: ModuleNotFoundError | None = missing
else:
    _MISSING = None

__all__ = ["main"]

STORE_HELP: Final = (
    f"store URL (default: $HISTORY_STORE, else {DEFAULT_STORE}): sqlite:///relative.db or sqlite:////absolute.db, "
    "jsonl:///relative/dir or jsonl:////absolute/dir (add ?compression=zstd), postgresql+psycopg://user@host/db"
)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=PROG,
        description=(
            "Session-history transport service: store, page and follow agent session logs. Every command reads "
            "HISTORY_* variables (HISTORY_STORE, HISTORY_AUTH, ...); flags win."
        ),
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {distribution_version()}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    server = commands.add_parser(
        "serve",
        help="run the HTTP service",
        description=(
            "Serve session.page, session.follow and appends over HTTP with uvicorn, creating the store if it does "
            "not exist. Also read from the environment (README.md says what each means): "
            f"{', '.join(sorted(environment_variables()))}."
        ),
    )
    server.add_argument("--store", help=STORE_HELP)
    server.add_argument("--host", help="interface to bind (default: $HISTORY_HOST, else 127.0.0.1)")
    server.add_argument("--port", type=port, help="port to bind, 1-65535 (default: $HISTORY_PORT, else 8000)")
    server.add_argument(
        "--auth",
        choices=["none", "token"],
        help="none: one local principal (default); token: a service bearer token plus X-Principal",
    )
    server.add_argument(
        "--token-file", type=Path, help="file of accepted service tokens, one per line (or HISTORY_SERVICE_TOKENS)"
    )
    server.add_argument(
        "--cors-origin",
        action="append",
        metavar="ORIGIN",
        help=(
            "let pages on this origin (scheme://host[:port]) call the service; repeat for more "
            "(default: $HISTORY_CORS_ORIGINS, comma-separated, else none: no CORS)"
        ),
    )
    server.add_argument(
        "--workers",
        type=workers_count,
        help=(
            "server processes, or auto for one per core (default: $HISTORY_WORKERS, else 1); more than one "
            "needs a store several processes can share"
        ),
    )
    server.add_argument(
        "--metrics-port",
        type=port,
        help=(
            "serve GET /metrics on this port of --host instead of the API port, without authentication "
            "(or HISTORY_METRICS_PORT)"
        ),
    )
    server.add_argument(
        "--no-metrics", action="store_true", help="record no metrics and serve no /metrics (or HISTORY_METRICS=0)"
    )
    server.add_argument(
        "--log-format",
        type=str.lower,
        choices=["text", "json"],
        help="text lines, or one JSON object per line (default: $HISTORY_LOG_FORMAT, else text)",
    )
    server.add_argument(
        "--log-level",
        type=str.lower,
        choices=["debug", "info", "warning", "error", "critical"],
        help="the least severe records logged (default: $HISTORY_LOG_LEVEL, else info)",
    )
    server.add_argument("--demo", action="store_true", help="seed a demo session (if missing) and print its URLs")

    importer = commands.add_parser(
        "import",
        help="import session logs (deepseek-harness format, or an export)",
        description=(
            "Import session logs into the store, creating the store if it does not exist. PATH is a log file, or a "
            "folder walked recursively: each folder's session.jsonl is imported, then its subagent children "
            "session.N.jsonl in N order, as `export --with-children` writes; any other .jsonl file there is named "
            "and skipped. Lines that omit seq get it rebuilt, and a missing time is the last time before it (or "
            "the header's createdAt). A log whose id is a template placeholder such as {{sessionId}} is named for "
            "its folder, and what its folder's logs say of it follows. Each log is imported whole or not at all; "
            "one already stored the same is unchanged (so importing a folder again succeeds and writes nothing); a "
            "failed log does not stop the others, and the summary at the end names every file skipped or failed "
            "and why (exit 1 if any failed)."
        ),
    )
    importer.add_argument("paths", nargs="+", metavar="PATH", type=Path, help="a log file or a folder of logs")
    importer.add_argument("--store", help=STORE_HELP)
    importer.add_argument(
        "--owner", default=DEFAULT_OWNER, help="principal that owns the imported sessions (default: %(default)s)"
    )
    importer.add_argument("--id", metavar="NEW", help="import the one log given under this session id")
    importer.add_argument(
        "--rename-templated",
        action="store_true",
        help=(
            "rename a log whose id is not a valid session id, or is shared by another log of this import, as a "
            "placeholder id always is: for its folder (FOLDER, or FOLDER.N for session.N.jsonl), the same on every "
            "run; its children's parentSession, and every reference its folder's events make to it, follow"
        ),
    )
    importer.add_argument(
        "--skip-existing", action="store_true", help="skip a log whose session id is already in the store"
    )

    exporter = commands.add_parser(
        "export",
        help="write a session as a log that `import` reads back",
        description=(
            "Write a session as a complete log: its header line, then its records (events and packed chunk rows) "
            "in seq order. With --with-children, write a directory (-o DIR) holding session.jsonl and every "
            "subagent descendant as session.N.jsonl, parents before children, so `import DIR` restores them all."
        ),
    )
    exporter.add_argument("session_id", metavar="SESSION_ID")
    exporter.add_argument("--store", help=STORE_HELP)
    exporter.add_argument("--output", "-o", type=Path, help="write to this file (or directory) instead of stdout")
    exporter.add_argument("--with-children", action="store_true", help="also export the subagent descendants")

    lister = commands.add_parser(
        "list",
        help="list a principal's sessions, newest first",
        description="Print one JSON line per session of --owner that is not a subagent child, newest first.",
    )
    lister.add_argument("--store", help=STORE_HELP)
    lister.add_argument("--owner", default=DEFAULT_OWNER, help="whose sessions (default: %(default)s)")
    lister.add_argument("--limit", type=count, metavar="N", help="print at most N sessions (default: all)")

    closer = commands.add_parser(
        "close",
        help="close a session: it keeps its events and takes no more",
        description=(
            "Close a session, or a subagent child, by its own id (docs/protocol.md §6.3), and print "
            '{"headSeq":N,"closedAt":T}. Closing a closed session changes nothing. A server running on the same '
            "SQLite or JSONL store ends its open follow streams only when they reconnect: close through "
            "POST /v1/sessions/{id}/close while one runs."
        ),
    )
    closer.add_argument("session_id", metavar="SESSION_ID")
    closer.add_argument("--store", help=STORE_HELP)

    deleter = commands.add_parser(
        "delete",
        help="delete a session and its whole subagent tree",
        description=(
            "Delete a session, or a subagent child, by its own id, with every subagent session below it "
            '(docs/protocol.md §6.4), and print {"deleted":[ids]}. It asks first, on standard error, '
            "and reads the answer from standard input, unless --yes. A server running on the same SQLite or "
            "JSONL store tells its followers only when they reconnect: delete through DELETE /v1/sessions/{id} "
            "while one runs."
        ),
    )
    deleter.add_argument("session_id", metavar="SESSION_ID")
    deleter.add_argument("--store", help=STORE_HELP)
    deleter.add_argument("--yes", action="store_true", help="delete without asking")

    purger = commands.add_parser(
        "purge",
        help="delete the expired sessions, as the server's sweeper does (for cron)",
        description=(
            "Delete every session that has expired (docs/protocol.md §6.5): those past their own expiresAt, "
            "and those last written (created, appended to or closed) longer ago than --older-than, else "
            'than HISTORY_RETENTION. Each goes with its subagent tree. Prints {"deleted":[ids]}, or with '
            '--dry-run {"expired":[ids]} and deletes nothing. A server running on the same SQLite or '
            "JSONL store tells its followers only when they reconnect; its own sweeper tells them at once."
        ),
    )
    purger.add_argument(
        "--older-than",
        type=duration_ms,
        metavar="DURATION",
        help="also delete sessions last written this long ago: 30d, 12h, 15m, 90s or 500ms "
        "(default: $HISTORY_RETENTION, else only sessions past their own expiresAt)",
    )
    purger.add_argument("--dry-run", action="store_true", help="print the expired sessions' ids, delete nothing")
    purger.add_argument("--store", help=STORE_HELP)

    vacuumer = commands.add_parser(
        "vacuum",
        help="give the space of deleted sessions back to the file system",
        description=(
            "SQLite: rebuild the database file (VACUUM), so the pages deleted sessions freed are returned to "
            "the file system; it needs as much free disk as the file, and holds the write lock meanwhile. "
            "It refuses, saying so, while another process (a running server) has the file open: stop it first. "
            "PostgreSQL: VACUUM the store's tables, so their space is reused. JSONL: removes what a "
            "delete left behind. Prints the store's size in bytes before and after, as JSON."
        ),
    )
    vacuumer.add_argument("--store", help=STORE_HELP)

    reindexer = commands.add_parser(
        "reindex",
        help="rebuild the search index from every session's stored events",
        description=(
            "Rebuild the full-text search index (docs/protocol.md §14.3) from every session's stored events, "
            "one session at a time, each in a transaction of its own, so a running server's appends wait for "
            "one session at most. Appends keep the index themselves, and opening a store of an older schema "
            "builds it: reindex is for an index that a bug or a manual edit left out of step. SQLite and "
            'PostgreSQL only; JSONL keeps no index. Prints {"passages": N}, how many passages it holds.'
        ),
    )
    reindexer.add_argument("--store", help=STORE_HELP)

    pager = commands.add_parser(
        "page",
        help="print one page as the service would serve it",
        description="Print one session.page body (packed records, JSON) read straight from the store.",
    )
    pager.add_argument("session_id", metavar="SESSION_ID")
    pager.add_argument("--store", help=STORE_HELP)
    pager.add_argument("--through", type=count, metavar="N", help="inclusive upper seq (default: the head)")
    pager.add_argument("--before", type=count, metavar="N", help="exclusive upper seq, for paging backwards")
    pager.add_argument(
        "--max-messages", type=int, default=DEFAULT_MAX_MESSAGES, metavar="N", help="messages (default: %(default)s)"
    )
    pager.add_argument("--max-bytes", type=count, metavar="N", help="byte target for the body")
    return parser


def _settings(args: argparse.Namespace) -> Settings:
    """A store command's settings: the store from ``--store`` or ``HISTORY_STORE``, the rest as ``serve`` reads them."""
    try:
        settings = ServerSettings.from_env(store_url=args.store).app
    except ValueError as exc:
        raise CommandError(str(exc)) from exc
    if urlsplit(settings.store_url).scheme == "memory":
        raise CommandError(f"memory:// keeps nothing between commands; `{args.command}` needs a store on disk")
    return settings


def _server_settings(args: argparse.Namespace) -> ServerSettings:
    """The settings of ``serve``: the app's and the launcher's, from ``HISTORY_*`` and the flags."""
    tokens, auth = None, args.auth
    if args.token_file is not None:
        if auth == "none":
            raise CommandError("--token-file needs --auth token; with --auth none no token is checked")
        try:
            tokens = read_token_file(args.token_file)
        except OSError as exc:
            raise CommandError(f"cannot read the token file {args.token_file}: {exc.strerror}") from exc
        # A token file means tokens are to be checked: never serve open by mistake.
        auth = "token"
    try:
        return ServerSettings.from_env(
            store_url=args.store,
            host=args.host,
            port=args.port,
            auth=auth,
            tokens=tokens,
            cors_origins=None if args.cors_origin is None else tuple(args.cors_origin),
            workers=args.workers,
            metrics=False if args.no_metrics else None,
            metrics_port=args.metrics_port,
            log_format=args.log_format,
            log_level=args.log_level,
        )
    except ValueError as exc:
        raise CommandError(str(exc)) from exc


def main(argv: Sequence[str] | None = None, *, out: TextIO | None = None, err: TextIO | None = None) -> int:
    """Run the command line; returns the exit status."""
    out, err = out or sys.stdout, err or sys.stderr
    args = _parser().parse_args(argv)
    if _MISSING is not None:
        print(
            f"{PROG}: error: the service and its stores need the server extra "
            f"(pip install 'history-transport[server]'): {_MISSING}",
            file=err,
        )
        return 1
    try:
        if args.command == "serve":
            server = _server_settings(args)
            with launcher.listen(server) as sock:
                print(f"{PROG}: store {describe_url(server.app.store_url)}", file=err)
                return launcher.serve(sock, server, demo=args.demo, out=out, err=err)
        settings = _settings(args)
        print(f"{PROG}: store {describe_url(settings.store_url)}", file=err)
        anyio.run(store_commands.run, args, settings, out, err)
        out.flush()
    except BrokenPipeError:
        # The reader went away (`export ... | head`): it has what it wanted.
        discard(out)
        return 0
    except (CommandError, StoreError, OSError) as exc:
        # One line, whatever the driver's message looks like.
        lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
        print(f"{PROG}: error: {'; '.join(lines)}", file=err)
        return 1
    return 0
