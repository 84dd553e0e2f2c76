"""Soak: many published steps through every sink with the scripted publisher; memory stays flat
and every row and scalar is there at the end.

CI runs 20,000 steps; ``HOOKBUS_RELIABILITY_LONG=1`` runs 1,000,000. The figures (steps/s, RSS
growth, peak RSS, traced Python memory growth) are printed (``pytest -s``).
"""

from __future__ import annotations

import csv
import gc
import io
import resource
import time
import tracemalloc
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import hookbus
from hookbus.sinks import (
    CheckpointSink,
    ConsoleSink,
    CSVSink,
    EarlyStoppingSink,
    NanGuardSink,
    StopAtStepSink,
    TensorBoardSink,
)
from hookbus.testing import ScriptedPublisher

from ._helpers import LONG, latest_checkpoint_step

pytestmark = pytest.mark.reliability

STEPS = 1_000_000 if LONG else 20_000
TB_EVERY = 10
ES_EVERY = 100
SAMPLES = 10  # memory samples over the run
TRACE = not LONG  # tracemalloc triples the time per step: Python allocations are traced in the short run


class TinyBackend:
    """A checkpoint backend that writes a few bytes per checkpoint (no TensorFlow model)."""

    ready = True

    def __init__(self) -> None:
        self.saves = 0

    def save(self, path: str) -> str:
        Path(path + ".index").write_bytes(b"tiny")
        self.saves += 1
        return path

    def restore(self, path: str) -> None:
        pass


def values(step: int) -> dict[str, float]:
    return {"loss": 1.0 + 1.0 / step, "accuracy": (step % 1000) / 1000}


def _rss() -> int:
    """Resident set size now, in bytes."""
    with open("/proc/self/statm") as statm:
        return int(statm.read().split()[1]) * resource.getpagesize()


@pytest.mark.tf  # CheckpointSink records its saves in TensorFlow's checkpoint state file
@pytest.mark.timeout(3600 if LONG else 300)
def test_soak_every_sink_keeps_memory_flat_and_loses_nothing(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    out = io.StringIO()
    console = bus.attach(ConsoleSink(Console(file=out, width=120), live=False, run_name="soak"))
    csv_sink = bus.attach(CSVSink(tmp_path / "metrics.csv", every_n_steps=1))
    bus.attach(TensorBoardSink(tmp_path / "tb", every_n_steps=TB_EVERY))
    bus.attach(CheckpointSink(tmp_path / "ckpt", every_n_steps=STEPS // 10, every_n_secs=None, keep=3))
    early = bus.attach(EarlyStoppingSink("loss", patience=10**9, every_n_steps=ES_EVERY))
    bus.attach(NanGuardSink("loss"))
    bus.attach(StopAtStepSink(last_step=STEPS))
    counted = [0]
    bus.on("after_run", lambda event: counted.__setitem__(0, counted[0] + 1))
    backend = TinyBackend()
    pub = ScriptedPublisher(bus, ["loss", "accuracy"], checkpoints=backend)

    rss: list[int] = []
    traced: list[int] = []
    peak_before = 0
    started = time.perf_counter()
    with bus:
        pub.begin()
        pub.session(0)
        stopped = False
        while not stopped:
            stopped = pub.advance(values)
            if pub.step % (STEPS // SAMPLES) == 0:
                pub.fetched.clear()  # the test double's own record of every fetch, not the library's
                csv_sink.flush()  # let the writers catch up: measure what is kept, not what waits
                # A full collection also empties CPython's free lists: the ~2000 small tuples a batch of
                # rows leaves there are freed memory tracemalloc still counts (up to ~100 KiB).
                gc.collect()
                rss.append(_rss())
                peak_before = peak_before or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
                if pub.step == STEPS // SAMPLES and TRACE:
                    tracemalloc.start()
                traced.append(tracemalloc.get_traced_memory()[0])
        pub.end(values)
    elapsed = time.perf_counter() - started
    tracemalloc.stop()
    peak_after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

    rss_growth = rss[-1] - rss[0]
    traced_growth = traced[-1] - traced[0]
    print(
        f"\nsoak: {STEPS:,} steps in {elapsed:.1f} s ({STEPS / elapsed:,.0f} steps/s); RSS after 10% "
        f"{rss[0] / 2**20:.1f} MiB, at the end {rss[-1] / 2**20:.1f} MiB (growth {rss_growth / 2**20:+.1f} MiB); "
        f"peak RSS after 10% {peak_before / 1024:.1f}, at the end {peak_after / 1024:.1f} MiB; "
        f"traced Python memory growth over the last 90% {traced_growth / 1024:+.1f} KiB"
    )
    # Memory is flat: nothing grows with the number of steps.
    assert rss_growth < 32 * 2**20, rss
    assert traced_growth < 256 * 2**10, traced

    # Every subscriber received every due event; every row and scalar is on disk.
    assert pub.step == STEPS
    assert counted[0] == STEPS
    assert early.state.seen == STEPS // ES_EVERY
    with open(tmp_path / "metrics.csv", newline="") as file:
        reader = csv.reader(file)
        assert next(reader) == ["step", "wall_time", "accuracy", "loss"]
        expected = 1
        for row in reader:
            step = int(row[0])
            assert step == expected
            assert (float(row[2]), float(row[3])) == (values(step)["accuracy"], values(step)["loss"])
            expected += 1
    assert expected == STEPS + 1
    assert _tb_steps(tmp_path / "tb", "loss") == list(range(TB_EVERY, STEPS + 1, TB_EVERY))
    assert latest_checkpoint_step(tmp_path / "ckpt") == STEPS
    assert backend.saves == 10
    assert len(list((tmp_path / "ckpt").glob("*.index"))) == 3
    assert f"soak: stopped at step {STEPS:,}" in out.getvalue() or f"soak: stopped at step {STEPS}" in out.getvalue()
    assert console.snapshot.step == STEPS


def _tb_steps(logdir: Path, tag: str) -> list[int]:
    from tensorboard.backend.event_processing.event_file_loader import EventFileLoader

    steps: list[int] = []
    for path in sorted(logdir.glob("events.out.tfevents.*")):
        event: Any
        for event in EventFileLoader(str(path)).Load():
            if event.HasField("summary") and any(v.tag == tag for v in event.summary.value):
                steps.append(event.step)
    return steps
