"""``python -m history_service.cli``: the ``history-service`` command line."""

from __future__ import annotations

import sys

from history_service.cli.program import main

sys.exit(main())
