"""Words as search compares them (docs/protocol.md §14.2): one rule for the index, the query and the snippet.

A text's **tokens** are its runs of letters and digits, except that each character of a
script written without spaces between words (Han, Hiragana, Katakana) is a token of its
own: no tokenizer at hand knows where a Chinese word ends, and a phrase of single
characters finds any substring of three or more, or two, or one. A token is compared
**folded**: case-folded and compatibility-decomposed, then case-folded again (the bold ``𝐀``
is ``a``), its combining marks dropped (``É`` and ``e`` are one word), and cut at
`MAX_TOKEN` characters; a character of a script without spaces keeps its marks (``が`` is
not ``か``). A combining mark belongs to the letter before it, so text typed with separate
accents (``e`` + U+0301) reads as its composed form does, and a character that is neither a
letter nor a digit (``・``, ``゛``) is no token.

Every store indexes the folded tokens this module gives, not its own tokenizer's reading of
the text: SQLite's FTS5 reads them as space-separated words (``unicode61``), PostgreSQL as
a ``tsvector`` literal built here, the memory store compares them as they are. So every
store finds the same passages for the same query.
"""

from __future__ import annotations

import functools
import re
import unicodedata
from collections.abc import Iterator
from typing import Final, NamedTuple

__all__ = ["MAX_TOKEN", "extended", "fold", "folded_tokens", "lexeme", "spans", "terms", "tsvector"]

# The longest token compared, in characters: longer ones (a base64 blob, a hash) are cut here.
MAX_TOKEN: Final = 64
# Scripts written without spaces between words: Hiragana, Katakana (and its extensions,
# half-width forms), CJK ideographs (the unified blocks, their extensions and compatibility forms).
_UNSPACED: Final = "\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uff66-\uff9f\U00020000-\U0003134f"


class _Patterns(NamedTuple):
    token: re.Pattern[str]
    one_unspaced: re.Pattern[str]
    mark: re.Pattern[str]
    letter: re.Pattern[str]
    unspaced: re.Pattern[str]


@functools.cache
def _patterns() -> _Patterns:
    """The patterns of a token, made on first use: listing the marks takes a tenth of a second, which a process
    that never searches or indexes should not pay."""
    # A combining mark belongs to the letter before it (``e`` + U+0301 is one token, as ``é`` is).
    ranges: list[list[int]] = []
    for code in range(0x10000):
        if unicodedata.category(chr(code)).startswith("M"):
            if ranges and ranges[-1][1] == code - 1:
                ranges[-1][1] = code
            else:
                ranges.append([code, code])
    marks = "".join(re.escape(chr(a)) if a == b else f"{re.escape(chr(a))}-{re.escape(chr(b))}" for a, b in ranges)
    letter = f"(?![{_UNSPACED}])[^\\W_]"
    unspaced = f"(?=[^\\W_])[{_UNSPACED}]"
    return _Patterns(
        re.compile(f"{unspaced}[{marks}]*|{letter}(?:{letter}|[{marks}])*"),
        re.compile(f"{unspaced}[{marks}]*"),
        re.compile(f"[{marks}]"),
        re.compile(letter),
        re.compile(unspaced),
    )


def spans(text: str) -> Iterator[tuple[int, int]]:
    """Where each token of ``text`` starts and ends, in order."""
    for match in _patterns().token.finditer(text):
        yield match.span()


def fold(token: str) -> tuple[str, ...]:
    """The folded tokens a token compares as: usually one, but a decomposition may split it (``½``)."""
    if token.isascii():
        return (token.lower()[:MAX_TOKEN],)
    return _fold(token)


@functools.lru_cache(maxsize=65536)
def _fold(token: str) -> tuple[str, ...]:
    # Cached: the words of a language, and the characters of an unspaced script, repeat.
    if _patterns().one_unspaced.fullmatch(token):
        # Kana keep their voicing marks (が is not か); half-width forms become full-width.
        return (unicodedata.normalize("NFKC", token),)
    # Compatibility caseless (Unicode's D146): folded again once decomposed, as the bold 𝐀 decomposes to A.
    decomposed = _nfkd(_nfkd(unicodedata.normalize("NFD", token).casefold()).casefold())
    bare = "".join(ch for ch in decomposed if not unicodedata.combining(ch))
    return tuple(part[:MAX_TOKEN] for part in _patterns().token.findall(unicodedata.normalize("NFC", bare)))


def _nfkd(text: str) -> str:
    return unicodedata.normalize("NFKD", text)


def folded_tokens(text: str) -> list[str]:
    """Every folded token of ``text``, in order."""
    out: list[str] = []
    for token in _patterns().token.findall(text):
        if token.isascii():
            out.append(token.lower()[:MAX_TOKEN])
        else:
            out.extend(_fold(token))
    return out


def extended(words: list[str], text: str, piece: str) -> list[str]:
    """``folded_tokens(text + piece)``, from ``words == folded_tokens(text)``: only the token that may run across
    the join is read again, so a block's next delta costs its own length, not the passage's."""
    patterns = _patterns()
    start = len(text)
    while start > 0 and patterns.mark.fullmatch(text[start - 1]):
        start -= 1
    if start > 0 and patterns.unspaced.fullmatch(text[start - 1]):
        start -= 1  # a mark may yet follow this character, but nothing else joins it
    else:
        while start > 0 and (patterns.letter.fullmatch(text[start - 1]) or patterns.mark.fullmatch(text[start - 1])):
            start -= 1
    if start == len(text):
        return [*words, *folded_tokens(piece)]
    kept = len(words) - len(folded_tokens(text[start:]))
    return [*words[:kept], *folded_tokens(text[start:] + piece)]


def terms(words: list[str]) -> str:
    """Folded tokens joined by spaces: what SQLite's FTS5 indexes for a passage."""
    return " ".join(words)


def tsvector(words: list[str]) -> str:
    """Folded tokens as a PostgreSQL ``tsvector`` literal, each with its positions (1-based)."""
    positions: dict[str, list[str]] = {}
    for at, token in enumerate(words, start=1):
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
