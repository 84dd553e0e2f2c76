"""The package: its public surface, importing without TensorFlow, and the wheel."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import shlex
import shutil
import subprocess
import sys
import textwrap
import typing
import zipfile
from pathlib import Path
from typing import Any

import pytest
from _source import all_imports, external_imports, imports_of, modules

import hookbus

ROOT = Path(__file__).resolve().parents[1]


def test_the_bus_surface_is_what_users_need() -> None:
    """EventBus owns its parts; what only publishers use is on its port."""
    bus = hookbus.EventBus()
    methods = sorted(n for n in dir(hookbus.EventBus) if not n.startswith("_"))
    assert methods == [
        "attach",
        "close",
        "detach",
        "elapsed",
        "known_keys",
        "local_step",
        "on",
        "request_stop",
        "should_stop",
        "sinks",
        "stats",
        "step",
        "stop_reason",
        "subscribers",
        "system_metrics",
    ]
    attributes = sorted(n for n in vars(bus) if not n.startswith("_"))
    assert attributes == sorted(["clock", "wall_clock", "namespace", "signals", "task", *hookbus.sink_api.SIGNALS])
    assert hookbus.EventBus.__bases__ == (object,)  # composed, not built from mixins
    for read_only in ("step", "should_stop", "stop_reason", "local_step"):
        with pytest.raises(AttributeError):
            setattr(bus, read_only, 1)


def test_sinks_surface_is_pinned() -> None:
    import hookbus.sinks

    assert sorted(hookbus.sinks.__all__) == [
        "CSVSink",
        "CheckpointSink",
        "ConsoleSink",
        "EarlyStoppingSink",
        "EventLogSink",
        "ExportSink",
        "LearningRateSchedulerSink",
        "LoggingSink",
        "MLflowSink",
        "NanGuardSink",
        "NonFiniteError",
        "ProfilerSink",
        "ReduceLROnPlateauSink",
        "StopAtStepSink",
        "TensorBoardSink",
        "TimelineSink",
        "mlflow_name",
    ]


def _imports(path: Path) -> set[str]:
    """The project modules ``path`` imports (relative imports resolved), anywhere in it."""
    known = modules()
    name = next((n for n, p in known.items() if p == path), path.stem)  # a script: a top-level module
    return {i.target for i in imports_of(name, path, known)}


def test_the_seams_hold() -> None:
    """README "Two commands" (the bus and the sinks run without TensorFlow): one module imports
    TensorFlow; nothing in hookbus/ imports the sinks but the applications that wire them (the ``hookbus``
    command, ``hookbus watch``) and the conversions of callback and hook lists into sinks
    (``hookbus.from_keras``, ``hookbus.from_hooks``); no
    sink imports another sink (helpers, private modules, are shared)."""
    found = modules()
    importers = sorted(name for name, path in found.items() if "tensorflow" in external_imports(path))
    assert importers == ["hookbus._tf._import"]
    edges = all_imports()
    into_sinks = sorted({e.source for e in edges if e.target.startswith("hookbus.sinks")})
    applications = [m for m in into_sinks if not m.startswith("hookbus.sinks")]
    assert applications == [
        "hookbus._cli._cli",
        "hookbus._cli._replay",
        "hookbus._convert._hooks",
        "hookbus._convert._keras",
        "hookbus._watch._command",
    ]
    sinks = {n for n in found if n.startswith("hookbus.sinks.") and not n.rpartition(".")[2].startswith("_")}
    sinks -= {n for n in sinks if found[n].name == "__init__.py"}  # a sink's folder, not a sink
    assert len(sinks) == 14
    for edge in edges:
        if edge.source in sinks and edge.target in sinks:
            raise AssertionError(f"{edge.source} imports the sink module {edge.target}")


def test_public_surface_is_pinned() -> None:
    """Issue 46: ``hookbus`` is the face for people who train: the bus, the publishers, the helpers
    they call, what ``bus.stats()`` and ``bus.subscribers`` hand out, what a function subscriber
    receives, the errors they see before step 1. Sink and publisher authors' names are not here."""
    assert sorted(hookbus.__all__) == [
        "BusStats",
        "Event",
        "EventBus",
        "EventBusCallback",
        "EventBusHook",
        "LoopPublisher",
        "OutputInUseError",
        "ReplayResult",
        "RunSummary",
        "SubscriberStats",
        "SubscriberView",
        "Subscription",
        "Task",
        "UnknownKeyError",
        "WriterStats",
        "__version__",
        "evaluate_checkpoints",
        "from_hooks",
        "from_keras",
        "monitored_training_session",
        "read_event_log",
        "read_run_summary",
        "replay",
        "staggered_start",
        "train_and_evaluate",
    ]
    for name in hookbus.__all__:
        assert hasattr(hookbus, name), name
    assert hookbus.sink_api is importlib.import_module("hookbus.sink_api")
    assert hookbus.publisher_api is importlib.import_module("hookbus.publisher_api")


#: Issue 46: the names that left ``hookbus`` for the authors' faces (CHANGELOG.md says so), by their new home.
MOVED_FROM_HOOKBUS = {
    "hookbus.sink_api": [
        "BackgroundWriter",
        "CheckpointSaved",
        "CheckpointStore",
        "Checkpoints",
        "DEFAULT_FLUSH_DEADLINE",
        "EpochProgress",
        "ExceptionRaised",
        "FileCheckpointStore",
        "FlushDeadline",
        "OutputLock",
        "OwnThreadWriter",
        "PRIORITY_CHECKPOINT",
        "PRIORITY_DEFAULT",
        "PRIORITY_EARLY_STOPPING",
        "PRIORITY_NAN_GUARD",
        "PRIORITY_STOP_AT_STEP",
        "PeerReport",
        "SIGNALS",
        "Schedule",
        "Sink",
        "SinkContext",
        "StopRequest",
        "SubscriberError",
        "WaitForStep",
        "WriterError",
        "WriterKit",
        "WriterStalled",
        "WriterWarning",
        "check_writable_dir",
        "event_log_line",
        "write_atomically",
    ],
    "hookbus.publisher_api": [
        "CheckpointBackend",
        "CheckpointStore",
        "FileCheckpointStore",
        "PublisherCore",
        "RUNS_ON",
    ],
}


def test_the_names_for_authors_left_the_trainers_face_for_theirs() -> None:
    """Issue 46: each name that ``hookbus`` exported for sink and publisher authors is exported by
    their face, and by ``hookbus`` no more (not even as an attribute: no compatibility aliases)."""
    for face, names in MOVED_FROM_HOOKBUS.items():
        module = importlib.import_module(face)
        for name in names:
            assert name in module.__all__, (face, name)
            assert not hasattr(hookbus, name), name
    assert len({n for names in MOVED_FROM_HOOKBUS.values() for n in names}) == 34


def test_validate_surface_is_pinned() -> None:
    """hookbus.validate: the argument checks, public for sinks written outside hookbus."""
    import hookbus.validate

    assert sorted(hookbus.validate.__all__) == [
        "finite_number",
        "flag",
        "key_name",
        "non_empty_path",
        "non_negative_int",
        "non_negative_seconds",
        "optional_positive_int",
        "optional_seconds",
        "positive_int",
        "positive_number",
        "seconds",
    ]


def test_the_event_log_sink_is_written_with_the_public_api_only() -> None:
    """Issue 18: EventLogSink proves the seams: it and its file part import hookbus's public names
    (and that part of its own), nothing private of hookbus's."""
    imports = _imports(ROOT / "sinks" / "event_log.py") | _imports(ROOT / "sinks" / "_event_log_file.py")
    ours = sorted(m for m in imports if m.split(".")[0] == "hookbus")
    # Its argument checks are its WriterKit's now (issue 25): hookbus.validate is no longer needed.
    assert ours == ["hookbus.sink_api", "hookbus.sinks._event_log_file"]


#: What a sink file may import of hookbus: the sink authors' modules, and the sinks' own helpers.
_SINK_SURFACE = ("hookbus.sink_api", "hookbus.validate")


@pytest.mark.parametrize("path", sorted((ROOT / "sinks").rglob("*.py")), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_sink_file_is_written_on_the_sink_authors_modules(path: Path) -> None:
    """Issue 25: every built-in sink, and every helper of theirs, imports hookbus.sink_api and
    hookbus.validate only (and the sinks' own modules): no private module of hookbus's, and not the
    trainers' top level either; nor reaches a private name through an attribute (``hookbus._x``)."""
    tree = ast.parse(path.read_text())
    ours = {m for m in _imports(path) if m == "hookbus" or m.startswith("hookbus.")}
    wrong = sorted(m for m in ours if m not in _SINK_SURFACE and not m.startswith("hookbus.sinks."))
    assert wrong == [], f"{path.name} imports {wrong}: grow hookbus.sink_api instead"
    dotted = sorted(
        node.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "hookbus"
        and node.attr.startswith("_")
    )
    assert dotted == [], path.name
    for node in ast.walk(tree):  # and no name taken from a public module that is private there
        if isinstance(node, ast.ImportFrom) and node.module in _SINK_SURFACE:
            assert not [a.name for a in node.names if a.name.startswith("_")], path.name


def test_the_numpy_publisher_uses_no_private_name() -> None:
    """Issue 25: examples/custom_publisher.py, a publisher without TensorFlow, is written on
    hookbus.publisher_api (and the trainers' EventBus and sinks): no private module, no private
    attribute of anything hookbus hands it."""
    path = ROOT / "examples" / "custom_publisher.py"
    ours = sorted(m for m in _imports(path) if m.split(".")[0] == "hookbus")
    assert ours == ["hookbus", "hookbus.publisher_api", "hookbus.sinks"]
    private = sorted(
        node.attr
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, ast.Attribute) and node.attr.startswith("_") and not node.attr.startswith("__")
    )
    assert private == []


def test_the_sink_authors_surface_is_pinned() -> None:
    """Issue 25: hookbus.sink_api, the sink authors' module: the interface, its context,
    schedules, priorities, the events, the writer kit and the rules sinks share."""
    import hookbus.sink_api

    assert sorted(hookbus.sink_api.__all__) == [
        "BackgroundWriter",
        "BusStats",
        "CheckpointSaved",
        "CheckpointStore",
        "Checkpoints",
        "DEAD",
        "DEFAULT_FLUSH_DEADLINE",
        "ENDINGS",
        "EPOCH_PREFIX",
        "EVAL_PREFIX",
        "EpochProgress",
        "Event",
        "ExceptionRaised",
        "FileCheckpointStore",
        "FlushDeadline",
        "LEARNING_RATE_KEY",
        "LearningRate",
        "LearningRateChange",
        "ModelExport",
        "ModelExported",
        "ModelView",
        "OutputInUseError",
        "OutputLock",
        "OwnThreadWriter",
        "PRIORITY_CHECKPOINT",
        "PRIORITY_DEFAULT",
        "PRIORITY_EARLY_STOPPING",
        "PRIORITY_NAN_GUARD",
        "PRIORITY_STOP_AT_STEP",
        "PeerReport",
        "Priority",
        "ProfileOptions",
        "ProfileResult",
        "ProfileWindow",
        "Profiler",
        "RateRequest",
        "RunSummary",
        "RunTrace",
        "SIGNALS",
        "SYSTEM_MODE",
        "SYSTEM_NOTICE_KEY",
        "SYSTEM_PREFIX",
        "Schedule",
        "ScheduleTimer",
        "Sink",
        "SinkContext",
        "StopRequest",
        "SubscriberError",
        "SubscriberStats",
        "TEST_PREFIX",
        "TRACKER_STATUS",
        "UnknownKeyError",
        "WaitForStep",
        "WeightsBackend",
        "WriterError",
        "WriterKit",
        "WriterStalled",
        "WriterStats",
        "WriterWarning",
        "better_direction",
        "check_writable_dir",
        "did_you_mean",
        "encode_record",
        "event_log_line",
        "event_log_record",
        "how_ended",
        "is_real_dtype",
        "read_run_summary",
        "recover",
        "require_learning_rate",
        "run_summary_path",
        "step_of",
        "system_gpu_key",
        "system_gpu_of",
        "write_atomically",
    ]
    api = hookbus.sink_api
    for name in api.__all__:
        assert hasattr(api, name), name
    assert [
        api.Priority.NAN_GUARD,
        api.Priority.EARLY_STOPPING,
        api.Priority.STOP_AT_STEP,
        api.Priority.CHECKPOINT,
        api.Priority.DEFAULT,
    ] == [
        api.PRIORITY_NAN_GUARD,
        api.PRIORITY_EARLY_STOPPING,
        api.PRIORITY_STOP_AT_STEP,
        api.PRIORITY_CHECKPOINT,
        api.PRIORITY_DEFAULT,
    ]


def test_the_publisher_authors_surface_is_pinned() -> None:
    """Issue 25: hookbus.publisher_api: the core, its plan, what a publisher offers, the prefixes."""
    import hookbus.publisher_api

    assert sorted(hookbus.publisher_api.__all__) == [
        "CheckpointBackend",
        "CheckpointStore",
        "EPOCH_PREFIX",
        "EVAL_PREFIX",
        "EpochProgress",
        "ExampleCounter",
        "FileCheckpointStore",
        "MachineOffer",
        "ModelExport",
        "ModelView",
        "Plan",
        "ProfileOptions",
        "ProfilerBackend",
        "ProfilerBusy",
        "Profiling",
        "Publisher",
        "PublisherCore",
        "RESERVED_KEYS",
        "RUNS_ON",
        "RateBackend",
        "RunTrace",
        "Stops",
        "TEST_PREFIX",
        "Task",
        "Throughput",
        "WeightsBackend",
    ]
    for name in hookbus.publisher_api.__all__:
        assert hasattr(hookbus.publisher_api, name), name


def test_public_classes_show_their_public_path() -> None:
    """Issue 25: ``repr`` of a public class names the module it is documented in, never a private
    one (``repr(hookbus.Sink)`` was ``<class 'hookbus._subscriber.Sink'>``); a name two faces export
    is the same object in both, and shows one of them as its home (issue 46: people who train's
    ``hookbus`` for a name they use too)."""
    import hookbus.publisher_api
    import hookbus.sink_api
    import hookbus.testing

    assert repr(hookbus.sink_api.Sink) == "<class 'hookbus.sink_api.Sink'>"
    assert repr(hookbus.publisher_api.PublisherCore) == "<class 'hookbus.publisher_api.PublisherCore'>"
    assert repr(hookbus.EventBus) == "<class 'hookbus.EventBus'>"
    assert repr(hookbus.Event) == "<class 'hookbus.Event'>"
    for module in (hookbus, hookbus.sink_api, hookbus.publisher_api, hookbus.testing):
        for name in module.__all__:
            obj = getattr(module, name)
            if isinstance(obj, type):
                assert not obj.__module__.split(".")[-1].startswith("_"), (module.__name__, name, obj)
                home = importlib.import_module(obj.__module__)
                assert getattr(home, obj.__qualname__) is obj, (module.__name__, name, obj.__module__)
    for name in ("Event", "BusStats", "SubscriberStats", "WriterStats", "UnknownKeyError", "OutputInUseError"):
        assert getattr(hookbus, name) is getattr(hookbus.sink_api, name)  # one object, its home hookbus
    assert hookbus.Task is hookbus.publisher_api.Task


def test_what_the_bus_hands_out_of_its_records_is_read_only() -> None:
    """Issue 25: ``bus.subscribers`` and ``core.local_subscribers()`` are views: they read the
    bus's records live, and neither setting a field nor changing the list reaches the bus (before,
    both handed out the records themselves: ``priority = -1`` reordered the dispatch)."""
    from hookbus.testing import ScriptedPublisher

    class Counter(hookbus.sink_api.Sink):
        def on_after_run(self, event: hookbus.Event) -> None:
            raise RuntimeError("boom")

    bus = hookbus.EventBus()
    sink = bus.attach(Counter(on_error="isolate"))
    pub = ScriptedPublisher(bus, keys=["loss"])
    for got in (bus.subscribers, pub.core.local_subscribers()):
        (view,) = got
        assert (view.sink, view.name, view.priority) == (sink, "Counter", hookbus.sink_api.PRIORITY_DEFAULT)
        for field, value in (("priority", -1), ("errors", 0), ("disabled", True), ("keys", None)):
            with pytest.raises(AttributeError):
                setattr(view, field, value)
        with pytest.raises(TypeError):
            view.handlers["after_run"] = print  # type: ignore[index]
        got.clear()
    assert [v.sink for v in bus.subscribers] == [sink]
    with bus:
        pub.run({"loss": 1.0} for _ in range(2))
    assert view.errors == 2  # live: the bus's count, read through the view


def run_python(code: str, cwd: Path = ROOT, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=120,
        env={**_base_env(), **env},
        check=False,
    )


def _base_env() -> dict[str, str]:
    import os

    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


@pytest.mark.subprocess
def test_imports_and_scripted_run_without_tensorflow() -> None:
    result = run_python(
        """
        import sys
        sys.modules["tensorflow"] = None  # any import of TensorFlow now fails
        import hookbus, hookbus.sinks, hookbus.testing
        from hookbus.testing import FakeClock, ScriptedPublisher

        bus = hookbus.EventBus(clock=FakeClock())
        got = []
        bus.on("after_run", lambda e: got.append((e.step, e.values["loss"])), every_n_steps=2)
        pub = ScriptedPublisher(bus, keys=["loss"])
        with bus:
            pub.run({"loss": float(s)} for s in range(1, 6))
        assert got == [(2, 2.0), (4, 4.0)], got
        try:
            hookbus.EventBusHook(bus, {})
        except ImportError as error:
            assert "needs TensorFlow" in str(error), error
        else:
            raise AssertionError("EventBusHook without TensorFlow did not raise")
        assert sys.modules["tensorflow"] is None
        print("ok")
        """
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


@pytest.mark.subprocess
def test_wheel_ships_the_sinks_package_and_py_typed(tmp_path: Path) -> None:
    source = tmp_path / "src"
    source.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, source / name)
    for name in ("hookbus", "sinks"):
        shutil.copytree(ROOT / name, source / name, ignore=shutil.ignore_patterns("__pycache__"))
    dist = tmp_path / "dist"
    build = subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(dist), str(source)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (wheel,) = dist.glob("hookbus-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"hookbus/__init__.py", "hookbus/py.typed", "hookbus/sinks/__init__.py"} <= names
    assert not any(name.startswith("sinks/") for name in names)

    target = tmp_path / "site"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--target", str(target), str(wheel)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    result = run_python(
        """
        import sys
        sys.modules["tensorflow"] = None
        import hookbus, hookbus.sinks
        print(hookbus.__file__)
        print(hookbus.sinks.__file__)
        """,
        cwd=tmp_path,  # not the checkout: `-c` puts the working directory first on sys.path
        PYTHONPATH=str(target),
    )
    assert result.returncode == 0, result.stderr
    hookbus_file, sinks_file = result.stdout.split()
    assert Path(hookbus_file).is_relative_to(target)
    assert Path(sinks_file) == target / "hookbus" / "sinks" / "__init__.py"


def test_readme_commands_are_the_ones_ci_runs() -> None:
    """The README's test commands are what .ci/run runs, the fast tier first; the demo runs the console script."""
    root = Path(__file__).resolve().parent.parent
    readme = (root / "README.md").read_text()
    commands = [line for line in readme.splitlines() if line.startswith("python3 -m venv .venv && ")]
    demo = [c for c in commands if c.endswith("hookbus demo")]
    tests = [c for c in commands if "pytest" in c]
    assert len(demo) == 1, commands
    assert len(tests) == 1, commands
    ci = (root / ".ci" / "run").read_text().splitlines()
    assert tests[0] in ci
    # The fast tier (the suite without TensorFlow) runs first.
    fast = [line for line in readme.splitlines() if line.startswith("python3 -m venv .venv-notf && ")]
    assert len(fast) == 1, fast
    assert "tf" not in fast[0].split("pip install", 1)[1].split("&&")[0], fast[0]  # no TensorFlow extra
    assert fast[0] in ci
    assert ci.index(fast[0]) < ci.index(tests[0])
    pyproject = (root / "pyproject.toml").read_text()
    assert 'hookbus = "hookbus._cli._cli:main"' in pyproject


# -- the README and the guides: every command they give, every link, every test they name --------

#: The front page, the site's pages (docs/: the guides; README "Guides and reference") and the two guides kept
#: beside what they describe (the site includes them whole, with pymdownx.snippets).
GUIDES = (
    "README.md",
    *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md") if "reference" not in p.parts),
    "bench/README.md",
    "tests/reliability/README.md",
)

#: A line of a page that includes another file, or one section of it (pymdownx.snippets, mkdocs.yml).
SNIPPET = re.compile(r'^--8<-- "([^":]+)(?::([\w-]+))?"$', re.MULTILINE)


def page_text(path: Path) -> str:
    """The markdown of ``path`` as the site builds it: each snippet line replaced by what it includes."""

    def include(match: re.Match[str]) -> str:
        text = (ROOT / match.group(1)).read_text()
        if match.group(2):
            start = f"<!-- --8<-- [start:{match.group(2)}] -->\n"
            end = f"<!-- --8<-- [end:{match.group(2)}] -->"
            assert start in text, f"{path.name}: {match.group(0)}: no such section"
            assert end in text, f"{path.name}: {match.group(0)}: the section does not end"
            text = text.split(start, 1)[1].split(end, 1)[0]
        return text

    return SNIPPET.sub(include, path.read_text())


def guide_commands(name: str) -> list[str]:
    """The commands ``name`` gives: each line of its ``bash`` blocks, and inline ``.venv/bin/...`` spans."""
    text = page_text(ROOT / name)
    found = [
        line.strip()
        for block in re.findall(r"^```bash\n(.*?)^```", text, re.MULTILINE | re.DOTALL)
        for line in block.splitlines()
        if line.strip() and not line.lstrip().startswith("#")
    ]
    found += re.findall(r"`(\.venv/bin/[^`]+)`", text)
    return found


def argparse_flags(script: Path) -> dict[str, list[str] | None]:
    """The ``--flags`` ``script`` declares with ``add_argument``, each with its ``choices`` (or ``None``)."""
    flags: dict[str, list[str] | None] = {}
    for node in ast.walk(ast.parse(script.read_text())):
        if isinstance(node, ast.Call) and getattr(node.func, "attr", None) == "add_argument":
            first = node.args[0] if node.args else None
            if isinstance(first, ast.Constant) and str(first.value).startswith("--"):
                choices = next((kw.value for kw in node.keywords if kw.arg == "choices"), None)
                flags[str(first.value)] = (
                    [str(e.value) for e in choices.elts if isinstance(e, ast.Constant)]
                    if isinstance(choices, ast.List)
                    else None
                )
    return flags


def check_guide_command(command: str) -> None:
    """Fail unless ``command`` runs as written, as far as can be told without running it."""
    import tomllib

    from hookbus._cli._cli import _parser
    from hookbus._cli._replay import _spec
    from hookbus.sinks import EarlyStoppingSink

    line = command.split(" # ")[0].split(" | ")[0].strip()
    for part in (shlex.split(p) for p in line.split("&&")):
        program, args = part[0], part[1:]
        if program == "python3" and args[:2] == ["-m", "venv"] and args[2] in (".venv", ".venv-notf"):
            continue  # the README's venvs: with TensorFlow, and the fast tier's without it
        program = program.replace(".venv-notf/", ".venv/")
        if program == ".venv/bin/pip":
            assert args[:3] == ["install", "-q", "-e"], command
            extras = args[3].removeprefix(".[").removesuffix("]").split(",")
            declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
            assert set(extras) <= set(declared), (command, sorted(declared))
        elif program == ".venv/bin/python" and args[:2] == ["-m", "pytest"]:
            continue  # the README's test commands: test_readme_commands_are_the_ones_ci_runs
        elif program == ".venv/bin/python" and args[0].startswith("examples/"):
            # tests/test_examples.py checks that it is one its docstring gives (and runs)
            assert "<name>" in args[0] or (ROOT / args[0]).is_file(), command
        elif program == ".venv/bin/python" and args[0].startswith("bench/"):
            flags = argparse_flags(ROOT / args[0])
            for i, arg in enumerate(args[1:], start=1):
                if arg.startswith("--"):
                    assert arg in flags, f"{command}: {args[0]} has no {arg} (it has {sorted(flags)})"
                    choices = flags[arg]
                    assert choices is None or args[i + 1] in choices, (command, choices)
        elif program in ("hookbus", ".venv/bin/hookbus"):
            if args in (["--version"], ["--help"]):
                continue
            parsed = _parser().parse_args(args)  # argparse exits (status 2) on what it refuses
            if getattr(parsed, "early_stopping", None):
                EarlyStoppingSink(**_spec(parsed.early_stopping))
        elif program == ".venv/bin/mkdocs":
            assert args in (["serve"], ["build", "--strict"]), command
            assert (ROOT / "mkdocs.yml").is_file(), command
        elif program == ".venv/bin/tensorboard":
            assert (VENV_BIN / "tensorboard").is_file(), "tensorboard is a dependency: its script is in the venv"
            assert args[0] == "--logdir", command
        else:
            raise AssertionError(f"{command!r}: say in check_guide_command how this command is checked")


VENV_BIN = Path(sys.executable).parent


@pytest.mark.parametrize("name", GUIDES)
def test_every_command_the_readme_and_the_guides_give_runs_as_written(name: str) -> None:
    commands = guide_commands(name)
    if name in ("README.md", "bench/README.md", "docs/getting-started.md"):  # a page of the site may give none
        assert commands, f"{name} gives no command"
    for command in commands:
        check_guide_command(command)


def github_anchor(heading: str) -> str:
    """The anchor GitHub gives a markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.strip().lower())
    return text.replace(" ", "-")


@pytest.mark.parametrize("name", GUIDES)
def test_every_relative_link_in_the_readme_and_the_guides_resolves(name: str) -> None:
    path = ROOT / name
    text = re.sub(r"^```.*?^```", "", page_text(path), flags=re.MULTILINE | re.DOTALL)
    links = re.findall(r"\]\(([^)\s]+)\)", text)
    if not name.startswith("docs/guides/"):  # a guide may stand alone, but the site's pages link
        assert links, f"{name} links nowhere"
    for link in links:
        if re.match(r"[a-z]+:", link):
            continue  # https:, mailto:
        target, _, anchor = link.partition("#")
        file = (path.parent / target).resolve() if target else path
        assert file.exists(), f"{name}: {link} points to {file}, which does not exist"
        assert file.is_relative_to(ROOT), f"{name}: {link} leaves the repository"
        if anchor:
            prose = re.sub(r"^```.*?^```", "", page_text(file), flags=re.MULTILINE | re.DOTALL)
            headings = re.findall(r"^#+ (.+)$", prose, re.MULTILINE)
            assert anchor in {github_anchor(h) for h in headings}, f"{name}: {link}: no heading with that anchor"


def test_the_readme_links_only_to_itself_or_to_absolute_addresses() -> None:
    """The README is the wheel's long description (pyproject ``readme``) and the site's home page
    (``docs/index.md`` includes it): a relative link would lead nowhere on PyPI. It names the
    site's pages instead (``docs/...``, checked by the front-page test) and links only to its own
    headings or to absolute addresses."""
    text = re.sub(r"^```.*?^```", "", (ROOT / "README.md").read_text(), flags=re.MULTILINE | re.DOTALL)
    headings = {github_anchor(h) for h in re.findall(r"^#+ (.+)$", text, re.MULTILINE)}
    for link in re.findall(r"\]\(([^)\s]+)\)", text):
        if link.startswith("#"):
            assert link[1:] in headings, f"README: {link}: no heading with that anchor"
        else:
            assert re.match(r"https?://", link), f"README: {link} is relative: it leads nowhere on PyPI"


def test_every_test_the_guarantees_name_exists() -> None:
    """tests/reliability/README.md names each guarantee's tests, a file by its name (one file under
    tests/ has it) or its path; a renamed, moved or removed test fails here."""
    text = (ROOT / "tests" / "reliability" / "README.md").read_text()
    tests = ROOT / "tests"
    found = sorted(tests.rglob("test_*.py"))
    defined = {m for f in found for m in re.findall(r"^\s*def (test_\w+)", f.read_text(), re.M)}
    files = {f.name for f in found}
    named_files = set(re.findall(r"\b(test_\w+\.py)\b", text))
    named_tests = set(re.findall(r"(?:::|`)(test_\w+)\b(?!\.py)", text))
    assert named_files
    assert named_tests
    assert named_files <= files, sorted(named_files - files)
    assert named_tests <= defined, sorted(named_tests - defined)
    shared = sorted(n for n in named_files if [f.name for f in found].count(n) > 1)
    assert shared == [], f"more than one test file has each of these names: name them by their path {shared}"
    paths = set(re.findall(r"\b(tests/[\w/]+\.py)\b", text))
    assert paths
    assert all((ROOT / p).is_file() for p in paths), sorted(p for p in paths if not (ROOT / p).is_file())


def test_every_readme_section_the_code_cites_exists() -> None:
    """Code cites a section as ``README "<heading>"`` or ``docs/guides/<page>.md "<heading>"``: it exists."""
    cite = re.compile(
        r"\b((?:bench/|tests/reliability/)?README|docs/[\w/-]+)(?:\.md)?(?:'s)?[\s#]+\"([^\"\n<][^\"\n]*)\""
    )
    cited = 0
    code = ("hookbus/**/*.py", "sinks/**/*.py", "tests/**/*.py", "bench/*.py", "examples/*.py", ".ci/run")
    for path in (p for pattern in code for p in ROOT.glob(pattern)):
        for guide, section in cite.findall(path.read_text()):
            prose = re.sub(r"^```.*?^```", "", page_text(ROOT / f"{guide}.md"), flags=re.MULTILINE | re.DOTALL)
            headings = [h.lower() for h in re.findall(r"^#+ (.+)$", prose, re.MULTILINE)]
            found = any(h.startswith(section.lower()) for h in headings)
            assert found, f'{path.name}: {guide} has no section "{section}"'
            cited += 1
        # and never a file the repository does not have (a design note kept outside it)
        assert path == Path(__file__) or "DESIGN" not in path.read_text(), f"{path.name} cites DESIGN"
    assert cited


def test_the_readme_is_a_front_page_its_guarantees_a_bullet_per_theme() -> None:
    """The README stays a front page, pinned by what it must hold, not by a line count (issue 46:
    the cap became a budget). Its guarantees are a bullet per theme of
    tests/reliability/README.md, in its order, named by the theme's heading and naming each of its
    promises by its title; a promise's full text and its tests are there, under that heading."""
    readme = (ROOT / "README.md").read_text()
    section = readme.split("\n## Guarantees\n", 1)[1].split("\n## ", 1)[0]
    bullets: list[str] = []
    for line in section.splitlines():
        if line.startswith("- "):
            bullets.append(line)
        elif line.startswith("  "):
            assert bullets, line
            bullets[-1] += " " + line.strip()
    full = (ROOT / "tests" / "reliability" / "README.md").read_text()
    intro, *parts = re.split(r"^## (.+)\n", full, flags=re.MULTILINE)
    assert not re.search(r"^- \*\*", intro, re.MULTILINE), "every guarantee sits under a theme's heading"
    themes = list(zip(parts[::2], parts[1::2], strict=True))
    assert len(bullets) == len(themes), [b[:60] for b in bullets]
    # No link: the README is the wheel's long description, where a relative link leads nowhere.
    named = re.compile(r"- \*\*(.+?)\.\*\* ")
    for bullet, (theme, body) in zip(bullets, themes, strict=True):
        found = named.match(bullet)
        assert found, f"README's Guarantees: {bullet[:60]!r} does not begin with its theme's name"
        assert found.group(1) == theme, (found.group(1), theme)
        titles = re.findall(r"^- \*\*(.+?)\*\*", body, re.MULTILINE)
        assert titles, f"tests/reliability/README.md: the theme {theme!r} holds no guarantee"
        for title in titles:  # each promise is named in its theme's bullet, by its title
            assert title.rstrip(".").split(" (")[0] in bullet, f"README's {theme!r} lacks {title!r}"
    for path in re.findall(r"\b((?:hookbus|sinks|tests|examples|bench)/[\w/]+\.py)\b", readme):
        assert (ROOT / path).is_file(), f"the README names {path}, which does not exist"
    for page in re.findall(r"`(docs/[\w/.-]+)`", readme):  # the site's pages, named, not linked
        assert (ROOT / page).exists(), f"the README names {page}, which does not exist"


def test_pyproject_lists_every_package_folder() -> None:
    """setuptools installs the packages pyproject names (``sinks/`` under ``hookbus.sinks``): a
    folder missing from the list would be missing from a wheel, and only there."""
    import tomllib

    listed = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"]
    folders = sorted(name for name, path in modules().items() if path.name == "__init__.py")
    assert sorted(listed) == folders


_FACES: tuple[str, ...] = ("hookbus", "hookbus.sink_api", "hookbus.publisher_api", "hookbus.testing")
_FACES += ("hookbus.validate", "hookbus.sinks")
_DUNDERS_USED = ("__init__", "__call__", "__enter__", "__iter__", "__getitem__", "__contains__")


def _annotation_namespace(function: Any) -> dict[str, Any]:
    """What ``function``'s annotations name: the globals of the module that defines it (its
    ``__globals__``: a public class's ``__module__`` names its face, not where it is defined) and
    the names that module imports under ``if TYPE_CHECKING:`` (imported here, as mypy reads them)."""
    namespace: dict[str, Any] = dict(function.__globals__)
    source = sys.modules[namespace["__name__"]]
    namespace["__package__"] = source.__package__
    tree = ast.parse(Path(str(source.__file__)).read_text())
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) in ("TYPE_CHECKING", "typing.TYPE_CHECKING"):
            for statement in node.body:
                if isinstance(statement, (ast.Import, ast.ImportFrom)):
                    code = compile(ast.Module(body=[statement], type_ignores=[]), str(source.__file__), "exec")
                    exec(code, namespace)
    return namespace


def _named_types(hint: Any) -> set[type]:
    found: set[type] = set()
    if isinstance(hint, type):
        found.add(hint)
    origin = typing.get_origin(hint)
    if isinstance(origin, type):
        found.add(origin)
    for argument in typing.get_args(hint):
        if isinstance(argument, list):  # Callable[[A, B], R]'s parameters
            for inner in argument:
                found |= _named_types(inner)
        else:
            found |= _named_types(argument)
    return found


def _public_signatures() -> list[tuple[str, Any]]:
    """Every public function of the faces, and every public method (and constructor) of their classes."""
    found: list[tuple[str, Any]] = []
    for face in _FACES:
        module = importlib.import_module(face)
        for name in module.__all__:
            obj = getattr(module, name)
            if inspect.isclass(obj):
                for member, value in vars(obj).items():
                    if member.startswith("_") and member not in _DUNDERS_USED:
                        continue
                    value = value.fget if isinstance(value, property) else value
                    value = value.__func__ if isinstance(value, (staticmethod, classmethod)) else value
                    if inspect.isfunction(value):
                        found.append((f"{face}.{name}.{member}", value))
            elif inspect.isfunction(obj):
                found.append((f"{face}.{name}", obj))
    return found


def test_no_private_type_leaks_into_a_public_signature() -> None:
    """Every class a public signature names (parameters and results, ``TYPE_CHECKING`` names
    resolved) is exported by a face, or is not hookbus's: what a user is handed, they can name."""
    public = {id(getattr(importlib.import_module(f), n)) for f in _FACES for n in importlib.import_module(f).__all__}
    signatures = _public_signatures()
    assert len(signatures) > 300
    leaks = []
    for label, function in signatures:
        hints = typing.get_type_hints(function, globalns=_annotation_namespace(function))
        for parameter, hint in hints.items():
            for named in _named_types(hint):
                if named.__module__.split(".")[0] == "hookbus" and id(named) not in public:
                    leaks.append(f"{label} {parameter}: {named.__module__}.{named.__qualname__}")
    assert sorted(set(leaks)) == []


def test_ci_tests_the_lowest_tensorflow_the_project_claims() -> None:
    """pyproject claims ``tensorflow>=X``: .ci/run installs X with the dev extra in one resolve and
    runs the TensorFlow tests of every publisher there, from paths that exist."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extras = (*project["tf"], *project["tf-cpu"])
    bounds = {re.fullmatch(r"tensorflow(?:-cpu)?>=([\d.]+)", d) for d in extras if d.startswith("tensorflow")}
    assert None not in bounds, project
    (lowest,) = {bound.group(1) for bound in bounds if bound is not None}
    (keras,) = {d.removeprefix("keras>=") for d in extras if d.startswith("keras>=")}
    ci = (ROOT / ".ci" / "run").read_text()
    assert f"-e '.[dev]' 'tensorflow-cpu=={lowest}.*' 'keras=={keras}." in ci
    tier = ci.split(f"== the lowest TensorFlow: {lowest}", 1)[1]
    paths = re.findall(r"\btests/\S+", tier)
    assert len(paths) >= 10, paths
    assert [p for p in paths if not (ROOT / p).exists()] == []
    for publisher in ("tests/_tf/hook/test_hook.py", "tests/_tf/keras", "tests/_tf/loop/test_loop.py"):
        assert publisher in paths


def test_the_reference_has_a_page_per_sink_and_per_publisher_and_ci_builds_it_strictly() -> None:
    """The site's reference (docs/reference/, generated by mkdocstrings) has a page for each sink
    ``hookbus.sinks`` exports and each publisher, in the site's navigation: a new sink without its
    page fails here, not in a reader's search. .ci/run builds the site strictly, with the docs extra."""
    import tomllib

    import hookbus.sinks
    from hookbus.sink_api import Sink

    mkdocs = (ROOT / "mkdocs.yml").read_text()
    sinks = [n for n in hookbus.sinks.__all__ if isinstance(getattr(hookbus.sinks, n), type)]
    sinks = [n for n in sinks if issubclass(getattr(hookbus.sinks, n), Sink)]
    assert len(sinks) >= 15, sinks
    pages = [("sinks", n, f"hookbus.sinks.{n}") for n in sinks]
    pages += [("publishers", n, f"hookbus.{n}") for n in ("EventBusHook", "EventBusCallback", "LoopPublisher")]
    for folder, name, path in pages:
        page = ROOT / "docs" / "reference" / folder / f"{name}.md"
        assert page.is_file(), f"{path} has no reference page ({page.relative_to(ROOT)})"
        assert f"::: {path}\n" in page.read_text(), page
        assert f"{name}: reference/{folder}/{name}.md" in mkdocs, f"mkdocs.yml's nav lacks {name}"
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert any(r.startswith("mkdocstrings-python==") for r in extras["docs"]), extras["docs"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert "install_in_background docs .venv-docs -e '.[docs]'" in ci
    assert "\nNO_MKDOCS_2_WARNING=1 .venv-docs/bin/mkdocs build --strict\n" in ci
