"""``hookbus docs``: where the documentation site is and how to read it locally.

The guides and the reference are a MkDocs site built from a checkout (``docs/``, ``mkdocs.yml``);
a wheel ships neither, so from one this says where they are and that ``help()`` shows the same
reference text.
"""

from __future__ import annotations

from pathlib import Path

import hookbus

#: The checkout hookbus runs from, if it runs from one (an editable install): mkdocs.yml beside it.
CHECKOUT = Path(hookbus.__file__).resolve().parents[1]


def docs_text(checkout: Path = CHECKOUT) -> str:
    """What ``hookbus docs`` prints for hookbus running from ``checkout``."""
    if not (checkout / "mkdocs.yml").is_file():
        return (
            "hookbus's guides and reference are a documentation site built from the repository's docs/ and\n"
            "mkdocs.yml, which an installed wheel does not ship: in a checkout, run `hookbus docs` there.\n"
            "The reference is the docstrings, which help() shows too: help(hookbus), help(hookbus.sinks.CSVSink),\n"
            "help(hookbus.sink_api.Sink), help(hookbus.publisher_api.PublisherCore).\n"
        )
    built = checkout / "site" / "index.html"
    lines = [
        f"hookbus's guides and reference: a documentation site built from {checkout / 'docs'} and mkdocs.yml.",
        f"Read it locally, from {checkout}:",
        "",
        "  .venv/bin/pip install -q -e '.[docs]'   # MkDocs, Material and mkdocstrings, pinned",
        "  .venv/bin/mkdocs serve                  # then open http://127.0.0.1:8000 (it rebuilds as you edit)",
        "  .venv/bin/mkdocs build --strict         # or build it into site/ and open site/index.html",
        "",
    ]
    if built.is_file():
        lines.append(f"A build is there now: {built.as_uri()}")
    else:
        lines.append("No build yet (site/index.html).")
    return "\n".join(lines) + "\n"
