"""Soak: many published steps through every sink with the scripted publisher; memory stays flat
and every row and scalar is there at the end.

CI runs 20,000 steps; ``HOOKBUS_RELIABILITY_LONG=1`` runs 1,000,000. Memory is sampled
:data:`SAMPLES` times, every ``STEPS // SAMPLES`` steps, after the writers have caught up and a
full collection: the resident set from ``/proc/self/status`` (``VmRSS``, and ``RssAnon``: the
native heap, writer threads' arenas included, which tracemalloc never sees) and
``/proc/self/statm``, the peak (``getrusage``'s ``ru_maxrss``), and in the short run the Python
memory tracemalloc traces. The first 10 % is warm-up (imports, caches, the first checkpoint, the
arenas the writer threads make). What is asserted:

- both runs: resident memory and its peak grow by less than :data:`RSS_LIMIT` after the warm-up,
  and by less than :func:`half_limit` over the second half (the last sample against the one at
  50 %): 16 MiB in the short run (a native leak of ~1.6 KiB a step fails it), 24 MiB in the long
  one, where a leak of 50 bytes a step reaches it and one of 100 bytes a step (48 MiB over the
  half) fails it twice over, while a cache or an arena that fills up and stays (the plateau)
  passes;
- the short run: traced Python memory grows by less than 256 KiB over the last 90 % (a Python
  leak of ~15 bytes a step fails it). The long run leaves tracemalloc off (it triples the time
  per step).

The figures are printed (``pytest -s``). What a long TF1 run's resident memory does with the real
publisher, sink by sink, is ``bench/soak_rss.py``'s (bench/README.md "Memory over a long run").
"""

from __future__ import annotations

import csv
import gc
import io
import re
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
SAMPLES = 20  # memory samples over the run, every STEPS // SAMPLES steps
WARMUP = SAMPLES // 10  # the samples of the first 10 %: warm-up, before the baseline
RSS_LIMIT = 32 * 2**20  # growth after the warm-up; the soak's RSS at 10 % is ~800 MiB with TensorFlow loaded
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


def half_limit(steps: int) -> int:
    """The bound on growth over the second half of a run of ``steps``: 50 bytes a step, at least
    16 MiB (below that, a short run's samples differ by a few MiB of page-cache and arena noise)."""
    return max(16 * 2**20, steps // 2 * 50)


def memory() -> dict[str, int]:
    """Resident memory now, in bytes: ``VmRSS`` and ``RssAnon`` (``/proc/self/status``), the
    resident pages of ``/proc/self/statm``, the peak (``ru_maxrss``) and the traced Python memory."""
    sample = {"traced": tracemalloc.get_traced_memory()[0]}
    with open("/proc/self/status") as status:
        for line in status:
            name, _, value = line.partition(":")
            if name in ("VmRSS", "RssAnon"):
                sample[name] = int(value.split()[0]) * 1024
    with open("/proc/self/statm") as statm:
        sample["statm"] = int(statm.read().split()[1]) * resource.getpagesize()
    sample["peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    return sample


def growth(samples: list[dict[str, int]], key: str, start: int) -> int:
    """``key``'s growth from sample ``start`` to the last, in bytes."""
    return samples[-1][key] - samples[start][key]


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

    samples: list[dict[str, int]] = []
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
                if pub.step == STEPS // SAMPLES * WARMUP and TRACE:
                    tracemalloc.start()
                samples.append(memory())
        pub.end(values)
    elapsed = time.perf_counter() - started
    tracemalloc.stop()

    half = SAMPLES // 2 - 1  # the sample at 50 %
    mib = 2**20
    traced = growth(samples, "traced", WARMUP - 1)
    figures = {key: (growth(samples, key, WARMUP - 1), growth(samples, key, half)) for key in ("VmRSS", "peak")}
    print(
        f"\nsoak: {STEPS:,} steps in {elapsed:.1f} s ({STEPS / elapsed:,.0f} steps/s); VmRSS at 10 % "
        f"{samples[WARMUP - 1]['VmRSS'] / mib:.1f} MiB, at 50 % {samples[half]['VmRSS'] / mib:.1f}, at the end "
        f"{samples[-1]['VmRSS'] / mib:.1f} (RssAnon {samples[WARMUP - 1]['RssAnon'] / mib:.1f} -> "
        f"{samples[-1]['RssAnon'] / mib:.1f}, statm {samples[-1]['statm'] / mib:.1f}); growth after the warm-up "
        f"{figures['VmRSS'][0] / mib:+.1f} MiB, over the second half {figures['VmRSS'][1] / mib:+.1f} "
        f"(limits {RSS_LIMIT / mib:.0f}, {half_limit(STEPS) / mib:.1f}); peak {samples[-1]['peak'] / mib:.1f} MiB, "
        f"growth {figures['peak'][0] / mib:+.1f} after the warm-up, {figures['peak'][1] / mib:+.1f} over the "
        f"second half; traced Python memory growth over the last 90 % {traced / 1024:+.1f} KiB"
    )
    course = " ".join(f"{s['VmRSS'] / mib:.1f}" for s in samples)
    print(f"soak: VmRSS every {STEPS // SAMPLES:,} steps (MiB): {course}")
    # Memory is flat: nothing grows with the number of steps, natively or in Python.
    for key, (after_warmup, second_half) in figures.items():
        assert after_warmup < RSS_LIMIT, (key, [s[key] for s in samples])
        assert second_half < half_limit(STEPS), (key, [s[key] for s in samples])
    if TRACE:
        assert traced < 256 * 2**10, [s["traced"] for s in samples]

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
    assert _tb_steps(tmp_path / "tb" / "train", "loss") == list(range(TB_EVERY, STEPS + 1, TB_EVERY))
    assert latest_checkpoint_step(tmp_path / "ckpt") == STEPS
    assert backend.saves == 10
    assert len(list((tmp_path / "ckpt").glob("*.index"))) == 3
    # The last step StopAtStepSink asked for is "finished" (issue 36 item 4's one word for how a run
    # ended); the console said "stopped" before it took that word.
    assert re.search(
        rf"soak: (finished|stopped) at step {STEPS:,}|soak: (finished|stopped) at step {STEPS}\b", out.getvalue()
    )
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
