"""The viewer's static files: the page, its scripts, the client package beside it, and their headers."""

from __future__ import annotations

import base64
import hashlib
import json
import re
from pathlib import Path

import httpx
import pytest

from history_service import assets
from history_service.app import create_app
from persistence import MemoryStore
from testing.asgi import serving
from testing.seeding import SEEDED

pytestmark = pytest.mark.anyio


async def get(path: str, **kwargs: object) -> httpx.Response:
    async with serving(create_app(SEEDED, store=MemoryStore())) as client:
        return await client.get(path, **kwargs)  # type: ignore[arg-type]


async def test_the_viewer_page_is_served_with_a_policy_that_admits_only_its_import_map():
    response = await get("/viewer/")
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("text/html")
    found = re.search(r'<script type="importmap">(.*?)</script>', response.text, re.S)
    assert found is not None
    digest = base64.b64encode(hashlib.sha256(found.group(1).encode()).digest()).decode()
    policy = response.headers["content-security-policy"]
    assert f"script-src 'self' 'sha256-{digest}'" in policy
    assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy and "form-action 'none'" in policy
    assert response.headers["x-frame-options"] == "DENY"
    assert response.headers["x-content-type-options"] == "nosniff"


async def test_the_bare_address_redirects_to_the_folder_whatever_the_host():
    response = await get("/viewer", follow_redirects=False, headers={"Host": "evil.example"})
    assert response.status_code == 308 and response.headers["location"] == "/viewer/"


@pytest.mark.parametrize("path", ["/viewer/viewer.js", "/viewer/timeline.js", "/viewer/lib/index.js"])
async def test_scripts_are_javascript(path: str) -> None:
    response = await get(path)
    assert response.status_code == 200
    assert response.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript")


async def test_the_client_package_is_served_from_its_sources():
    response = await get("/viewer/lib/codec.js")
    assert response.status_code == 200
    assert response.content == (assets.JS_CLIENT_DIR / "codec.js").read_bytes()


@pytest.mark.parametrize(
    # httpx would resolve a plain "..", so the dot segments are percent-encoded.
    "path",
    [
        "/viewer/lib/%2e%2e/%2e%2e/assets.py",
        "/viewer/lib/..%2f..%2fassets.py",
        "/viewer/%2e%2e/app.py",
        "/viewer/nope.js",
    ],
)
async def test_nothing_outside_the_two_folders_is_served(path: str) -> None:
    response = await get(path)
    assert response.status_code == 404
    assert b"JS_CLIENT_DIR" not in response.content and b"import" not in response.content


async def test_without_the_client_sources_the_viewer_says_why(monkeypatch, tmp_path):
    monkeypatch.setattr(assets, "JS_CLIENT_DIR", tmp_path / "missing")
    for path in ("/viewer", "/viewer/", "/viewer/lib/index.js"):
        response = await get(path)
        assert response.status_code == 404
        error = response.json()["error"]
        assert error["code"] == "viewer_unavailable" and "clients/js/src" in error["message"]
        assert str(tmp_path) not in error["message"]


async def test_the_root_redirects_to_the_viewer_whatever_the_host():
    response = await get("/", follow_redirects=False, headers={"Host": "evil.example"})
    assert response.status_code == 308 and response.headers["location"] == "/viewer/"


# The viewer's vendored markdown-it: the pinned package's own browser build (clients/js pins it,
# beside the TypeScript that checks the viewer against its types), copied byte for byte.
MARKDOWN_IT = assets.VIEWER_DIR / "vendor" / "markdown-it.js"
JS_PACKAGE = Path(__file__).resolve().parents[2] / "clients" / "js"


def pinned_markdown_it() -> str:
    manifest = json.loads((JS_PACKAGE / "package.json").read_text(encoding="utf-8"))
    version: str = manifest["devDependencies"]["markdown-it"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", version), f"markdown-it is pinned to one version, not {version!r}"
    return version


def test_the_vendored_markdown_it_is_the_pinned_version():
    assert MARKDOWN_IT.read_text(encoding="utf-8").startswith(f"/*! markdown-it {pinned_markdown_it()} ")
    assert (MARKDOWN_IT.parent / "markdown-it.LICENSE").is_file()


def test_the_vendored_markdown_it_is_the_packages_own_browser_build():
    installed = JS_PACKAGE / "node_modules" / "markdown-it"
    if not installed.is_dir():
        pytest.skip("clients/js has no node_modules: scripts/with-node or make typecheck-js installs them")
    manifest = json.loads((installed / "package.json").read_text(encoding="utf-8"))
    assert manifest["version"] == pinned_markdown_it()
    build = installed / "dist" / "browser" / "markdown-it.esm.min.mjs"
    assert MARKDOWN_IT.read_bytes() == build.read_bytes(), (
        f"copy {build.relative_to(JS_PACKAGE.parent.parent)} to {MARKDOWN_IT.relative_to(JS_PACKAGE.parent.parent)}"
    )


async def test_the_vendored_markdown_it_is_served_as_a_module_of_this_origin():
    response = await get("/viewer/vendor/markdown-it.js")
    assert response.status_code == 200 and response.content == MARKDOWN_IT.read_bytes()
    assert response.headers["content-type"].split(";")[0] in ("text/javascript", "application/javascript")
    # Nothing in it loads another file: the browser build is whole.
    assert not re.search(rb"""^\s*import\s|\bimport\(""", response.content, re.M)
