"""Finding logs: each folder's parent before its children in N order, recursively, and every other .jsonl named."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from history_service.cli.log_files import LogFiles, child_number, find_logs


def touch(*paths: Path) -> None:
    for path in paths:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"{}\n")


def test_each_folder_gives_its_parent_then_its_children_in_number_order_and_names_the_other_jsonl(
    tmp_path: Path,
) -> None:
    a, b = tmp_path / "a", tmp_path / "deep" / "b"
    touch(a / "session.10.jsonl", a / "session.2.jsonl", a / "session.jsonl", a / "session.expected.jsonl")
    touch(b / "session.jsonl", b / "events.jsonl", b / "notes.txt", tmp_path / ".hidden" / "session.jsonl")
    assert find_logs([tmp_path]) == LogFiles(
        logs=[a / "session.jsonl", a / "session.2.jsonl", a / "session.10.jsonl", b / "session.jsonl"],
        passed_over=[a / "session.expected.jsonl", b / "events.jsonl"],
    )


def test_a_file_given_by_its_own_path_is_read_whatever_its_name_and_given_twice_once(tmp_path: Path) -> None:
    touch(tmp_path / "session.expected.jsonl", tmp_path / "session.jsonl")
    found = find_logs([tmp_path / "session.expected.jsonl", tmp_path, tmp_path / "session.jsonl"])
    assert found == LogFiles(logs=[tmp_path / "session.expected.jsonl", tmp_path / "session.jsonl"], passed_over=[])


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda root: None, "no such file or directory"),
        (lambda root: (root / "sub").mkdir(parents=True), "holds no session.jsonl or session.N.jsonl"),
    ],
    ids=["missing", "no-log"],
)
def test_a_path_with_no_log_is_an_error_that_names_it(
    tmp_path: Path, make: Callable[[Path], object], message: str
) -> None:
    make(tmp_path / "x")
    with pytest.raises(ValueError, match=message):
        find_logs([tmp_path / "x"])


@pytest.mark.parametrize(
    ("name", "number"),
    [("session.3.jsonl", 3), ("session.jsonl", None), ("session.x.jsonl", None), ("session.3.json", None)],
)
def test_child_number(name: str, number: int | None) -> None:
    assert child_number(Path(name)) == number
