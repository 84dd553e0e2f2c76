"""The checkpoint seam without TensorFlow: a store's files, the retention policy, CheckpointSink on its own store.

Issue 24, item 2: storage (listing, the pointer, state files, removing) sits with the
publisher's store, policy (when, what to keep, best-k) with the sink; a sink's context has one
checkpoint field. Everything here runs with TensorFlow blocked from importing.
"""

from __future__ import annotations

import dataclasses
import gc
import json
import os
import re
import sys
import tracemalloc
from pathlib import Path

import pytest

import hookbus
from hookbus._checkpoints._store import recover
from hookbus.sinks import CheckpointSink, CSVSink, EarlyStoppingSink
from hookbus.testing import ScriptedPublisher


@pytest.fixture(autouse=True)
def no_tensorflow(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any TensorFlow import fails here (``None`` in ``sys.modules``), as where it is not installed."""
    import hookbus._tf._import

    monkeypatch.setitem(sys.modules, "tensorflow", None)
    monkeypatch.setattr(hookbus._tf._import, "_tensorflow", None)


def make(store: hookbus.publisher_api.FileCheckpointStore, prefix: Path, step: int | None = None) -> str:
    """A checkpoint at ``prefix`` (its marker file), with a state file when ``step`` is given."""
    prefix.with_name(prefix.name + store.marker).write_text("model")
    if step is not None:
        store.write_state(str(prefix), {"step": step})
    return str(prefix)


def test_the_pointer_names_existing_checkpoints_relative_to_its_directory(tmp_path: Path) -> None:
    store = hookbus.publisher_api.FileCheckpointStore(".npz")
    (tmp_path / "d").mkdir()
    a, b = (make(store, tmp_path / "d" / f"model.ckpt-{s}") for s in (1, 2))
    assert store.checkpoints(str(tmp_path / "d")) == []  # no pointer yet
    store.set_pointer(str(tmp_path / "d"), [a, b])
    assert json.loads((tmp_path / "d" / "checkpoint.json").read_text()) == {
        "latest": "model.ckpt-2",
        "all": ["model.ckpt-1", "model.ckpt-2"],
    }
    os.rename(tmp_path / "d", tmp_path / "moved")  # relative names: the directory can move
    moved = str(tmp_path / "moved")
    assert store.checkpoints(moved) == [os.path.join(moved, "model.ckpt-1"), os.path.join(moved, "model.ckpt-2")]
    os.remove(os.path.join(moved, "model.ckpt-1.npz"))  # a checkpoint whose marker is gone is not listed
    assert store.checkpoints(moved) == [os.path.join(moved, "model.ckpt-2")]


def test_remove_takes_a_checkpoints_files_and_no_longer_prefixs(tmp_path: Path) -> None:
    store = hookbus.publisher_api.FileCheckpointStore(".npz", r"\.(npz|opt\.npz)")
    prefix = make(store, tmp_path / "model.ckpt-1", step=1)
    (tmp_path / "model.ckpt-1.opt.npz").write_text("optimizer")
    longer = make(store, tmp_path / "model.ckpt-10", step=10)
    (tmp_path / "model.ckpt-1.notes").write_text("a person's file")
    store.remove(prefix)
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model.ckpt-1.notes",
        "model.ckpt-10.hookbus.json",
        "model.ckpt-10.npz",
    ]
    assert store.read_state(longer) == {"step": 10}
    assert store.read_state(prefix) is None


def test_listing_the_files_of_ever_new_checkpoints_keeps_nothing_per_name(tmp_path: Path) -> None:
    """Each save and prune lists one new checkpoint's files; through ``glob`` every name's pattern
    stayed compiled in fnmatch's cache (~0.9 KB each, up to 32,768 of them: 1.7 MB here)."""
    store = hookbus.publisher_api.FileCheckpointStore(".npz")
    prefix = make(store, tmp_path / "model.ckpt-1000", step=1000)
    (tmp_path / "model.ckpt-10000.npz").write_text("a longer prefix's")
    assert sorted(store.files(prefix)) == [prefix + ".hookbus.json", prefix + ".npz"]
    assert store.files(str(tmp_path / "absent" / "model.ckpt-1")) == []
    gc.collect()
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for step in range(2000):
            assert store.files(str(tmp_path / f"run.ckpt-{step}")) == []
        gc.collect()
        kept = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert kept < 128 * 1024, f"{kept:,} bytes kept after listing 2,000 checkpoint names"


def test_set_aside_and_copy_move_every_file_of_a_checkpoint(tmp_path: Path) -> None:
    store = hookbus.publisher_api.FileCheckpointStore(".npz")
    prefix = make(store, tmp_path / "model.ckpt-3", step=3)
    copied = store.copy(prefix, str(tmp_path / "best"))
    assert copied == str(tmp_path / "best" / "model.ckpt-3")
    assert store.problem(copied) is None
    assert store.read_state(copied) == {"step": 3}
    moved = store.set_aside(prefix)
    assert moved == str(tmp_path / "unreadable" / "model.ckpt-3")
    assert store.problem(prefix) == "its file model.ckpt-3.npz is missing"
    assert store.read_state(moved) == {"step": 3}


def test_recover_prunes_beyond_keep_and_unlisted_checkpoints_with_states_never_the_latest(tmp_path: Path) -> None:
    store = hookbus.publisher_api.FileCheckpointStore(".npz")
    prefixes = [make(store, tmp_path / f"model.ckpt-{s}", step=s) for s in (1, 2, 3, 4)]
    foreign = make(store, tmp_path / "model.ckpt-9")  # no state file: not hookbus's, left alone
    assert recover(store, str(tmp_path), 1) == ([], [])  # no pointer: nothing is known to be stale
    store.set_pointer(str(tmp_path), prefixes[1:])  # a kill between the pointer and pruning left step 1
    assert recover(store, str(tmp_path), 2) == (prefixes[2:], [prefixes[1], prefixes[0]])
    assert foreign not in recover(store, str(tmp_path), 1)[1]


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"marker": "npz"}, "marker must be a file suffix such as '.npz' (got 'npz')"),
        ({"marker": ".npz", "pattern": "("}, "pattern must be a regular expression (got '('"),
        ({"marker": ".npz", "pattern": r"\.pt"}, r"pattern '\\.pt' must match the marker '.npz'"),
        ({"marker": ".npz", "pointer": ""}, "pointer must be a file name (got '')"),
    ],
)
def test_a_store_with_bad_arguments_fails_naming_them(arguments: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        hookbus.publisher_api.FileCheckpointStore(**arguments)


def test_a_store_that_is_not_one_fails_before_step_1() -> None:
    core = hookbus.publisher_api.PublisherCore(hookbus.EventBus(), ["loss"])
    with pytest.raises(TypeError, match=r"store must be a hookbus.publisher_api.CheckpointStore \(got 'runs/ckpt'\)"):
        core.offer_checkpoints(Weights(), "runs/ckpt")  # type: ignore[arg-type]


def test_a_backend_offered_without_its_store_fails_asking_for_one() -> None:
    """The bus knows no checkpoint layout of its own (TensorFlow's is the TensorFlow publishers'):
    a backend comes with the store its checkpoints live in; ``None`` withdraws both."""
    core = hookbus.publisher_api.PublisherCore(hookbus.EventBus(), ["loss"])
    message = r"store must be a hookbus.publisher_api.CheckpointStore \(got None\): give the store"
    with pytest.raises(TypeError, match=message):
        core.offer_checkpoints(Weights())
    core.offer_checkpoints(None)


def test_an_ordinary_sinks_context_has_one_checkpoint_field() -> None:
    """What served CheckpointSink alone (prepare, commit, record, ...) is one object, ``checkpoints``."""
    fields = [f.name for f in dataclasses.fields(hookbus.sink_api.SinkContext)]
    assert [f for f in fields if "checkpoint" in f or f in ("load_states", "mark_evaluated")] == ["checkpoints"]


# -- CheckpointSink on a store of its publisher's, no TensorFlow -------------------------------
class Weights:
    """A model of one number per step, saved as ``<prefix>.npz`` (text, for the test)."""

    def __init__(self) -> None:
        self.value = 0.0
        self.live = True

    @property
    def ready(self) -> bool:
        return self.live

    def save(self, path: str) -> str:
        Path(path + ".npz").write_text(str(self.value))
        return path

    def restore(self, path: str) -> None:
        self.value = float(Path(path + ".npz").read_text())


def train(
    directory: Path, steps: range, *, every_n_steps: int, keep: int = 5, keep_best: int = 0, monitor: str | None = None
) -> tuple[ScriptedPublisher, Weights]:
    store = hookbus.publisher_api.FileCheckpointStore(".npz")
    bus = hookbus.EventBus()
    bus.attach(CSVSink(directory / "metrics.csv", every_n_steps=1))
    bus.attach(EarlyStoppingSink("loss", patience=100, every_n_steps=1))
    sink = bus.attach(
        CheckpointSink(
            directory / "ckpt", every_n_steps, every_n_secs=None, keep=keep, keep_best=keep_best, monitor=monitor
        )
    )
    assert isinstance(sink, CheckpointSink)
    publisher, weights = ScriptedPublisher(bus, keys=["loss"]), Weights()
    publisher.core.offer_checkpoints(weights, store)
    with bus:
        publisher.begin()
        latest = store.checkpoints(str(directory / "ckpt"))
        if latest:
            weights.restore(latest[-1])
        publisher.session(steps.start, restored=bool(latest))
        for step in steps:
            weights.value = float(step)
            publisher.advance({"loss": 10.0 - step}, step=step + 1)
        publisher.end()
    return publisher, weights


def test_the_sink_keeps_its_policy_on_the_publishers_store(tmp_path: Path) -> None:
    train(tmp_path, range(0, 10), every_n_steps=2, keep=2, keep_best=1, monitor="loss")
    store = hookbus.publisher_api.FileCheckpointStore(".npz")
    ckpt = tmp_path / "ckpt"
    assert [Path(p).name for p in store.checkpoints(str(ckpt))] == ["model.ckpt-8", "model.ckpt-10"]
    assert sorted(p.name for p in ckpt.glob("model.ckpt-*.npz")) == ["model.ckpt-10.npz", "model.ckpt-8.npz"]
    assert [Path(p).name for p in store.checkpoints(str(ckpt / "best"))] == ["model.ckpt-10"]
    state = store.read_state(str(ckpt / "model.ckpt-8"))
    assert state is not None
    assert (state["step"], state["value"]) == (8, 3.0)  # the loss at step 8
    assert state["sinks"]["EarlyStoppingSink"]["best"] == 3.0
    assert not (ckpt / "checkpoint").exists()  # nothing of TensorFlow's layout


def test_a_resume_from_the_publishers_store_writes_each_row_once(tmp_path: Path) -> None:
    train(tmp_path, range(0, 5), every_n_steps=4)  # checkpoints at 4 and 5 (the end)
    store = hookbus.publisher_api.FileCheckpointStore(".npz")
    latest = store.checkpoints(str(tmp_path / "ckpt"))[-1]
    assert Path(latest).name == "model.ckpt-5"
    store.remove(latest)  # back to step 4: the row of step 5 is on disk and must go
    store.set_pointer(str(tmp_path / "ckpt"), store.checkpoints(str(tmp_path / "ckpt")))
    _, weights = train(tmp_path, range(4, 8), every_n_steps=4)
    rows = (tmp_path / "metrics.csv").read_text().splitlines()[1:]
    assert [int(row.split(",")[0]) for row in rows] == list(range(1, 9))
    assert weights.value == 7.0
