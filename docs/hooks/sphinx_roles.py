"""Griffe extension: the docstrings' Sphinx roles as mkdocstrings cross-references.

The package's docstrings name other objects the way ``help()`` readers and Sphinx know,
``:class:`~routing_rl.envs.task.RoutingTask```, ``:func:`evaluate```, ``:meth:`title <path>```.
Loaded by the python handler (mkdocs.yml ``extensions``), this rewrites each role, once the
package is loaded, into an *optional* autorefs link: the name resolved in the docstring's own
scope, shown as code, a link where the site documents it, plain code (no warning) where it
does not (``torch``, SB3, ...). ``~`` shows the last component, as in Sphinx.
"""

from __future__ import annotations

import html
import re

import griffe

ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|obj|exc|const):`(~?)([^`<]+?)\s*(?:<([^>`]+)>)?`")


def resolve(obj: griffe.Object, target: str) -> str:
    """``target``'s full path as seen from ``obj``'s scope (unchanged when it cannot be resolved)."""
    head, dot, rest = target.partition(".")
    try:
        return obj.resolve(head) + dot + rest
    except Exception:  # unresolvable names stay as written: an optional link does not warn
        return target


def cross_reference(obj: griffe.Object, match: re.Match) -> str:
    tilde, text, explicit = match.groups()
    target = (explicit or text).strip()
    shown = text.strip() if explicit else (target.rsplit(".", 1)[-1] if tilde else target)
    identifier = html.escape(resolve(obj, target), quote=True)
    return f'<autoref identifier="{identifier}" optional><code>{html.escape(shown)}</code></autoref>'


class SphinxRoles(griffe.Extension):
    """Rewrites the roles of every docstring of a loaded package."""

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        stack: list[griffe.Object] = [pkg]
        while stack:
            obj = stack.pop()
            if obj.docstring is not None:
                obj.docstring.value = ROLE.sub(lambda match: cross_reference(obj, match), obj.docstring.value)
            stack.extend(member for member in obj.members.values() if not member.is_alias)
