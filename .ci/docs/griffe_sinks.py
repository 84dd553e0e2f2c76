"""The documentation's view of ``hookbus.sinks``, which is the folder ``sinks/`` (pyproject's package-dir).

griffe, which reads the docstrings for mkdocstrings (mkdocs.yml), finds packages by their folders, and
``hookbus/`` has no ``sinks/``: this extension reads ``sinks/`` from its own folder and hangs it under
``hookbus`` as ``hookbus.sinks``, the name users import, so its pages and cross-links use that name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

ROOT = Path(__file__).resolve().parents[2]


class SinksPackage(griffe.Extension):
    """Graft ``sinks/`` under ``hookbus`` once ``hookbus`` is loaded."""

    def on_package(self, *, pkg: griffe.Module, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if pkg.name != "hookbus" or "sinks" in pkg.members:
            return
        sinks = loader._load_module("sinks", ROOT / "sinks" / "__init__.py", parent=pkg)
        pkg.set_member("sinks", sinks)


#: A Sphinx role in a docstring (``:class:`~hookbus.sinks.CSVSink```), as help() shows them.
ROLE = re.compile(r":(?:class|func|meth|mod|attr|data|exc|obj):`(~?)([\w.]+)(\(\))?`")


def _markdown_role(match: re.Match[str]) -> str:
    tilde, target, call = match.groups()
    shown = (target.rsplit(".", 1)[-1] if tilde else target) + (call or "")
    if target.startswith("hookbus."):
        return f"[`{shown}`][{target}]"  # a cross-link, which a strict build checks
    return f"`{shown}`"


class SphinxRoles(griffe.Extension):
    """Docstrings cite names as Sphinx roles (help() shows them as written): on the site, code, and
    a cross-link where the name is a full ``hookbus.`` path."""

    def on_object(self, *, obj: griffe.Object, loader: griffe.GriffeLoader, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = ROLE.sub(_markdown_role, obj.docstring.value)
