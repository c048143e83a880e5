"""Words as search compares them (docs/protocol.md §14.2): one rule for the index, the query and the snippet.

A text's **tokens** are its runs of letters and digits, except that each character of a
script written without spaces between words (Han, Hiragana, Katakana) is a token of its
own: no tokenizer at hand knows where a Chinese word ends, and a phrase of single
characters finds any substring of three or more, or two, or one. A token is compared
**folded**: case-folded and compatibility-decomposed, then case-folded again (the bold ``𝐀``
is ``a``), its combining marks dropped (``É`` and ``e`` are one word), and cut at
`MAX_TOKEN` characters.

Every store indexes the folded tokens this module gives, not its own tokenizer's reading of
the text: SQLite's FTS5 reads them as space-separated words (``unicode61``), PostgreSQL as
a ``tsvector`` literal built here, the memory store compares them as they are. So every
store finds the same passages for the same query.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Iterator
from typing import Final

__all__ = ["MAX_TOKEN", "fold", "folded_tokens", "lexeme", "spans", "terms", "tsvector"]

# The longest token compared, in characters: longer ones (a base64 blob, a hash) are cut here.
MAX_TOKEN: Final = 64
# Scripts written without spaces between words: Hiragana, Katakana (and its extensions,
# half-width forms), CJK ideographs (the unified blocks, their extensions and compatibility forms).
_UNSPACED: Final = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"
_TOKEN: Final = re.compile(f"[{_UNSPACED}]|(?:(?![{_UNSPACED}])[^\\W_])+")


def spans(text: str) -> Iterator[tuple[int, int]]:
    """Where each token of ``text`` starts and ends, in order."""
    for match in _TOKEN.finditer(text):
        yield match.span()


def fold(token: str) -> list[str]:
    """The folded tokens a token compares as: usually one, but a decomposition may split it (``½``)."""
    if token.isascii():
        return [token.lower()[:MAX_TOKEN]]
    # Compatibility caseless (Unicode's D146): folded again once decomposed, as the bold 𝐀 decomposes to A.
    decomposed = _nfkd(_nfkd(unicodedata.normalize("NFD", token).casefold()).casefold())
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return [part[:MAX_TOKEN] for part in _TOKEN.findall(unicodedata.normalize("NFC", bare))]


def _nfkd(text: str) -> str:
    return unicodedata.normalize("NFKD", text)


def folded_tokens(text: str) -> list[str]:
    """Every folded token of ``text``, in order."""
    out: list[str] = []
    for token in _TOKEN.findall(text):
        if token.isascii():
            out.append(token.lower()[:MAX_TOKEN])
        else:
            out.extend(fold(token))
    return out


def terms(text: str) -> str:
    """``text``'s folded tokens, joined by spaces: what SQLite's FTS5 indexes for it."""
    return " ".join(folded_tokens(text))


def tsvector(text: str) -> str:
    """``text``'s folded tokens as a PostgreSQL ``tsvector`` literal, each with its positions (1-based)."""
    positions: dict[str, list[str]] = {}
    for at, token in enumerate(folded_tokens(text), start=1):
        kept = positions.setdefault(token, [])
        if len(kept) < _MAX_POSITIONS:
            kept.append(str(min(at, _MAX_POSITION)))
    return " ".join(f"{lexeme(token)}:{','.join(at)}" for token, at in positions.items())


# PostgreSQL keeps positions up to 16383, at most 256 of them a lexeme (passages stay far below both).
_MAX_POSITION: Final = 16383
_MAX_POSITIONS: Final = 256


def lexeme(token: str) -> str:
    """A token quoted as a ``tsvector`` or ``tsquery`` lexeme."""
    return "'" + token.replace("\\", "\\\\").replace("'", "''") + "'"
