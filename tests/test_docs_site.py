"""The docs site (mkdocs.yml) builds with --strict: every page and every docstring of the
API reference renders without a warning, Home is the README and the changelog page is the
CHANGELOG, and the flag reference and the results are in the navigation."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
NEEDED = ("mkdocs", "material", "mkdocstrings", "mkdocstrings_handlers.python", "mkdocs_include_markdown_plugin")
missing = [name for name in NEEDED if importlib.util.find_spec(name.split(".")[0]) is None
           or importlib.util.find_spec(name) is None]


@pytest.mark.slow
@pytest.mark.skipif(bool(missing), reason=f"the docs extra is not installed (no {', '.join(missing)}): "
                                          "pip install -e '.[docs]'")
def test_the_site_builds_strictly(tmp_path):
    site = tmp_path / "site"
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
                          cwd=REPO, capture_output=True, text=True, timeout=600,
                          env=dict(os.environ, NO_MKDOCS_2_WARNING="1"))
    assert done.returncode == 0, done.stderr[-4000:]
    home = (site / "index.html").read_text()
    readme_title = next(line for line in (REPO / "README.md").read_text().splitlines() if line.startswith("# "))
    assert readme_title[2:] in home and "Quick start" in home, "Home is the README"
    assert 'href="plugins/"' in home, "the README's link to docs/plugins.md points at the site's page"
    assert 'href="changelog/"' in home, "the README's link to CHANGELOG.md points at the site's page (docs/hooks/root_links.py)"
    for page in ("plugins", "architecture", "flags", "changelog", "results", "results/suite", "results/speed"):
        assert (site / page / "index.html").is_file(), page
    for nav_link in ('href="flags/"', 'href="results/"', 'href="results/suite/"', 'href="changelog/"'):
        assert nav_link in home, f"{nav_link} is in the navigation"
    assert "--head-weight" in (site / "flags" / "index.html").read_text(), "the flag reference lists every flag"
    assert "Keep a Changelog" in (site / "changelog" / "index.html").read_text(), "the changelog page is CHANGELOG.md"
    api = {layer: (site / "api" / layer / "index.html").read_text()
           for layer in ("core", "nets", "data", "training", "envs", "agents", "app")}
    assert "RoutedNet" in api["core"] and "RoutingTask" in api["envs"] and "Progress" in api["training"]
    assert "train_sb3" in api["agents"] and "load_run" in api["app"]
    for layer, page in api.items():
        assert ":class:`" not in page and ":func:`" not in page and "<autoref" not in page, f"a raw role on {layer}"
    # docs/hooks/sphinx_roles.py: a role becomes a link to the object's page, across pages too
    assert 'href="../core/#routing_rl.core.k_cpt.CostModel"' in api["agents"]
