"""Words as search compares them (persistence/search/terms.py): folded tokens, and the ``tsvector`` literal of them."""

from __future__ import annotations

from hypothesis import example, given, strategies as st

from persistence.search.terms import MAX_TOKEN, fold, folded_tokens, tsvector


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
    assert all(fold(token) == [token] for token in tokens)
    assert folded_tokens(" ".join(tokens)) == tokens


def test_a_tsvector_holds_each_tokens_positions_up_to_postgresqls_256() -> None:
    assert tsvector("") == ""
    assert tsvector("b a B") == "'b':1,3 'a':2"
    assert tsvector("a " * 300) == "'a':" + ",".join(str(at) for at in range(1, 257))
