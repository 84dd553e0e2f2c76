"""The layout, read from the code: concept folders on one ladder of imports.

The ladder, bottom first (each rung may import the ones below it, and its own folder)::

    _rules <- _checkpoints <- _contract <- _writers <- _bus <- _publishing <- _tf
      <- {_tf.hook, _tf.keras, _tf.loop} <- the authors' faces <- hookbus.sinks <- _convert
      <- the trainers' face (``hookbus``) <- _watch <- _cli <- hookbus.__main__ (``python -m hookbus``)

``hookbus._convert`` builds sinks from a Keras callback list or a TF hook list
(``hookbus.from_keras``, ``hookbus.from_hooks``), so it sits above ``hookbus.sinks``, and the face
that exports it, ``hookbus`` itself, above it.

- Every import between two project modules points down the ladder or stays in its folder; the
  three publishers' folders are peers and never import each other. Every import counts: those
  under ``if TYPE_CHECKING:`` and those inside functions too (``tests/_source.py``).
- TensorFlow and Keras are imported only under ``hookbus/_tf/`` and by the demo (``_cli``).
- Only the faces re-export: a private module's ``__all__`` names only what it defines.
- A folder's ``__init__.py`` holds its one-sentence docstring and nothing else.
"""

from __future__ import annotations

import ast
import shutil
from pathlib import Path

import pytest
from _source import ROOT, Import, all_imports, external_imports, modules

TRAINERS_FACE = "hookbus (the package)"  # the rung of the module ``hookbus`` itself
RUNGS: tuple[tuple[str, ...], ...] = (
    ("hookbus._rules",),
    ("hookbus._checkpoints",),
    ("hookbus._contract",),
    ("hookbus._writers",),
    ("hookbus._bus",),
    ("hookbus._publishing",),
    ("hookbus._tf",),
    ("hookbus._tf.hook", "hookbus._tf.keras", "hookbus._tf.loop"),  # peers
    ("hookbus",),  # the authors' faces: sink_api, publisher_api, testing, validate
    ("hookbus.sinks",),
    ("hookbus._convert",),  # Keras callback and TF hook lists as a publisher and its sinks
    (TRAINERS_FACE,),  # hookbus/__init__: the face for people who train (it exports the conversions)
    ("hookbus._watch",),
    ("hookbus._cli",),
    ("hookbus.__main__",),  # python -m hookbus: the command
)
FACES = ("hookbus", "hookbus.sink_api", "hookbus.publisher_api", "hookbus.testing", "hookbus.validate")
FRAMEWORKS = ("tensorflow", "keras", "tf_keras")
ALLOWED_FRAMEWORK = ("hookbus._tf", "hookbus._cli")  # the backends, and the demo's model


def folder_of(module: str) -> str:
    """The ladder folder a module sits in (the faces are the folder ``hookbus``). A sink's own
    folder (``sinks/console/``) is part of ``hookbus.sinks``'s rung."""
    if module == "hookbus":
        return TRAINERS_FACE
    for folder in sorted(
        (f for rung in RUNGS for f in rung if f not in ("hookbus", TRAINERS_FACE)), key=len, reverse=True
    ):
        if module == folder or module.startswith(folder + "."):
            return folder
    if module in FACES:
        return "hookbus"
    raise AssertionError(f"{module} sits in no folder of the ladder: give it one (tests/test_layers.py RUNGS)")


def rung_of(folder: str) -> int:
    return next(i for i, rung in enumerate(RUNGS) if folder in rung)


def wrong_way(edges: list[Import]) -> list[str]:
    """The imports that point up the ladder or across to a peer folder, as readable lines."""
    found = []
    for edge in edges:
        source, target = folder_of(edge.source), folder_of(edge.target)
        if source == target:
            continue
        if rung_of(target) >= rung_of(source):
            found.append(f"{edge.source}:{edge.line} imports {edge.target} ({source} -> {target})")
    return sorted(found)


def test_every_module_sits_on_the_ladder() -> None:
    for name in modules():
        folder_of(name)  # raises for a module outside every folder
    assert {folder_of(n) for n in modules()} == {f for rung in RUNGS for f in rung}


def test_every_import_points_down_the_ladder_or_stays_in_its_folder() -> None:
    edges = all_imports()
    assert len(edges) > 300  # the walk sees the tree (TYPE_CHECKING and in-function imports included)
    assert wrong_way(edges) == []


def test_the_walk_counts_type_checking_and_function_imports(tmp_path: Path) -> None:
    """A wrong-way import hidden under ``TYPE_CHECKING`` or in a function is found, as is one
    between the publishers' peer folders."""
    shutil.copytree(ROOT / "hookbus", tmp_path / "hookbus")
    shutil.copytree(ROOT / "sinks", tmp_path / "sinks")
    (tmp_path / "hookbus" / "_rules" / "_up.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from hookbus._bus._bus import EventBus\n"
    )
    (tmp_path / "hookbus" / "_contract" / "_late.py").write_text(
        "def f():\n    from hookbus import _writers\n    from .._publishing import _planner\n"
    )
    peer = tmp_path / "hookbus" / "_tf" / "keras" / "_peer.py"
    peer.write_text("from hookbus._tf.hook._hook import EventBusHook\n")
    found = wrong_way(all_imports(tmp_path))
    assert found == [
        "hookbus._contract._late:2 imports hookbus._writers (hookbus._contract -> hookbus._writers)",
        "hookbus._contract._late:3 imports hookbus._publishing._planner (hookbus._contract -> hookbus._publishing)",
        "hookbus._rules._up:3 imports hookbus._bus._bus (hookbus._rules -> hookbus._bus)",
        "hookbus._tf.keras._peer:1 imports hookbus._tf.hook._hook (hookbus._tf.keras -> hookbus._tf.hook)",
    ]


def test_the_old_flat_layout_fails_the_ladder(tmp_path: Path) -> None:
    """Today's wrong-way edges, as they stood before the layout: the five misplaced definitions
    (``CheckpointBackend`` beside the Saver, ``WeightsBackend`` beside its implementations, the
    atomic-write helpers in the writer, ``SharedStop`` beside ``Task``, and the bus importing
    TensorFlow's default store) are re-created here at their old homes, and the ladder finds
    each of them."""
    shutil.copytree(ROOT / "hookbus", tmp_path / "hookbus")
    shutil.copytree(ROOT / "sinks", tmp_path / "sinks")
    old = {
        # module: a line it held before the layout (an import of the definition's old home)
        "_bus/_port.py": "from hookbus._tf._checkpoint_tf1 import TENSORFLOW\n",
        "_bus/_offers.py": "from hookbus._tf._weights_tf import WeightsBackend\n",
        "_contract/_context.py": "from hookbus._tf._weights_tf import WeightsBackend\n",
        "_checkpoints/_store.py": "from hookbus._writers._writer import write_atomically\n",
        "_contract/_cluster.py": "from hookbus._bus._stops import Stops\n",
        "_publishing/_publisher.py": "from hookbus._tf._checkpoint_tf1 import CheckpointBackend\n",
    }
    for module, line in old.items():
        path = tmp_path / "hookbus" / module
        path.write_text(path.read_text() + line)
    found = {line.split(" imports ")[0].rsplit(":", 1)[0] for line in wrong_way(all_imports(tmp_path))}
    assert found == {"hookbus." + m[:-3].replace("/", ".") for m in old}


def test_tensorflow_and_keras_are_imported_only_under_the_tensorflow_folder() -> None:
    found = []
    for name, path in modules().items():
        if folder_of(name).startswith(ALLOWED_FRAMEWORK):
            continue
        text = path.read_text()
        used = sorted(external_imports(path) & set(FRAMEWORKS))
        if used or "require_tensorflow(" in text or "require_keras(" in text:
            found.append(f"{name}: {used or 'require_tensorflow/require_keras'}")
    assert found == []


def _defined(tree: ast.Module) -> set[str]:
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            for target in node.targets:
                elements = target.elts if isinstance(target, ast.Tuple) else [target]
                names.update(e.id for e in elements if isinstance(e, ast.Name))
        elif isinstance(node, (ast.AnnAssign, ast.AugAssign)) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.If):  # definitions under a version or TYPE_CHECKING test
            names.update(_defined(ast.Module(body=node.body + node.orelse, type_ignores=[])))
    return names


def _all_of(tree: ast.Module) -> list[str] | None:
    for node in tree.body:
        value: ast.expr | None
        if isinstance(node, ast.Assign):
            targets, value = node.targets, node.value
        elif isinstance(node, ast.AnnAssign):
            targets, value = [node.target], node.value
        else:
            continue
        if any(isinstance(t, ast.Name) and t.id == "__all__" for t in targets):
            assert isinstance(value, (ast.List, ast.Tuple)), "__all__ must be a literal list"
            return [ast.literal_eval(e) for e in value.elts]
    return None


def test_only_the_faces_re_export() -> None:
    borrowed = []
    faces = {*FACES, "hookbus.sinks"}
    for name, path in modules().items():
        if name in faces:
            continue
        tree = ast.parse(path.read_text())
        exported = _all_of(tree)
        if exported is None:
            continue
        foreign = sorted(set(exported) - _defined(tree))
        if foreign:
            borrowed.append(f"{name}: {foreign}")
    assert borrowed == []


def test_a_folders_init_holds_its_sentence_and_nothing_else() -> None:
    for name, path in modules().items():
        if path.name != "__init__.py" or name in FACES or name == "hookbus.sinks":
            continue
        tree = ast.parse(path.read_text())
        assert len(tree.body) == 1, f"{path.relative_to(ROOT)} holds more than its docstring"
        doc = ast.get_docstring(tree)
        assert doc, f"{path.relative_to(ROOT)} says nothing of its folder"
        assert doc.rstrip().endswith("."), f"{path.relative_to(ROOT)}: one sentence, ending with a period"


@pytest.mark.parametrize("folder", ["hookbus", "sinks"])
def test_tests_mirror_the_folders(folder: str) -> None:
    """Each source folder has a test folder of the same name (``tests/_sinks`` for ``sinks/``)."""
    sources = {p.relative_to(ROOT / folder) for p in (ROOT / folder).rglob("__init__.py") if p.parent != ROOT / folder}
    tests = ROOT / "tests" / ("_sinks" if folder == "sinks" else "")
    missing = sorted(str(s.parent) for s in sources if not (tests / s.parent / "__init__.py").exists())
    assert missing == []
