"""The one build step pyproject.toml cannot declare: the wheel ships the JavaScript client.

The viewer imports the client package from ``clients/js/src``, which sits outside the Python
packages. A wheel copies it in as ``history_service/viewer/lib/``, where `history_service.assets`
looks first; a source checkout (and an editable install) serves the tree itself, so the viewer
always runs the very files the JavaScript tests check.
"""

from __future__ import annotations

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

JS_CLIENT = Path(__file__).resolve().parent / "clients" / "js" / "src"


class BuildWithViewerLib(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        if not JS_CLIENT.is_dir():
            raise SystemExit(f"cannot build the wheel: {JS_CLIENT} (the viewer's JavaScript client) is missing")
        target = Path(self.build_lib) / "history_service" / "viewer" / "lib"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(JS_CLIENT, target, ignore=shutil.ignore_patterns("*.d.ts", "*.map"))


setup(cmdclass={"build_py": BuildWithViewerLib})
