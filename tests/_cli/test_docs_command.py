"""``hookbus docs`` (issue 50): where the documentation site is and how to read it locally; from a
wheel, which ships no site, where it is and that help() shows the same reference."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import hookbus
import hookbus.sinks  # noqa: F401 - one of the names help() is pointed at
from hookbus._cli._cli import main
from hookbus._cli._docs import docs_text

ROOT = Path(__file__).resolve().parents[2]


def test_hookbus_docs_gives_the_readmes_commands_for_this_checkout(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["docs"]) == 0
    out = capsys.readouterr().out
    assert str(ROOT / "docs") in out
    commands = re.findall(r"^  (\.venv/bin/\S.*?)\s+#", out, re.MULTILINE)
    assert len(commands) == 3, out
    readme = (ROOT / "README.md").read_text()
    for command in commands:  # the README's, so that the two cannot drift apart
        assert command in readme, command


def test_hookbus_docs_says_where_a_build_is(tmp_path: Path) -> None:
    (tmp_path / "mkdocs.yml").write_text("site_name: x\n")
    assert "No build yet" in docs_text(tmp_path)
    (tmp_path / "site").mkdir()
    (tmp_path / "site" / "index.html").write_text("<html></html>")
    assert f"A build is there now: {(tmp_path / 'site' / 'index.html').as_uri()}" in docs_text(tmp_path)


def test_hookbus_docs_from_a_wheel_points_to_help(tmp_path: Path) -> None:
    text = docs_text(tmp_path)  # no mkdocs.yml: an installed wheel
    assert "mkdocs serve" not in text
    named = re.findall(r"help\(([\w.]+)\)", text)
    assert len(named) == 4, text
    for name in named:  # each is a real public name
        obj: object = hookbus
        for part in name.split(".")[1:]:
            obj = getattr(obj, part)
