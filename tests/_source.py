"""The project's own source, read as code: its modules by import name, and what each imports.

The seam and layer tests (``tests/test_core_seams.py``, ``tests/test_layers.py``) read the tree
through this one walk, so they agree on what a module and an import are: every ``import`` and
``from ... import`` anywhere in a module counts (``if TYPE_CHECKING:`` blocks and function bodies
too), relative imports are resolved against the importing module's package, and ``sinks/`` is
named as it is installed, ``hookbus.sinks``.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
_TREES = (("hookbus", "hookbus"), ("sinks", "hookbus.sinks"))


def modules(root: Path = ROOT) -> dict[str, Path]:
    """Every module of ``hookbus/`` and ``sinks/`` under ``root``, by its import name (a package
    by its own name: ``hookbus._bus`` is ``hookbus/_bus/__init__.py``)."""
    found: dict[str, Path] = {}
    for folder, package in _TREES:
        for path in sorted((root / folder).rglob("*.py")):
            parts = list(path.relative_to(root / folder).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join([package, *parts])] = path
    return found


@dataclass(frozen=True)
class Import:
    """One import of a project module by another: the importing module, the imported one (the
    longest known module the statement names; ``from hookbus import _x`` names ``hookbus._x``),
    the line, and the names it binds."""

    source: str
    target: str
    line: int
    names: tuple[str, ...]


def _package_of(name: str, path: Path) -> str:
    return name if path.name == "__init__.py" else name.rpartition(".")[0]


def _resolve(dotted: str, known: dict[str, Path]) -> str | None:
    parts = dotted.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in known:
            return candidate
        parts.pop()
    return None


def imports_of(name: str, path: Path, known: dict[str, Path]) -> list[Import]:
    """Every import of a project module in one module, anywhere in it."""
    found: list[Import] = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = _resolve(alias.name, known)
                if target is not None:
                    found.append(Import(name, target, node.lineno, (alias.name,)))
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                base = _package_of(name, path).split(".")
                base = base[: len(base) - (node.level - 1)]
                module = ".".join([*base, module] if module else base)
            for alias in node.names:
                full = f"{module}.{alias.name}"
                target = full if full in known else _resolve(module, known)
                if target is not None:
                    found.append(Import(name, target, node.lineno, (alias.name,)))
    return found


def all_imports(root: Path = ROOT) -> list[Import]:
    """Every import between two distinct project modules under ``root``."""
    known = modules(root)
    return [i for name, path in known.items() for i in imports_of(name, path, known) if i.target != name]


def external_imports(path: Path) -> set[str]:
    """The top-level names of every module a file imports that is not relative (``tensorflow``
    for ``from tensorflow.python import x``), anywhere in it."""
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found
