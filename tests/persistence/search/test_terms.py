"""Tokens (docs/protocol.md §14.2): one rule for the index, the query and the marks, in any script."""

from __future__ import annotations

from hypothesis import example, given, settings, strategies as st

from persistence.search.terms import MAX_TOKEN, extended, fold, folded_tokens, spans, terms, tsvector


def test_words_are_runs_of_letters_and_digits_and_unspaced_scripts_are_characters() -> None:
    assert folded_tokens("Edit retry.py: RATE_LIMIT=42!") == ["edit", "retry", "py", "rate", "limit", "42"]
    assert folded_tokens("看看北京大学的ひらがなカタカナ") == list("看看北京大学的ひらがなカタカナ")
    assert folded_tokens("mixed北京text") == ["mixed", "北", "京", "text"]
    assert folded_tokens("한국어 단어") == ["한국어", "단어"]


def test_tokens_compare_case_folded_without_marks_and_cut_at_max_token() -> None:
    assert folded_tokens("Émile ÇA Straße") == ["emile", "ca", "strasse"]
    assert fold("½") == ("1", "2")
    assert folded_tokens("x" * 100) == ["x" * MAX_TOKEN]


def test_a_combining_mark_belongs_to_its_letter_and_symbols_are_no_tokens() -> None:
    assert folded_tokens("Re\u0301sume\u0301 na\u0308ive") == folded_tokens("Résumé naïve") == ["resume", "naive"]
    assert folded_tokens("か\u3099") == folded_tokens("が") == ["が"]
    assert folded_tokens("・ ゛ ゙") == []


def test_spans_locate_each_token_in_the_text() -> None:
    text = "a rate-limit, 北京"
    assert [text[a:b] for a, b in spans(text)] == ["a", "rate", "limit", "北", "京"]


def test_the_stores_forms_hold_the_tokens_in_order_with_positions() -> None:
    words = folded_tokens("Rate limit, rate!")
    assert terms(words) == "rate limit rate"
    assert tsvector(words) == "'rate':1,3 'limit':2"
    assert tsvector([]) == "" and terms(folded_tokens("...")) == ""


@settings(max_examples=1000)
@given(st.text(), st.text())
def test_tokens_extended_by_a_piece_are_the_tokens_of_the_whole(text: str, piece: str) -> None:
    assert extended(folded_tokens(text), text, piece) == folded_tokens(text + piece)


@given(st.text())
def test_any_text_gives_tokens_of_letters_and_digits_that_fold_to_themselves(text: str) -> None:
    for token in folded_tokens(text):
        assert token and len(token) <= MAX_TOKEN and "'" not in token and " " not in token
        assert folded_tokens(token) == [token]


def test_a_token_folds_case_compatibility_forms_and_marks_away() -> None:
    assert folded_tokens("Straße É café ½") == ["strasse", "e", "cafe", "1", "2"]
    # Decomposed, the mathematical letters are capitals still: they are folded again.
    assert folded_tokens("𝐀𝐁𝐂 𝚿") == ["abc", "ψ"]
    assert folded_tokens("北京 k" + "x" * 100) == ["北", "京", "k" + "x" * (MAX_TOKEN - 1)]


@given(st.text())
@example("𝐀 𝚿 ᏸ ß ǅ İ ﬃ ﷺ ᦰ")
def test_folded_tokens_fold_to_themselves(text: str) -> None:
    """What every store indexes is folded already: no store's own case folding can read it otherwise."""
    tokens = folded_tokens(text)
    assert all(fold(token) == (token,) for token in tokens)
    assert folded_tokens(" ".join(tokens)) == tokens


def test_a_tsvector_holds_each_tokens_positions_up_to_postgresqls_256() -> None:
    assert tsvector([]) == ""
    assert tsvector(folded_tokens("b a B")) == "'b':1,3 'a':2"
    assert tsvector(folded_tokens("a " * 300)) == "'a':" + ",".join(str(at) for at in range(1, 257))
