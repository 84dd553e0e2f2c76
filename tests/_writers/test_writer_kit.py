"""A writer sink of a user's, written on the sink authors' module alone (``hookbus.sink_api``), issue 25.3.

``TSVSink`` below is the whole sink: a format (one tab-separated line per step) and nothing else.
The lifecycle — options, the lock, the background writer, the flush deadline, stats after close —
is its kit's, the same one CSVSink, TensorBoardSink and EventLogSink own. Driven by scripted
events (no TensorFlow), through the bus's own barrier (the flush at a session's end).
"""

from __future__ import annotations

import ast
import logging
import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

import pytest

import hookbus
from hookbus.sink_api import Event, Sink, WriterKit, WriterStats
from hookbus.testing import ScriptedPublisher


class TSVSink(Sink):
    """Writes ``step<TAB>loss`` lines to ``path``; ``options`` are the kit's (``flush_secs``, ...)."""

    def __init__(
        self,
        path: str | os.PathLike[str],
        opener: Callable[[Path], IO[str]] | None = None,
        name: str | None = None,
        **options: Any,
    ) -> None:
        super().__init__(keys=["loss"], every_n_steps=1, name=name)
        self.path = WriterKit.file_path("path", path)
        self.output: WriterKit[str] = WriterKit(self.name, **options)
        self._opener = opener or (lambda path: path.open("a", encoding="utf-8"))

    def on_begin(self, event: Event) -> None:
        if self.output.writing:
            return
        self.output.prepare(self.path.parent)
        self.output.lock(self.path, "the TSV file")
        file = self._opener(self.path)
        self.output.start(file.write, file.flush, file.close, target=repr(str(self.path)))

    def on_after_run(self, event: Event) -> None:
        if self.output.writing:
            self.output.put(f"{event.step}\t{event.values['loss']!r}\n")

    def flush(self) -> None:
        self.output.flush()

    def writer_stats(self) -> WriterStats | None:
        return self.output.stats()

    def close(self) -> None:
        self.output.close()


def _rows(path: Path) -> list[tuple[int, float]]:
    return [(int(step), float(loss)) for step, loss in (line.split("\t") for line in path.read_text().splitlines())]


def test_the_sink_is_written_on_public_names_only() -> None:
    imports = {
        alias.name if isinstance(node, ast.Import) else node.module or ""
        for node in ast.walk(ast.parse(Path(__file__).read_text()))
        if isinstance(node, ast.Import | ast.ImportFrom)
        for alias in node.names
    }
    assert sorted(m for m in imports if m.startswith("hookbus")) == ["hookbus", "hookbus.sink_api", "hookbus.testing"]
    (sink,) = (
        n
        for n in ast.walk(ast.parse(Path(__file__).read_text()))
        if isinstance(n, ast.ClassDef) and n.name == "TSVSink"
    )
    # The sink itself names nothing but the sink authors' module (the tests drive it with hookbus.EventBus).
    assert not [n.lineno for n in ast.walk(sink) if isinstance(n, ast.Name) and n.id == "hookbus"]


def test_rows_are_on_disk_at_the_barrier_and_the_stats_outlive_close(tmp_path: Path) -> None:
    path = tmp_path / "out" / "loss.tsv"  # the directory is made at begin
    bus = hookbus.EventBus()
    sink = bus.attach(TSVSink(path, flush_secs=3600))  # no timed flush: only the barrier writes
    pub = ScriptedPublisher(bus, keys=["loss"])
    with bus:
        pub.begin()
        pub.session(0)
        for step in range(1, 6):
            pub.advance({"loss": 1.0 / step})
        assert not path.exists() or path.read_text() == ""  # in the writer's buffer, not on disk yet
        pub.end()  # the bus flushes every sink as a session ends
        assert _rows(path) == [(s, 1.0 / s) for s in range(1, 6)]
    stats = bus.stats()[sink.name].writer
    assert stats is not None
    assert (stats.rows, stats.written, stats.queued, stats.capacity, stats.stalled) == (5, 5, 0, 1024, None)
    sink.close()  # idempotent
    assert sorted(p.name for p in path.parent.iterdir()) == [".loss.tsv.lock", "loss.tsv"]


def test_the_lock_refuses_a_second_writer_and_a_closed_run_lets_the_next_write(tmp_path: Path) -> None:
    path = tmp_path / "loss.tsv"
    bus = hookbus.EventBus()
    bus.attach(TSVSink(path))
    bus.attach(TSVSink(path, name="again"))
    with pytest.raises(hookbus.OutputInUseError, match=r"again: the TSV file .* pid \d+ \(this process"), bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}])
    assert not path.exists() or path.read_text() == ""  # refused before step 1
    bus = hookbus.EventBus()
    bus.attach(TSVSink(path))
    with bus:
        ScriptedPublisher(bus, ["loss"]).run([{"loss": 2.0}] * 2)
    assert _rows(path) == [(1, 2.0), (2, 2.0)]


class _StalledFile:
    """A file whose writes wait, from ``on``, until the test lets the disk go (a hung mount)."""

    def __init__(self, file: IO[str], on: threading.Event, release: threading.Event) -> None:
        self._file, self._on, self._release = file, on, release

    def write(self, text: str) -> int:
        if self._on.is_set():
            self._release.wait()
        return self._file.write(text)

    def flush(self) -> None:
        self._file.flush()

    def close(self) -> None:
        self._file.close()


@pytest.mark.timeout(60)
def test_a_stalled_write_disables_the_sink_at_its_deadline_and_the_run_ends(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    path = tmp_path / "loss.tsv"
    on, release = threading.Event(), threading.Event()
    opener: Callable[[Path], Any] = lambda p: _StalledFile(p.open("a", encoding="utf-8"), on, release)  # noqa: E731
    bus = hookbus.EventBus()
    sink = bus.attach(TSVSink(path, opener=opener, flush_deadline=0.2, close_deadline=0.2))
    bus.on("after_run", lambda event: on.set() if event.step == 3 else None)  # the disk stops after step 2
    try:
        with caplog.at_level(logging.ERROR, logger="hookbus"), bus:
            assert ScriptedPublisher(bus, ["loss"]).run([{"loss": 1.0}] * 6) == 6  # training went on
        health = bus.stats()[sink.name]
        assert health.disabled
        assert health.writer is not None
        assert health.writer.stalled is not None
        report = health.writer.stalled
        assert report.startswith(f"TSVSink: a flush of {str(path)!r} did not return within the 0.2 s flush deadline")
        assert "rows given to it since its last completed flush may not be written" in report
        assert any("'TSVSink' could not flush at the end of a session" in r.getMessage() for r in caplog.records)
    finally:
        release.set()  # no writer thread outlives the test blocked


def test_bad_options_fail_when_the_sink_is_made(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"^flush_deadline must be a positive finite number of seconds \(got 0\)$"):
        TSVSink(tmp_path / "a.tsv", flush_deadline=0)
    with pytest.raises(ValueError, match=r"^path must be a file, not a directory"):
        TSVSink(tmp_path)


def test_a_put_without_the_background_writer_says_start_was_not_called() -> None:
    # Issue 30: WriterKit.put tests for its background writer inline (once per row); a kit not
    # started, or one that adopted a writer with a thread of its own, still refuses by name.
    kit: WriterKit[str] = WriterKit("TSVSink")
    expected = r"TSVSink: no background writer is started \(start\(\) at begin\)"
    with pytest.raises(RuntimeError, match=expected):
        kit.put("1\t0.5")
    kit.adopt(lambda: None, lambda: None, target="the TSV file")
    try:
        with pytest.raises(RuntimeError, match=expected):
            kit.put("1\t0.5")
    finally:
        kit.close()
