"""MkDocs hook: give mkdocstrings the package as Python imports it.

``pyproject.toml`` installs ``envs/`` and ``agents/`` as ``routing_rl.envs`` and
``routing_rl.agents`` (setuptools ``package-dir``). Griffe, which reads the sources for
mkdocstrings, finds a package by its folders, so before the build this copies every mapped
folder's ``.py`` files into one tree, ``build/api-sources/routing_rl/...``, the
``paths`` mkdocs.yml gives the python handler. Only ``build/api-sources`` is ever replaced.
"""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

from mkdocs.plugins import event_priority

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - the docs extra installs tomli there
    import tomli as tomllib

TREE = Path("build") / "api-sources"


# first of every on_config: mkdocstrings drops a configured path that does not exist yet, so on
# a fresh clone the tree must be there before its own on_config runs
@event_priority(100)
def on_config(config):
    root = Path(config.config_file_path).resolve().parent
    package_dir = tomllib.loads((root / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    tree = root / TREE
    if tree.exists():
        shutil.rmtree(tree)
    # parents before children, so a mapped subpackage lands inside its copied parent
    for name, folder in sorted(package_dir.items(), key=lambda item: item[0].count(".")):
        target = tree.joinpath(*name.split("."))
        if target.exists():
            shutil.rmtree(target)
        shutil.copytree(root / folder, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    return config
