"""The core's inner seams, read from the code (as ``test_the_seams_hold`` reads the outer ones).

- No import cycle among ``hookbus/`` modules, counting ``if TYPE_CHECKING:`` imports and imports
  inside functions: each part can be read (and imported) before the ones that use it.
- No module but ``_bus.py`` touches a private member of a bus: the parts are given their
  collaborators. ``PublisherCore`` takes its bus's port (``bus._port``); every other publisher
  goes through its core.
- Each field of ``RunState`` is written by one module (besides its own ``reset``).
"""

from __future__ import annotations

import ast
from pathlib import Path

from _source import ROOT, all_imports, modules

import hookbus
from hookbus._bus._state import RunState

# hookbus/'s modules by import name (``hookbus._bus._port``); ``hookbus.sinks`` is outside hookbus/.
MODULES = {name: path for name, path in modules().items() if not name.startswith("hookbus.sinks")}


def _trees() -> dict[str, ast.Module]:
    return {name: ast.parse(path.read_text()) for name, path in MODULES.items()}


def _graph() -> dict[str, set[str]]:
    """Each hookbus/ module -> the hookbus/ modules it imports, anywhere in it (``TYPE_CHECKING``
    and functions too); ``hookbus`` for the package itself."""
    graph: dict[str, set[str]] = {name: set() for name in MODULES}
    for edge in all_imports():
        if edge.source in MODULES and edge.target in MODULES:
            graph[edge.source].add(edge.target)
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for other in sorted(graph[node]):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                other = stack.pop()
                component.append(other)
                if other == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_among_hookbus_modules() -> None:
    graph = _graph()
    assert len(graph["hookbus"]) > 10  # the package itself is a node: a module importing it is counted
    assert _cycles(graph) == []


def test_the_cycle_finder_finds_a_cycle() -> None:
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def _bus_private_names() -> set[str]:
    bus = hookbus.EventBus()
    own = {n for n in vars(bus) if n.startswith("_")}
    methods = {n for n in dir(hookbus.EventBus) if n.startswith("_") and not n.startswith("__")}
    return own | methods


def _is_a_bus(node: ast.expr) -> bool:
    """Whether an expression names a bus: ``bus``, ``self.bus``, ``self._bus``, ``x.bus``."""
    if isinstance(node, ast.Name):
        return node.id in ("bus", "_bus")
    return isinstance(node, ast.Attribute) and node.attr in ("bus", "_bus")


def _reach_ins(root: Path) -> list[tuple[str, str]]:
    private = _bus_private_names()
    found = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute) and node.attr in private and _is_a_bus(node.value):
                found.append((path.relative_to(root).as_posix(), ast.unparse(node)))
    return found


def test_no_module_but_the_bus_touches_a_private_member_of_a_bus() -> None:
    found = [r for r in _reach_ins(ROOT / "hookbus") if r[0] != "_bus/_bus.py"]
    assert found == [("_publishing/_publisher.py", "bus._port")]  # PublisherCore takes the port of the bus it serves
    assert _reach_ins(ROOT / "sinks") == []


def test_no_part_holds_the_bus() -> None:
    """The parts are given collaborators: none stores a bus (``self._bus = ...``)."""
    held = []
    for name, tree in _trees().items():
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and node.attr == "_bus" and isinstance(node.ctx, ast.Store):
                held.append(name)
    assert held == []


def _assigned(tree: ast.Module) -> list[ast.Attribute]:
    """Every attribute a module assigns (``x.a = ``, ``x.a += ``, ``x.a: T = ``, in tuples too)."""
    found: list[ast.Attribute] = []
    for node in ast.walk(tree):
        targets: list[ast.expr] = []
        if isinstance(node, ast.Assign):
            targets = list(node.targets)
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        found.extend(part for target in targets for part in ast.walk(target) if isinstance(part, ast.Attribute))
    return found


def _writers() -> dict[str, set[str]]:
    """Each ``RunState`` field -> the modules assigning it on something named ``state``/``_state``."""
    fields = set(RunState.__slots__)
    writers: dict[str, set[str]] = {f: set() for f in fields}
    for name, tree in _trees().items():
        if name == "hookbus._bus._state":  # its own reset
            continue
        for part in _assigned(tree):
            owner = part.value
            named = owner.id if isinstance(owner, ast.Name) else getattr(owner, "attr", "")
            if part.attr in fields and named in ("state", "_state"):
                writers[part.attr].add(name)
    return writers


def test_runstate_keeps_only_the_runs_progress_and_each_field_has_one_writer() -> None:
    assert sorted(RunState.__slots__) == ["local_step", "start_time", "started", "step", "wall_start"]
    writers = _writers()
    assert writers == {
        "step": {"hookbus._publishing._publisher"},  # the publishers' core only
        "local_step": {"hookbus._publishing._publisher"},
        "started": {"hookbus._bus._run"},
        "start_time": {"hookbus._bus._run"},
        "wall_start": set(),  # set by reset alone
    }


def _health_writers(trees: dict[str, ast.Module]) -> dict[str, set[str]]:
    """``disabled`` and ``errors`` -> the modules assigning an attribute of that name."""
    writers: dict[str, set[str]] = {"disabled": set(), "errors": set()}
    for name, tree in trees.items():
        for part in _assigned(tree):
            if part.attr in writers:
                writers[part.attr].add(name)
    return writers


def test_a_subscribers_health_has_one_writer() -> None:
    """``disabled`` and ``errors`` are the record's own: the dispatcher (a handler raised), the
    barrier (a flush failed) and the roster (a new run) ask it (``failed``, ``start_run``), so the
    rule of what a failure does to the count and the switch lives once."""
    owner = {"hookbus._bus._subscription"}
    assert _health_writers(_trees()) == {"disabled": owner, "errors": owner}


def test_the_health_pin_sees_a_second_writer() -> None:
    trees = _trees()
    second = "def fail(record):\n    record.errors += 1\n    record.disabled = True\n"
    trees["hookbus._bus._dispatch"] = ast.parse(second)
    owners = {"hookbus._bus._subscription", "hookbus._bus._dispatch"}
    assert _health_writers(trees) == {"disabled": owners, "errors": owners}


# -- the model seam: one view per publisher ---------------------------------------------------------------
#: What a publisher offers its bus's sinks, one method each (before issue 46: thirteen, ten of them
#: about the model).
OFFERS = ["offer_checkpoints", "offer_learning_rate", "offer_machine", "offer_model", "offer_profiler"]
#: The publishers, each in its folder, and the view each offers beside it.
VIEWS = {
    "_tf/hook/_hook.py": "GraphModelView",
    "_tf/keras/_callback.py": "KerasModelView",
    "_tf/loop/_loop.py": "LoopModelView",
}


def test_a_publisher_offers_the_sinks_four_things_and_the_model_once() -> None:
    from dataclasses import fields

    from hookbus._bus._offers import Offers
    from hookbus._contract._context import SinkContext
    from hookbus.publisher_api import PublisherCore

    assert sorted(n for n in dir(PublisherCore) if n.startswith("offer")) == OFFERS
    assert [f.name for f in fields(Offers)] == ["checkpoints", "learning_rate", "profiler", "model", "machine"]
    context = [f.name for f in fields(SinkContext)]
    assert len(context) == 14  # 23 before the model view: ten of them the model's
    assert "model" in context


def _offer_model_calls(tree: ast.Module) -> list[str]:
    """What each ``offer_model(...)`` call in ``tree`` offers: the view's class, or ``None``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "offer_model":
            (arg,) = node.args
            found.append((node.lineno, ast.unparse(arg.func) if isinstance(arg, ast.Call) else ast.unparse(arg)))
    return [offered for _, offered in sorted(found)]  # in the order the source reads


def test_each_publisher_offers_one_view_and_withdraws_it_once() -> None:
    """The TF1 hook, the Keras callback and the loop each offer their view in one call as they
    begin and withdraw it in one call as they end; no other module offers a model."""
    offered = {}
    for name, tree in _trees().items():
        calls = _offer_model_calls(tree)
        if calls and name not in ("hookbus.testing",):
            offered[MODULES[name].relative_to(ROOT / "hookbus").as_posix()] = calls
    assert offered == {path: [view, "None"] for path, view in VIEWS.items()}


def test_the_view_pin_sees_a_second_channel() -> None:
    tree = ast.parse("core.offer_model(KerasModelView(model))\ncore.offer_model(None)\ncore.offer_model(other)\n")
    assert _offer_model_calls(tree) == ["KerasModelView", "None", "other"]


def test_every_member_of_the_base_view_answers_not_offered() -> None:
    import inspect

    from hookbus.publisher_api import ModelView

    members = sorted(n for n in dir(ModelView) if not n.startswith("_"))
    assert members == [
        "config",
        "direction",
        "ends_epochs",
        "export",
        "graph_def",
        "progress",
        "summary",
        "training_params",
        "variables",
        "weights",
        "weights_export",
    ]
    view = ModelView()
    for name in members:
        member = getattr(view, name)
        arguments = ["loss"] * (len(inspect.signature(member).parameters))  # direction(key)
        answer = member(*arguments)
        assert answer is (False if name == "ends_epochs" else None), name


def test_a_publisher_offers_a_model_view_or_none() -> None:
    import pytest

    from hookbus.publisher_api import ModelView, PublisherCore

    core = PublisherCore(hookbus.EventBus(), ["loss"])
    with pytest.raises(TypeError, match=r"view must be a hookbus.publisher_api.ModelView or None \(got <function"):
        core.offer_model(lambda: None)  # type: ignore[arg-type]
    core.offer_model(ModelView())
    core.offer_model(None)
