"""MkDocs hook: the README's links to files at the repository root lead to their site pages.

The README is both GitHub's front page and the site's home (``docs/index.md`` includes it), and
the changelog is ``CHANGELOG.md`` at the root on GitHub, ``changelog.md`` on the site (which
includes it). After include-markdown has inlined the README, a link to the root file points
outside the docs; this rewrites it to the page, so one README serves both.
"""

from __future__ import annotations

from mkdocs.plugins import event_priority

SITE_PAGES = {"../CHANGELOG.md": "changelog.md"}
"""A root file as the included README links to it, and the site page that renders it."""


@event_priority(-100)  # after include-markdown has inlined and rebased the README's links
def on_page_markdown(markdown, page, config, files):
    for root_file, site_page in SITE_PAGES.items():
        markdown = markdown.replace(f"]({root_file})", f"]({site_page})")
    return markdown
