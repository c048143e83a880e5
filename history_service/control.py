"""Control characters: what no name, principal or log field may carry as it is.

One definition, Unicode's category Cc: C0 (U+0000 to U+001F), DEL and C1 (U+0080 to U+009F).
A name or principal holding one is refused; a log line escapes each one (docs/protocol.md
§8.1, §13.1; docs/deploy.md).
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["CONTROL", "CONTROL_CLASS", "has_control"]

# The body of a regular expression's class, escaped, so Python and JSON Schema patterns (OpenAPI) read it alike.
CONTROL_CLASS: Final = r"\x00-\x1f\x7f-\x9f"
CONTROL: Final = re.compile(f"[{CONTROL_CLASS}]")


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character."""
    return CONTROL.search(text) is not None
