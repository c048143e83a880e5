"""What every result line carries: the machine it ran on, and one way to print the line."""

from __future__ import annotations

import json
import os
import platform
from importlib.metadata import version
from typing import Any, Final

__all__ = ["emit", "machine"]

PACKAGES: Final = ["msgspec", "zstandard", "brotli", "httpx", "uvicorn", "starlette", "sqlalchemy"]


def machine(**extra: Any) -> dict[str, Any]:
    """CPU count, Python, platform and our key package versions, plus ``extra``."""
    return {
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "packages": {name: version(name) for name in PACKAGES},
        **extra,
    }


def emit(name: str, value: Any) -> None:
    """Print ``HISTORY_<name>_RESULT {json}`` on a line of its own, as `bench.report` reads it."""
    print(f"\nHISTORY_{name}_RESULT {json.dumps(value, sort_keys=True)}", flush=True)
