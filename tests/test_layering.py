"""Imports point one way (docs/protocol.md §1.3): each package loads only what its layer allows."""

from __future__ import annotations

import ast
import importlib
import json
import re
import subprocess
import sys
import tomllib
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, sys
before = set(sys.modules)
import {package}
loaded = sorted({{name.split(".")[0] for name in set(sys.modules) - before}})
print(json.dumps([name for name in loaded if name not in sys.stdlib_module_names]))
"""

# The codec is pure: besides the standard library it loads only these (typing_extensions is msgspec's).
CODEC_ALLOWED = {"codec", "msgspec", "typing_extensions"}

SERVER_SIDE = {"starlette", "uvicorn", "sqlalchemy", "psycopg", "persistence", "history_service"}

FORBIDDEN = {
    "persistence": {"starlette", "uvicorn", "httpx", "history_service", "history_client"},
    "history_client": SERVER_SIDE,
}


# What pyproject.toml ships; the test and bench helpers stay out of it.
PRODUCT = [
    name
    for name in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    if "." not in name
]
HELPERS = {"testing", "tests", "bench"}


def loaded_by(package: str) -> set[str]:
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(package=package)], check=True, capture_output=True, text=True
    )
    return set(json.loads(out.stdout))


def test_codec_loads_only_its_dependencies():
    loaded = loaded_by("codec")
    assert loaded <= CODEC_ALLOWED, f"codec loads {sorted(loaded - CODEC_ALLOWED)}"


@pytest.mark.parametrize("package", sorted(FORBIDDEN))
def test_package_does_not_reach_up_the_layers(package):
    loaded = loaded_by(package)
    assert not loaded & FORBIDDEN[package], f"{package} loads {sorted(loaded & FORBIDDEN[package])}"


def test_the_client_loads_only_the_codec_and_httpx_of_our_packages():
    loaded = loaded_by("history_client")
    assert {"codec", "httpx", "history_client"} <= loaded
    assert not loaded & {"persistence", "history_service"}


def imported_by(package: str) -> dict[str, set[str]]:
    """The top-level names each source file of ``package`` imports, wherever the import statement sits."""
    found: dict[str, set[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        names = set()
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Import):
                names |= {alias.name.split(".")[0] for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names.add(node.module.split(".")[0])
        found[str(path.relative_to(ROOT))] = names
    return found


def test_the_helpers_are_not_shipped():
    assert PRODUCT and not HELPERS & set(PRODUCT)


@pytest.mark.parametrize("package", PRODUCT)
def test_the_product_never_loads_the_test_or_bench_helpers(package):
    loaded = loaded_by(package)
    assert package in loaded and not loaded & HELPERS, f"{package} loads {sorted(loaded & HELPERS)}"


@pytest.mark.parametrize("package", PRODUCT)
def test_no_product_source_imports_the_test_or_bench_helpers(package):
    """The static twin of the probe above: it also sees imports inside functions, which load only when called."""
    imports = imported_by(package)
    assert imports, f"no sources found for {package}"
    offenders = {path: sorted(names & HELPERS) for path, names in imports.items() if names & HELPERS}
    assert offenders == {}


# The JSON keys of a page, a page record and a follow snapshot (docs/protocol.md §4, §5).
PAGE_KEYS = ("records", "event", "chunks", "hasMore", "fromSeq", "toSeq", "cursor", "header")


def page_key_literals(package: str) -> dict[str, list[str]]:
    """Byte literals in ``package`` that spell a page key as JSON, e.g. ``b'{"records":['``."""
    found: dict[str, list[str]] = {}
    for path in sorted((ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Constant) and isinstance(node.value, bytes):
                hits = [key for key in PAGE_KEYS if b'"%s"' % key.encode() in node.value]
                if hits:
                    found.setdefault(str(path.relative_to(ROOT)), []).append(repr(node.value))
    return found


@pytest.mark.parametrize("package", [name for name in PRODUCT if name != "codec"])
def test_only_the_codec_writes_page_or_record_bytes(package):
    assert page_key_literals(package) == {}


def test_the_page_key_scan_sees_the_codec_writing_them():
    """The scan above is live: it finds the codec's own page and record templates."""
    assert any("records" in literal for literals in page_key_literals("codec").values() for literal in literals)


# The JavaScript side (clients/js, and the viewer the service serves) has the same shape: the
# package has no runtime dependency, and the viewer reaches it only through its public entry.
JS_PACKAGE = ROOT / "clients" / "js"
VIEWER = ROOT / "history_service" / "viewer"
# The viewer's one third-party library: a pinned package's own browser build, kept in its vendor/
# folder and named in its import map (tests/history_service/test_assets.py holds the copy to the pin).
VIEWER_VENDORED = {"markdown-it": "vendor/markdown-it.js"}
JS_IMPORT = re.compile(r"""^\s*(?:import|export)\s+(?:([^;]*?)\s+from\s+)?["']([^"']+)["']""", re.M)
JS_EXPORT = re.compile(r"^export\s+(?:async\s+)?(?:class|function\*?|const|let)\s+([A-Za-z_$][\w$]*)", re.M)
JS_NAMES = re.compile(r"\{([^}]*)\}")


def js_imports(path: Path) -> list[tuple[str, str]]:
    """Each import or re-export of a JavaScript module: (what it names, from where)."""
    return [(names or "", source) for names, source in JS_IMPORT.findall(path.read_text(encoding="utf-8"))]


def js_exports(path: Path) -> set[str]:
    """The names a module exports, following ``export *`` and ``export {…} from`` through its siblings."""
    text = path.read_text(encoding="utf-8")
    names = set(JS_EXPORT.findall(text))
    for listed in re.findall(r"^export\s*\{([^}]*)\}", text, re.M):
        names |= {part.split(" as ")[-1].strip() for part in listed.split(",") if part.strip()}
    for source in re.findall(r"""^export\s*\*\s*from\s*["']([^"']+)["']""", text, re.M):
        names |= js_exports(path.parent / source)
    return names


def test_the_javascript_package_has_no_runtime_dependency():
    manifest = json.loads((JS_PACKAGE / "package.json").read_text())
    assert not manifest.get("dependencies")
    assert manifest["exports"]["."] == {"types": "./types/index.d.ts", "default": "./src/index.js"}
    for path in sorted((JS_PACKAGE / "src").glob("*.js")):
        outside = [source for _, source in js_imports(path) if not source.startswith("./")]
        assert outside == [], f"{path.relative_to(ROOT)} imports {outside}"


def test_the_viewer_uses_only_the_public_exports_of_the_javascript_package():
    public = js_exports(JS_PACKAGE / "src" / "index.js")
    assert {"HistoryClient", "joinedText", "readPage", "packChunkRuns", "CodecError"} <= public
    scripts = sorted(VIEWER.glob("*.js"))
    assert scripts
    for path in scripts:
        for names, source in js_imports(path):
            if source.startswith("./"):
                assert (VIEWER / source).is_file() and "/" not in source[2:], f"{path.name} imports {source}"
                continue
            if source in VIEWER_VENDORED:
                continue
            assert source == "history-transport-client", f"{path.name} imports {source}"
            named = {part.split(" as ")[0].strip() for found in JS_NAMES.findall(names) for part in found.split(",")}
            assert named - {""} <= public, f"{path.name} imports non-public {sorted(named - public - {''})}"
    page = (VIEWER / "index.html").read_text(encoding="utf-8")
    assert '"history-transport-client": "./lib/index.js"' in page
    for name, vendored in VIEWER_VENDORED.items():
        assert f'"{name}": "./{vendored}"' in page and (VIEWER / vendored).is_file(), name


# No product module grows past this many lines, Python or the viewer's JavaScript: one concept
# per module (issues 24 and 42).
MAX_MODULE_LINES = 500


def product_modules() -> list[Path]:
    return sorted(path for package in PRODUCT for path in (ROOT / package).rglob("*.py"))


def test_the_product_packages_are_codec_persistence_service_and_client():
    assert {"codec", "persistence", "history_service", "history_client"} <= set(PRODUCT)


def test_no_product_module_is_over_the_size_limit():
    modules = [*product_modules(), *sorted(VIEWER.glob("*.js"))]
    sizes = {str(path.relative_to(ROOT)): len(path.read_bytes().splitlines()) for path in modules}
    assert any(path.endswith(".js") for path in sizes) and any(path.endswith(".py") for path in sizes)
    over = {path: lines for path, lines in sizes.items() if lines > MAX_MODULE_LINES}
    assert over == {}


def module_name(path: Path, root: Path = ROOT) -> str:
    parts = path.relative_to(root).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(paths: list[Path], root: Path = ROOT) -> dict[str, set[str]]:
    """Which of the given modules each one imports, ``TYPE_CHECKING`` and function-level imports included.

    A package's ``__init__`` is a module of its own: a submodule that imports from its package,
    whose ``__init__`` imports that submodule, closes a circle.
    """
    modules = {module_name(path, root): path for path in paths}
    graph: dict[str, set[str]] = {name: set() for name in modules}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            targets: list[str] = []
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parent = ".".join(package.split(".")[: len(package.split(".")) - node.level + 1])
                    base = f"{parent}.{base}" if base else parent
                targets = [base, *(f"{base}.{alias.name}" for alias in node.names)]
            graph[name] |= {target for target in targets if target in modules and target != name}
    return graph


def import_circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    circles: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for target in edges:
                if target not in index:
                    index[target] = low[target] = len(index)
                    stack.append(target)
                    on_stack.add(target)
                    work.append((target, iter(sorted(graph[target]))))
                    break
                if target in on_stack:
                    low[node] = min(low[node], index[target])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    if len(group) > 1:
                        circles.append(sorted(group))
    return circles


def test_no_import_circle_among_product_modules():
    assert import_circles(import_graph(product_modules())) == []


def test_the_circle_scan_sees_a_circle_through_a_package_and_a_type_checking_import(tmp_path):
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("from pkg.a import A\n")
    (package / "a.py").write_text("from pkg.b import B\nclass A: ...\n")
    (package / "b.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pkg import A\n")
    (package / "c.py").write_text("from . import a\n")
    graph = import_graph(sorted(package.rglob("*.py")), tmp_path)
    assert graph["pkg.c"] == {"pkg", "pkg.a"}
    assert import_circles(graph) == [["pkg", "pkg.a", "pkg.b"]]


# persistence/sql right side up (issue 42): the store is a façade over its backend, not the other way round.
SQL_STORE = ROOT / "persistence" / "sql" / "store.py"
MAX_BACKEND_METHODS = 12


def sql_store_privates() -> set[str]:
    """The private members ``SqlStore`` defines: its ``_methods`` and the ``self._names`` it assigns."""
    tree = ast.parse(SQL_STORE.read_bytes(), filename=str(SQL_STORE))
    (store,) = [node for node in tree.body if isinstance(node, ast.ClassDef) and node.name == "SqlStore"]
    names = set()
    for node in ast.walk(store):
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name.startswith("_"):
            names.add(node.name)
        elif isinstance(node, ast.Attribute) and ast.unparse(node.value) == "self" and node.attr.startswith("_"):
            names.add(node.attr)
    return {name for name in names if not name.startswith("__")}


def private_store_uses(paths: list[Path], privates: set[str], root: Path = ROOT) -> list[str]:
    """Each use of a private name of ``SqlStore`` read off anything but ``self``: ``store._x``, ``self._store._x``."""
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if not isinstance(node, ast.Attribute) or not node.attr.startswith("_") or node.attr.startswith("__"):
                continue
            owner = ast.unparse(node.value)
            if owner not in ("self", "cls") and node.attr in privates:
                found.append(f"{path.relative_to(root)}:{node.lineno}: {owner}.{node.attr}")
    return found


def type_checking_imports(path: Path) -> set[str]:
    """The names a module imports under ``if TYPE_CHECKING:``."""
    names = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for inner in node.body:
                for statement in ast.walk(inner):
                    if isinstance(statement, ast.ImportFrom):
                        names |= {f"{statement.module}.{alias.name}" for alias in statement.names}
                    elif isinstance(statement, ast.Import):
                        names |= {alias.name for alias in statement.names}
    return names


def test_no_private_member_of_the_sql_store_is_used_outside_it():
    privates = sql_store_privates()
    assert privates, "the scan found no private member of SqlStore"
    assert private_store_uses([path for path in product_modules() if path != SQL_STORE], privates) == []


def test_nothing_imports_the_sql_store_for_type_checking_only():
    offenders = {
        str(path.relative_to(ROOT)): sorted(
            name for name in names if name.endswith(".SqlStore") or name.endswith(".store")
        )
        for path in product_modules()
        if (names := type_checking_imports(path))
    }
    assert {path: names for path, names in offenders.items() if names} == {}


def test_the_store_scans_see_a_private_use_and_a_type_checking_import(tmp_path):
    module = (
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from persistence.sql.store import SqlStore\n"
        "def f(store, other):\n    store._writer\n    self._store._engine\n    other._readers\n    self._mine\n"
    )
    (tmp_path / "m.py").write_text(module)
    assert private_store_uses([tmp_path / "m.py"], {"_writer", "_engine", "_readers", "_mine"}, tmp_path) == [
        "m.py:5: store._writer",
        "m.py:6: self._store._engine",
        "m.py:7: other._readers",
    ]
    assert type_checking_imports(tmp_path / "m.py") == {"persistence.sql.store.SqlStore"}


def abstract_methods(paths: list[Path]) -> dict[str, int]:
    """How many abstract methods each class of the given modules declares (its own, not inherited)."""
    counts: dict[str, int] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.ClassDef):
                declared = [
                    item
                    for item in node.body
                    if isinstance(item, ast.FunctionDef | ast.AsyncFunctionDef)
                    and any(ast.unparse(d).endswith("abstractmethod") for d in item.decorator_list)
                ]
                if declared:
                    counts[f"{path.relative_to(ROOT)}:{node.name}"] = len(declared)
    return counts


def test_the_sql_backend_interface_is_narrow():
    counts = abstract_methods(sorted((ROOT / "persistence" / "sql").rglob("*.py")))
    assert counts, "the scan found no abstract SQL backend"
    assert {name: count for name, count in counts.items() if count > MAX_BACKEND_METHODS} == {}


# A branch on which SQL database the store runs: only the two dialect modules may ask.
DIALECT_BRANCH = re.compile(
    r"""dialect\.name\b|\b_sqlite\b|\bis_sqlite\b|\bis_postgres(ql)?\b|\b_postgres(ql)?\b"""
    r"""|\b(name|backend)\s*[!=]=\s*["'](sqlite|postgresql)["']|get_backend_name\(\)\s*[!=]="""
)
DIALECT_MODULES = {"persistence/sql/sqlite.py", "persistence/sql/postgres.py"}


def dialect_branches(paths: list[Path]) -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for path in paths:
        hits = [match.group(0) for match in DIALECT_BRANCH.finditer(path.read_text(encoding="utf-8"))]
        if hits:
            found[str(path.relative_to(ROOT))] = hits
    return found


def test_dialect_differences_live_only_in_the_dialect_modules():
    assert dialect_branches(product_modules()).keys() <= DIALECT_MODULES


def test_the_dialect_branch_scan_is_live():
    """The scan above finds branches: the dialect modules each say which backend they serve."""
    assert dialect_branches([ROOT / name for name in sorted(DIALECT_MODULES)]).keys() == DIALECT_MODULES
    for branch in ['self._sqlite = engine.dialect.name == "sqlite"', "if not is_postgres:", 'url.name == "postgresql"']:
        assert DIALECT_BRANCH.search(branch), branch


def modules_imported_from(path: Path, packages: set[str]) -> set[str]:
    """The dotted modules of ``packages`` that a source file imports, wherever the import statement sits."""
    names = set()
    for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
        if isinstance(node, ast.Import):
            names |= {alias.name for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
            if node.module in packages:
                # ``from persistence import sql`` names a module too (``from codec import splice`` a function).
                package = importlib.import_module(node.module)
                names |= {
                    f"{node.module}.{alias.name}"
                    for alias in node.names
                    if isinstance(getattr(package, alias.name, None), types.ModuleType)
                }
    return {name for name in names if name.split(".")[0] in packages}


def test_the_service_imports_only_the_public_persistence_and_codec_packages():
    packages = {"persistence", "codec"}
    offenders = {}
    for path in sorted((ROOT / "history_service").rglob("*.py")):
        imported = modules_imported_from(path, packages)
        reaching = sorted(name for name in imported if name not in packages)
        if reaching:
            offenders[str(path.relative_to(ROOT))] = reaching
    assert offenders == {}


def test_the_import_scan_sees_a_module_import():
    sample = ROOT / "persistence" / "sql" / "store.py"
    assert "persistence.sql.dialect" in modules_imported_from(sample, {"persistence"})


def environ_writes(root: Path) -> list[str]:
    """Each place under ``root`` that changes ``os.environ``: an item assigned or deleted, a mutating call, putenv."""
    mutators = {"update", "setdefault", "pop", "popitem", "clear", "__setitem__", "__delitem__"}
    found: list[tuple[str, int]] = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            targets: list[ast.expr] = []
            if isinstance(node, ast.Assign | ast.AugAssign | ast.Delete):
                targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
                targets = [target.value for target in targets if isinstance(target, ast.Subscript)]
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                if node.func.attr in mutators:
                    targets = [node.func.value]
                elif node.func.attr in ("putenv", "unsetenv"):
                    found.append((str(path.relative_to(root)), node.lineno))
            if any(ast.unparse(target) in ("os.environ", "environ") for target in targets):
                found.append((str(path.relative_to(root)), targets[0].lineno))
    return [f"{path}:{line}" for path, line in sorted(found)]


@pytest.mark.parametrize("package", PRODUCT)
def test_no_product_module_writes_the_environment(package):
    """Issue 24: what a child process needs (a worker's PROMETHEUS_MULTIPROC_DIR) is handed to it explicitly."""
    assert environ_writes(ROOT / package) == []


def test_the_environment_scan_sees_a_write(tmp_path):
    module = "import os\nos.environ['A'] = '1'\nos.environ.update(B='2')\ndel os.environ['A']\nos.putenv('C', '3')\n"
    (tmp_path / "m.py").write_text(module)
    assert environ_writes(tmp_path) == ["m.py:2", "m.py:3", "m.py:4", "m.py:5"]


# The store's rules (issue 24, item 2): each has one definition, and nothing else re-checks what it decides.
RULES = {
    "plan_batch": "persistence/rules.py",
    "dense_gap": "persistence/rules.py",
    "confirm_resend": "persistence/rules.py",
    "page_span": "persistence/rules.py",
    "plan_append": "persistence/sealing.py",
    "select_cuts": "persistence/message_index.py",
}


def rule_definitions(paths: list[Path], root: Path = ROOT) -> dict[str, list[str]]:
    """Where each rule's name is defined as a function."""
    found: dict[str, list[str]] = {}
    for path in paths:
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef) and node.name in RULES:
                found.setdefault(node.name, []).append(str(path.relative_to(root)))
    return found


def rule_rechecks(paths: list[Path], root: Path = ROOT) -> list[str]:
    """Each place that decides a rule again: a ``through`` compared with a head, or an append result built by hand."""
    found: list[str] = []
    for path in paths:
        where = str(path.relative_to(root))
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Compare):
                sides = [ast.unparse(side) for side in (node.left, *node.comparators)]
                if any("through" in side for side in sides) and any("head" in side for side in sides):
                    found.append(f"{where}:{node.lineno}")
            elif isinstance(node, ast.Call) and ast.unparse(node.func) == "AppendResult":
                found.append(f"{where}:{node.lineno}")
    return found


def test_each_store_rule_has_exactly_one_definition():
    assert rule_definitions(product_modules()) == {name: [home] for name, home in RULES.items()}


def test_no_backend_service_or_cli_decides_a_store_rule_again():
    homes = {ROOT / home for home in RULES.values()} | {ROOT / "persistence" / "base.py"}
    assert rule_rechecks([path for path in product_modules() if path not in homes]) == []


def test_the_rule_scans_see_a_second_definition_and_a_recheck(tmp_path):
    module = (
        "def page_span(head, through, before):\n    return head\n"
        "def page(query, head):\n    if query.through > head:\n        raise ValueError\n"
        "    return AppendResult(head + 1, head)\n"
    )
    (tmp_path / "m.py").write_text(module)
    assert rule_rechecks([tmp_path / "m.py"], tmp_path) == ["m.py:4", "m.py:6"]
    assert rule_definitions([tmp_path / "m.py"], tmp_path) == {"page_span": ["m.py"]}


# One page pipeline (issue 24, item 3): only the page reader reads a page from the store and splices it.
PAGE_PIPELINE = {"read_page", "choose_body", "splice", "raw_records", "ThroughBeyondHead"}


def page_pipeline_calls(package: Path) -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for path in sorted(package.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Call):
                name = node.func.attr if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)
                if name in PAGE_PIPELINE:
                    found.setdefault(str(path.relative_to(ROOT)), set()).add(name)
    return found


def test_only_the_page_reader_builds_a_page_in_the_service():
    calls = page_pipeline_calls(ROOT / "history_service")
    assert set(calls) == {"history_service/pages.py"}
    assert {"read_page", "ThroughBeyondHead"} <= calls["history_service/pages.py"]


# Each rule and constant written once (issue 42, item 4).
ONE_TEXT = {
    "the 501 of a store without Durable Streams": "keeps no Durable Streams",
    "the follower cap's overloaded text": "follow streams are open",
}
# Not ``b"\x1f\x8b"`` (gzip's magic number), nor ``0x7f.1`` (a loopback address the egress checks name).
CONTROL_RANGE = re.compile(r'(?<!b")\\x1[fF]|\\x7[fF]|0x1[fF]\b|0x7[fF]\b(?!\.)|\bord\(\w+\)\s*<\s*(0x20|32)\b')
RETIRED_THRESHOLDS = ("INLINE_BYTES", "_THREAD_AT", "_OFF_THE_LOOP")


def string_constants(path: Path) -> list[str]:
    """The string literals of a module, the literal parts of its f-strings included; docstrings are prose, not text."""
    tree = ast.parse(path.read_bytes(), filename=str(path))
    documented = (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, documented) and node.body and isinstance(node.body[0], ast.Expr)
    }
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings
    ]


def calls_of(name: str, paths: list[Path]) -> list[str]:
    found = []
    for path in paths:
        for node in ast.walk(ast.parse(path.read_bytes(), filename=str(path))):
            if isinstance(node, ast.Call):
                called = node.func.attr if isinstance(node.func, ast.Attribute) else ast.unparse(node.func)
                if called == name:
                    found.append(str(path.relative_to(ROOT)))
    return found


@pytest.mark.parametrize("what", sorted(ONE_TEXT))
def test_each_shared_text_is_written_once(what):
    homes = [
        str(path.relative_to(ROOT))
        for path in product_modules()
        for text in string_constants(path)
        if ONE_TEXT[what] in text
    ]
    assert len(homes) == 1, homes


def test_the_off_loop_threshold_is_defined_once():
    definitions = [
        str(path.relative_to(ROOT))
        for path in product_modules()
        for node in ast.walk(ast.parse(path.read_bytes()))
        if isinstance(node, ast.AnnAssign | ast.Assign) and "OFF_LOOP_BYTES" in ast.unparse(node).split("=")[0]
    ]
    assert definitions == ["persistence/off_loop.py"]
    retired = [
        str(path.relative_to(ROOT))
        for path in product_modules()
        if any(n in path.read_text() for n in RETIRED_THRESHOLDS)
    ]
    assert retired == []


def test_control_characters_are_defined_once():
    """Only `history_service.control` spells the control ranges: names, principals, logs and OpenAPI read it."""
    spelled = {str(path.relative_to(ROOT)) for path in product_modules() if CONTROL_RANGE.search(path.read_text())}
    assert spelled == {"history_service/control.py"}


def test_the_control_scan_sees_each_spelling():
    for text in (r'"[\x00-\x1f]"', "ord(c) < 0x20", "c == 0x7F", r'"\x7f"'):
        assert CONTROL_RANGE.search(text), text


def test_a_page_span_is_computed_by_the_store_and_an_append_gap_once():
    assert not calls_of("page_span", sorted((ROOT / "history_service").rglob("*.py")))
    assert set(calls_of("dense_gap", product_modules())) == {"persistence/rules.py"}


def test_the_service_never_imports_the_client_sdk():
    """Durations and ports are parsed on the server's own side of the layers (issue 42, item 4)."""
    offenders = {path: sorted(names & {"history_client"}) for path, names in imported_by("history_service").items()}
    assert {path: names for path, names in offenders.items() if names} == {}
