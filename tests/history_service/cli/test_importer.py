"""history-service import: naming, skipping, recursion, whole-or-nothing, the summary, and the whole corpus."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import anyio
import msgspec
import pytest

from codec import Event, SessionHeader, encode, encode_lines, read_header, read_session_log, written
from history_client import AsyncHistoryClient
from history_service.app import create_app
from history_service.cli.program import main
from history_service.cli.references import References
from history_service.scenarios import multi_turn
from history_service.settings import Settings
from persistence import HistoryStore, StoreError, open_store
from testing.asgi import serving
from testing.corpus import CORPUS_ENV, corpus_dir
from testing.events import tool

_IMPORTED = re.compile(r"imported (\S+) \(.*\) from (.+)")


def run(*argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    return main(list(argv), out=out, err=err), out.getvalue(), err.getvalue()


def write_log(path: Path, header: SessionHeader, events: list[Event]) -> list[Event]:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"".join(encode(item) + b"\n" for item in [header, *events]))
    return events


def header(session_id: str, **fields: Any) -> SessionHeader:
    return SessionHeader(id=session_id, createdAt=1000, **fields)


def child_header(session_id: str, parent: str) -> SessionHeader:
    return header(session_id, parentSession=parent, origin="subagent", delegationDepth=1)


def imported_ids(out: str) -> dict[Path, str]:
    return {Path(m[2]): m[1] for line in out.splitlines() if (m := _IMPORTED.fullmatch(line))}


async def stored(url: str, session_id: str) -> tuple[SessionHeader, list[Event]]:
    store = await open_store(url)
    try:
        info = await store.get_session(session_id)
        return info.header, await store.read_events(session_id, 0, info.head_seq + 1)
    finally:
        await store.close()


async def child_ids(url: str, parent: str) -> list[str]:
    store = await open_store(url)
    try:
        return [h.id for h in await store.children(parent)]
    finally:
        await store.close()


def templated_tree(root: Path) -> dict[str, list[Event]]:
    """Two trees with the placeholder id (one with a child), and two logs sharing one id, one folder deeper."""
    return {
        "a": write_log(root / "a" / "session.jsonl", header("{{sessionId}}"), multi_turn(seed=1, turns=2)),
        "a.1": write_log(
            root / "a" / "session.1.jsonl", child_header("{{childId}}", "{{sessionId}}"), multi_turn(seed=2, turns=1)
        ),
        "b": write_log(root / "b" / "session.jsonl", header("{{sessionId}}"), multi_turn(seed=3, turns=1)),
        "c": write_log(root / "deep" / "c" / "session.jsonl", header("dup"), multi_turn(seed=4, turns=1)),
        "d": write_log(root / "deep" / "d" / "session.jsonl", header("dup"), multi_turn(seed=5, turns=1)),
        "unique-id": write_log(root / "e" / "session.jsonl", header("unique-id"), multi_turn(seed=6, turns=1)),
    }


def test_rename_templated_names_each_log_for_its_folder_the_same_on_every_run(tmp_path: Path) -> None:
    expected = templated_tree(tmp_path / "logs")
    url = f"sqlite:///{tmp_path / 'h.db'}"
    status, out, err = run("import", "--store", url, "--rename-templated", str(tmp_path / "logs"))
    assert status == 0, err
    assert sorted(imported_ids(out).values()) == sorted(expected)
    assert "import: 6 imported, 0 unchanged, 0 skipped, 0 failed" in out
    for session_id, events in expected.items():
        got_header, got_events = anyio.run(stored, url, session_id)
        assert got_events == events, session_id
    child, _ = anyio.run(stored, url, "a.1")
    assert child.parentSession == "a", "a child follows its parent's new id"
    assert anyio.run(child_ids, url, "a") == ["a.1"]

    status, out, err = run("import", "--store", url, "--rename-templated", str(tmp_path / "logs"))
    assert status == 0, err
    assert "import: 0 imported, 6 unchanged, 0 skipped, 0 failed" in out
    assert sorted(re.findall(r"^unchanged (\S+) \(\d+ events, already stored\) from", out, re.M)) == sorted(expected)


def test_placeholders_are_renamed_by_default_and_a_shared_id_fails_the_later_log_naming_the_flag(
    tmp_path: Path,
) -> None:
    expected = templated_tree(tmp_path / "logs")
    url = f"sqlite:///{tmp_path / 'h.db'}"
    status, out, err = run("import", "--store", url, str(tmp_path / "logs"))
    assert status == 1
    assert sorted(imported_ids(out).values()) == ["a", "a.1", "b", "dup", "unique-id"]
    assert f"imported a ({len(expected['a'])} events, renamed from '{{{{sessionId}}}}')" in out
    assert anyio.run(stored, url, "a.1")[0].parentSession == "a"
    assert "import: 5 imported, 0 unchanged, 0 skipped, 1 failed" in out
    deep = tmp_path / "logs" / "deep"
    first, second = deep / "c" / "session.jsonl", deep / "d" / "session.jsonl"
    assert (
        f"  failed {second}: session 'dup' already exists and differs from this log: {first} of this import has "
        "that id too (--rename-templated names each for its folder)"
    ) in out
    assert err.splitlines()[-1] == "history-service: error: 1 of 6 logs not imported"
    assert anyio.run(stored, url, "unique-id")[1], "logs after the failure are imported"
    with pytest.raises(StoreError):
        anyio.run(stored, url, "{{sessionId}}")


def test_an_identical_import_again_is_unchanged_writes_nothing_and_succeeds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    templated_tree(tmp_path / "logs")
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("import", "--store", url, "--rename-templated", str(tmp_path / "logs"))[0] == 0
    store_type = type(anyio.run(_opened, url))

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("an unchanged log writes nothing")

    monkeypatch.setattr(store_type, "create_session", refuse)
    monkeypatch.setattr(store_type, "append", refuse)
    status, out, err = run("import", "--store", url, "--rename-templated", str(tmp_path / "logs"))
    assert (status, err.count("error")) == (0, 0), err
    assert "import: 0 imported, 6 unchanged, 0 skipped, 0 failed" in out


def test_files_that_are_not_read_are_named_and_given_by_path_are_read(tmp_path: Path) -> None:
    events = write_log(tmp_path / "run" / "session.jsonl", header("run-1"), multi_turn(seed=1, turns=1))
    expected = write_log(tmp_path / "run" / "session.expected.jsonl", header("run-2"), multi_turn(seed=2, turns=1))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    status, out, _ = run("import", "--store", url, str(tmp_path))
    passed_over = tmp_path / "run" / "session.expected.jsonl"
    assert status == 0
    assert f"skipped {passed_over}: not read: an import reads session.jsonl and session.N.jsonl" in out
    assert "import: 1 imported, 0 unchanged, 1 skipped, 0 failed" in out
    assert f"  skipped {passed_over}: not read" in out
    assert anyio.run(stored, url, "run-1")[1] == events
    assert run("import", "--store", url, str(passed_over))[0] == 0
    assert anyio.run(stored, url, "run-2")[1] == expected


SHARED_CHILD = "c0ffee00-5eed-4c01-8d00-000000000c01"


def family(folder: Path, parent_id: str, child_id: str) -> None:
    """A parent that starts a child and names it as the harness does, in its results, arguments and notices."""
    arguments = json.dumps({"subagent_id": child_id, "message": "again"})
    parent_events = [
        Event("turn/start", 0, 10, {"turn": 1}),
        Event("tool/result", 1, 11, {"content": [{"type": "text", "text": f"started subagent {child_id}"}]}),
        tool(2, 12, arguments[:25], call_id="call-1", name="send_message"),
        tool(3, 13, arguments[25:], call_id="call-1", name="send_message"),
        Event("tool/call", 4, 14, {"callId": "call-1", "name": "send_message", "arguments": arguments}),
        Event("tool-workflow/agent-start", 5, 15, {"childId": child_id, "label": "workflow-child"}),
        Event("user/message", 6, 16, {"source": {"kind": "subagent-report", "senderSessionId": child_id}}),
    ]
    write_log(folder / "session.jsonl", header(parent_id), parent_events)
    write_log(folder / "session.1.jsonl", child_header(child_id, parent_id), multi_turn(seed=3, turns=1))


def test_renaming_a_child_rewrites_every_reference_its_folder_makes_to_it(tmp_path: Path) -> None:
    family(tmp_path / "logs" / "one", "c0ffee00-5eed-4a01-8d00-00000000a001", SHARED_CHILD)
    family(tmp_path / "logs" / "two", "c0ffee00-5eed-4a01-8d00-00000000a001", SHARED_CHILD)
    family(tmp_path / "logs" / "three", "{{sessionId}}", "{{childId}}")
    write_log(tmp_path / "logs" / "alone" / "session.jsonl", header(SHARED_CHILD), multi_turn(seed=4, turns=1))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    status, out, err = run("import", "--store", url, "--rename-templated", str(tmp_path / "logs"))
    assert status == 0, err
    assert sorted(imported_ids(out).values()) == ["alone", "one", "one.1", "three", "three.1", "two", "two.1"]
    for parent in ("one", "two", "three"):
        child = f"{parent}.1"
        _, events = anyio.run(stored, url, parent)
        text = encode_lines(events).decode()
        assert text.count(child) == 5 and SHARED_CHILD not in text and "{{childId}}" not in text, parent
        assert json.loads(events[4].data["arguments"])["subagent_id"] == child
        assert json.loads(events[2].data.chunk.argumentsDelta + events[3].data.chunk.argumentsDelta) == {
            "subagent_id": child,
            "message": "again",
        }
        assert anyio.run(child_ids, url, parent) == [child]
        assert anyio.run(_read_child, url, parent, child), "the child reads through its parent"


async def _read_child(url: str, parent: str, child: str) -> list[Event]:
    store = await open_store(url)
    try:
        async with serving(create_app(Settings(store_url=url), store=store)) as http:
            return [e async for e in AsyncHistoryClient(http_client=http).iter_history(parent, child=child)]
    finally:
        await store.close()


def test_a_missing_time_is_derived_from_the_header_and_a_log_without_any_keeps_zero(tmp_path: Path) -> None:
    body = b'{"type":"turn/start","data":{"turn":1}}\n{"type":"turn/end","time":1500,"data":{"turn":1}}\n'
    for name, created in (("timed", 1_700_000_000_000), ("untimed", 0)):
        head = encode(SessionHeader(id=name, createdAt=created))
        (tmp_path / f"{name}.jsonl").write_bytes(head + b"\n" + body + b'{"type":"session/title","data":{}}\n')
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("import", "--store", url, str(tmp_path / "timed.jsonl"), str(tmp_path / "untimed.jsonl"))[0] == 0
    assert [e.time for e in anyio.run(stored, url, "timed")[1]] == [1_700_000_000_000, 1500, 1500]
    assert [e.time for e in anyio.run(stored, url, "untimed")[1]] == [0, 1500, 1500]


def test_id_imports_one_log_under_a_new_id(tmp_path: Path) -> None:
    events = write_log(tmp_path / "one" / "session.jsonl", header("{{sessionId}}"), multi_turn(seed=7, turns=1))
    write_log(tmp_path / "two" / "session.jsonl", header("{{sessionId}}"), multi_turn(seed=8, turns=1))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("import", "--store", url, "--id", "first", str(tmp_path / "one" / "session.jsonl"))[0] == 0
    assert run("import", "--store", url, "--id", "second", str(tmp_path / "two"))[0] == 0
    got_header, got_events = anyio.run(stored, url, "first")
    assert written(got_header) == header("first") and got_events == events
    status, _, err = run("import", "--store", url, "--id", "x", str(tmp_path))
    assert status == 1 and "--id names one log, and 2 were given" in err
    status, _, err = run("import", "--store", url, "--id", "../x", str(tmp_path / "one"))
    assert status == 1 and "--id '../x' is not a session id" in err


def test_skip_existing_skips_a_taken_id_and_imports_the_rest(tmp_path: Path) -> None:
    write_log(tmp_path / "logs" / "a" / "session.jsonl", header("a"), multi_turn(seed=1, turns=1))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("import", "--store", url, str(tmp_path / "logs"))[0] == 0
    write_log(tmp_path / "logs" / "a" / "session.jsonl", header("a"), multi_turn(seed=9, turns=1))
    write_log(tmp_path / "logs" / "b" / "session.jsonl", header("b"), multi_turn(seed=2, turns=1))
    status, out, _ = run("import", "--store", url, str(tmp_path / "logs"))
    assert status == 1 and "import: 1 imported, 0 unchanged, 0 skipped, 1 failed" in out
    assert "session 'a' already exists and differs from this log (--skip-existing skips it" in out
    status, out, _ = run("import", "--store", url, "--skip-existing", str(tmp_path / "logs"))
    assert status == 0
    assert "import: 0 imported, 1 unchanged, 1 skipped, 0 failed" in out
    assert "skipped a from" in out and "session 'a' already exists" in out


def test_a_folder_is_walked_recursively_and_one_with_no_log_is_named(tmp_path: Path) -> None:
    events = write_log(tmp_path / "x" / "y" / "z" / "session.jsonl", header("deep"), multi_turn(seed=1, turns=1))
    (tmp_path / "empty" / "sub").mkdir(parents=True)
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert run("import", "--store", url, str(tmp_path / "x"))[0] == 0
    assert anyio.run(stored, url, "deep")[1] == events
    status, _, err = run("import", "--store", url, str(tmp_path / "empty"))
    assert status == 1
    assert f"{tmp_path / 'empty'} holds no session.jsonl or session.N.jsonl, in it or in any folder under it" in err


def test_a_bad_log_is_not_imported_at_all_and_its_child_neither(tmp_path: Path) -> None:
    root = tmp_path / "logs"
    write_log(root / "a" / "session.jsonl", header("a"), multi_turn(seed=1, turns=3))
    lines = (root / "a" / "session.jsonl").read_bytes().splitlines(keepends=True)
    (root / "a" / "session.jsonl").write_bytes(b"".join(lines[:6] + [b'{"type":"x"}\n'] + lines[6:]))
    write_log(root / "a" / "session.1.jsonl", child_header("a-child", "a"), multi_turn(seed=2, turns=1))
    events = write_log(root / "b" / "session.jsonl", header("b"), multi_turn(seed=3, turns=1))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    status, out, err = run("import", "--store", url, str(root))
    assert status == 1
    assert "import: 1 imported, 0 unchanged, 0 skipped, 2 failed" in out
    assert "session.jsonl: line 7: object missing required field `data`" in err
    assert "its parent 'a' was not imported" in out
    assert anyio.run(stored, url, "b")[1] == events
    for missing in ("a", "a-child"):
        with pytest.raises(StoreError):
            anyio.run(stored, url, missing)


def test_an_append_that_fails_leaves_an_empty_session_that_a_rerun_completes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    events = write_log(tmp_path / "a" / "session.jsonl", header("a"), multi_turn(seed=1, turns=3))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    calls: list[int] = []
    store_type = type(anyio.run(_opened, url))
    original = store_type.append

    async def failing(self: HistoryStore, session_id: str, batch: Any, *, life: Any = None) -> Any:
        calls.append(len(batch))
        raise StoreError("disk full")

    monkeypatch.setattr(store_type, "append", failing)
    status, out, _ = run("import", "--store", url, str(tmp_path / "a"))
    assert status == 1 and calls == [len(events)], "one append carries the whole log"
    assert "importing this log again completes it" in out
    assert anyio.run(stored, url, "a")[1] == []
    monkeypatch.setattr(store_type, "append", original)
    status, out, _ = run("import", "--store", url, str(tmp_path / "a"))
    assert status == 0 and "import: 1 imported" in out
    assert anyio.run(stored, url, "a")[1] == events


async def _opened(url: str) -> HistoryStore:
    store = await open_store(url, create=True)
    await store.close()
    return store


def test_the_whole_corpus_imports_pages_exactly_keeps_its_links_and_imports_again_unchanged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = corpus_dir()
    if root is None or not root.is_dir():
        pytest.skip(f"{CORPUS_ENV} is not set to the corpus folder; this test imports the whole corpus")
    files = sorted(root.rglob("session*.jsonl"))
    url = f"sqlite:///{tmp_path / 'h.db'}"
    status, out, err = run("import", "--store", url, "--rename-templated", str(root))
    assert status == 0, err
    ids = imported_ids(out)
    assert sorted(ids) == files, "every log, children included, imported once"
    assert len(set(ids.values())) == len(files)
    assert f"import: {len(files)} imported, 0 unchanged, 0 skipped, 0 failed" in out
    anyio.run(_page_every_session, url, ids)

    store_type = type(anyio.run(_opened, url))

    async def refuse(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("importing the corpus again writes nothing")

    monkeypatch.setattr(store_type, "create_session", refuse)
    monkeypatch.setattr(store_type, "append", refuse)
    status, out, err = run("import", "--store", url, "--rename-templated", str(root))
    assert status == 0, err
    assert f"import: 0 imported, {len(files)} unchanged, 0 skipped, 0 failed" in out


def _renames(ids: dict[Path, str], folder: Path) -> dict[str, str]:
    """The ids the import gave the logs of one folder, by the id each log recorded (the first log's, if shared)."""
    renames: dict[str, str] = {}
    for path, session_id in ids.items():
        if path.parent == folder:
            renames.setdefault(read_header(path.read_bytes().split(b"\n")[0]).id, session_id)
    return renames


async def _page_every_session(url: str, ids: dict[Path, str]) -> None:
    store = await open_store(url)
    linked = 0
    try:
        async with serving(create_app(Settings(store_url=url), store=store)) as http:
            client = AsyncHistoryClient(http_client=http, max_messages=7)
            for path, session_id in ids.items():
                log = read_session_log(path.read_bytes())
                renames = _renames(ids, path.parent)
                info = await store.get_session(session_id)
                parent = info.header.parentSession if info.header.origin == "subagent" else None
                if isinstance(parent, str):
                    recorded = log.header.parentSession
                    assert isinstance(recorded, str)
                    assert parent == renames.get(recorded, recorded), "a child follows its parent's new id"
                    got = [e async for e in client.iter_history(parent, child=session_id)]
                    linked += await _parent_names_child(store, parent, log.header.id, session_id, path)
                else:
                    got = [e async for e in client.iter_history(session_id)]
                assert got == References(renames).events(log.events), path
                as_logged = written(info.header)
                assert msgspec.structs.replace(as_logged, id=log.header.id, parentSession=log.header.parentSession) == (
                    log.header
                )
    finally:
        await store.close()
    assert linked > 0, "some parent in the corpus names its child in its events"


async def _parent_names_child(store: HistoryStore, parent: str, recorded: str, child: str, path: Path) -> int:
    """Where the recorded parent log named the child, the stored parent names it by its stored id; how often."""
    raw = (path.parent / "session.jsonl").read_bytes().split(b"\n", 1)[1].decode()
    info = await store.get_session(parent)
    text = encode_lines(await store.read_events(parent, 0, info.head_seq + 1)).decode()
    named = raw.count(recorded)
    if recorded != child:
        assert recorded not in text, f"{path}: the parent still names the child's old id"
    assert text.count(child) >= named, f"{path}: every reference to the child names {child!r}"
    return named
