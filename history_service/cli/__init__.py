"""The ``history-service`` command line, and the name its commands report under.

A command's failure is a `history_service.errors.CommandError`, reported as one line.

Nothing else in the product imports this package. Its modules:

* `history_service.cli.program`: the commands and their flags, and ``main``, which runs one
  (the ``history-service`` console script, and ``python -m history_service.cli``);
* `history_service.cli.launcher`: ``serve``, which runs the app under uvicorn;
* `history_service.cli.store_commands`: import, export, list, close, delete, purge, vacuum
  and page, straight on a store;
* `history_service.cli.importer`: storing session logs, for ``import``, with
  `history_service.cli.log_files` (finding them), `history_service.cli.naming` (the ids
  they get) and `history_service.cli.references` (what their events say of renamed ids);
* `history_service.cli.demo`: the demo session that ``serve --demo`` seeds.

This module imports none of them: ``main`` reports a client-only install (no server extra)
in one line, so importing what the commands share must not need the server's packages.
"""

from __future__ import annotations

from typing import Final

__all__ = ["PROG"]

PROG: Final = "history-service"
