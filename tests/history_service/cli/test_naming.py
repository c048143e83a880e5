"""Naming imported logs: placeholders always renamed, shared and invalid ids with the flag, renames per folder."""

from __future__ import annotations

from pathlib import Path

from codec import MAX_SESSION_ID, SessionHeader, check_session_id
from history_service.cli.naming import ImportOptions, Naming, derived_id, is_templated, plan_names

OWNER = "local"


def header(session_id: str, parent: str | None = None) -> SessionHeader:
    if parent is None:
        return SessionHeader(id=session_id, createdAt=1)
    return SessionHeader(id=session_id, createdAt=1, parentSession=parent, origin="subagent")


def test_a_placeholder_is_renamed_by_default_and_its_child_and_folder_follow(tmp_path: Path) -> None:
    parent, child = tmp_path / "run" / "session.jsonl", tmp_path / "run" / "session.1.jsonl"
    other = tmp_path / "x.jsonl"
    headers = {parent: header("{{sessionId}}"), child: header("{{childId}}", "{{sessionId}}"), other: header("kept")}
    naming = plan_names(headers, ImportOptions(owner=OWNER))
    assert naming == Naming(
        headers={parent: header("run"), child: header("run.1", "run"), other: header("kept")},
        renames={
            parent: {"{{sessionId}}": "run", "{{childId}}": "run.1"},
            child: {"{{sessionId}}": "run", "{{childId}}": "run.1"},
            other: {},
        },
    )


def test_a_shared_or_invalid_id_is_kept_by_default_and_renamed_with_the_flag(tmp_path: Path) -> None:
    first, second, bad = tmp_path / "a" / "session.jsonl", tmp_path / "b" / "session.jsonl", tmp_path / "c.jsonl"
    headers = {first: header("dup"), second: header("dup"), bad: header("no spaces")}
    kept = plan_names(headers, ImportOptions(owner=OWNER))
    assert {path: h.id for path, h in kept.headers.items()} == {first: "dup", second: "dup", bad: "no spaces"}
    renamed = plan_names(headers, ImportOptions(owner=OWNER, rename_shared=True))
    assert {path: h.id for path, h in renamed.headers.items()} == {first: "a", second: "b", bad: tmp_path.name + ".c"}
    assert renamed.renames[first] == {"dup": "a"} and renamed.renames[second] == {"dup": "b"}


def test_a_new_id_names_the_one_log_and_its_references_to_itself(tmp_path: Path) -> None:
    path = tmp_path / "session.jsonl"
    naming = plan_names({path: header("{{sessionId}}")}, ImportOptions(owner=OWNER, new_id="mine"))
    assert naming == Naming(headers={path: header("mine")}, renames={path: {"{{sessionId}}": "mine"}})


def test_derived_ids_are_valid_stable_and_bounded(tmp_path: Path) -> None:
    assert derived_id(tmp_path / "a b" / "session.12.jsonl") == "a_b.12"
    assert derived_id(tmp_path / "run" / "session.expected.jsonl") == "run.session.expected"
    long = tmp_path / ("x" * 300) / "session.jsonl"
    assert derived_id(long) == derived_id(long) and len(derived_id(long)) == MAX_SESSION_ID
    for path in (long, tmp_path / "..." / "session.jsonl"):
        check_session_id(derived_id(path))


def test_is_templated() -> None:
    assert is_templated("{{sessionId}}") and is_templated("x-{{n}}") and not is_templated("a{b}c")
