"""Training-thread cost of hookbus's publish path, and of its writers, against the bare alternatives.

Three parts, each run in interleaved rounds (min and median reported):

1. Dispatch: microseconds per due step on the training thread, through the real publish path
   (``PublisherCore.plan`` + ``publish_step``: planning, conversion of numpy scalars, the event,
   ordered isolated delivery) to 1, 6 and 20 no-op function subscribers, all due every step.
   Reference: blinker's bare ``Signal.send`` to the same number of no-op receivers. Also the
   cost of a step where none of them is due (``plan`` returning ``None``).
2. Writers: rows per second for a row of four scalars, as seen by the training thread (the cost
   to the publishing thread) and end to end (until everything is flushed to the OS), with CPU time
   per row beside them: the training thread's own, and the process's until flushed (the writer
   threads included: on two cores their work takes the GIL from the training thread):
   ``TensorBoardSink`` against ``tf.summary`` (TF2 ``create_file_writer`` + ``scalar`` in eager,
   written on the training thread), and ``CSVSink`` against a plain ``csv.writer`` on the
   training thread. The sinks are fed through the same publish path. ``EventLogSink`` (every
   event as a JSON line on its background writer) is passive: it records what is published for
   others, so its row has a no-op function due every step beside it (the dispatch table's
   one-subscriber cost is that function's share). ``MLflowSink`` ships each row (five metrics: the
   four and its ``steps/sec``) to a SQLite store with ``log_batch`` from its background writer;
   every round gets a copy of one store whose tables MLflow made once (MLflow's migrations take
   seconds and are no per-row cost). Without MLflow installed its row is left out.
3. Learning-rate sinks (``bench/_rate_sinks.py``): microseconds per due step on the training thread of
   ``ReduceLROnPlateauSink`` deciding on a training key every step (a plateau: no reduction) and
   ``LearningRateSchedulerSink(per="step")`` calling a constant schedule every step, through the
   same publish path with a rate offered, against one no-op function due every step.

    python bench/dispatch.py [--rounds 10] [--steps 20000] [--rows 2000] [--quick] [--json out.json]
"""

from __future__ import annotations

import argparse
import csv
import datetime
import json
import os
import platform
import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import blinker  # noqa: E402
import numpy as np  # noqa: E402
from _rate_sinks import measure_rate_sinks  # noqa: E402

import hookbus  # noqa: E402
from hookbus._publishing._publisher import PublisherCore  # noqa: E402
from hookbus.sinks import CSVSink, EventLogSink, TensorBoardSink  # noqa: E402

KEYS = ("loss", "accuracy", "learning_rate", "grad_norm")
SUBSCRIBERS = (1, 6, 20)


def _raw(step: int) -> dict[str, Any]:
    """What a session returns for four scalar fetches: numpy scalars."""
    return {
        "loss": np.float32(1.0 / step),
        "accuracy": np.float32(0.5),
        "learning_rate": np.float32(1e-3),
        "grad_norm": np.float32(2.0),
    }


def _noop(event: Any) -> None:
    return None


def _receivers(n: int) -> list[Callable[..., None]]:
    # Distinct functions: blinker keeps one connection per receiver.
    def make() -> Callable[..., None]:
        def receiver(sender: Any, **kwargs: Any) -> None:
            return None

        return receiver

    return [make() for _ in range(n)]


class Published:
    """A bus with one publisher (the core every publisher wraps), inside ``with bus:``."""

    def __init__(self, bus: hookbus.EventBus) -> None:
        self.bus = bus
        self.core = PublisherCore(bus, KEYS)
        bus.__enter__()
        self.core.begin()
        self.core.session_created(0)
        self.step = 0

    def steps(self, count: int, raw: Callable[[int], dict[str, Any]] | dict[str, Any]) -> None:
        plan, publish, advance = self.core.plan, self.core.publish_step, self.core.advance
        fixed = raw if isinstance(raw, dict) else None
        step = self.step
        for _ in range(count):
            step += 1
            due = plan(step)
            if due is not None:
                publish(due, step, fixed if fixed is not None else raw(step))  # type: ignore[operator]
            else:
                advance(step)
        self.step = step

    def close(self) -> None:
        self.core.end(self.step)
        self.bus.__exit__(None, None, None)


def dispatch_case(n: int, due: bool) -> Published:
    bus = hookbus.EventBus()
    for _ in range(n):
        bus.on("after_run", _noop, every_n_steps=1 if due else 10**9)
    return Published(bus)


def measure_dispatch(rounds: int, steps: int) -> list[dict[str, Any]]:
    raw = _raw(1)
    rows = []
    for n in SUBSCRIBERS:
        due, quiet = dispatch_case(n, True), dispatch_case(n, False)
        signal = blinker.Signal()
        for receiver in _receivers(n):
            signal.connect(receiver, weak=False)
        payload = {"step": 1, "values": raw}
        sender = object()

        def blinker_send(
            count: int, signal: blinker.Signal = signal, payload: dict[str, Any] = payload, sender: object = sender
        ) -> None:
            send = signal.send
            for _ in range(count):
                send(sender, event=payload)

        cases: dict[str, Callable[[int], None]] = {
            "hookbus": lambda count, due=due: due.steps(count, raw),
            "blinker": blinker_send,
            "quiet": lambda count, quiet=quiet: quiet.steps(count, raw),
        }
        times: dict[str, list[float]] = {name: [] for name in cases}
        for fn in cases.values():
            fn(max(steps // 10, 10))  # warm-up
        names = list(cases)
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                start = time.perf_counter()
                cases[name](steps)
                times[name].append((time.perf_counter() - start) / steps * 1e6)
        due.close()
        quiet.close()
        rows.append(
            {
                "subscribers": n,
                "hookbus_min_us": min(times["hookbus"]),
                "hookbus_median_us": statistics.median(times["hookbus"]),
                "blinker_min_us": min(times["blinker"]),
                "blinker_median_us": statistics.median(times["blinker"]),
                "quiet_min_us": min(times["quiet"]),
                "quiet_median_us": statistics.median(times["quiet"]),
            }
        )
    return rows


# -- writers ---------------------------------------------------------------------------------
#: One writer's round: seconds until the rows are handed over (training thread, wall), until they
#: are flushed (wall), the training thread's CPU seconds for the first, the process's for the second.
Timing = tuple[float, float, float, float]


class _Clocks:
    """The four readings of a :data:`Timing`: start, handed over, flushed."""

    def start(self) -> None:
        self.wall, self.thread, self.process = time.perf_counter(), time.thread_time(), time.process_time()

    def handed_over(self) -> None:
        self.wall_given, self.thread_given = time.perf_counter(), time.thread_time()

    def flushed(self) -> Timing:
        wall, process = time.perf_counter(), time.process_time()
        return self.wall_given - self.wall, wall - self.wall, self.thread_given - self.thread, process - self.process


def hookbus_writer(sink_factory: Callable[[str], hookbus.sink_api.Sink]) -> Callable[[int, str], Timing]:
    def run(rows: int, directory: str) -> Timing:
        bus = hookbus.EventBus()
        sink = bus.attach(sink_factory(directory))
        if sink.passive:  # it records what is published for others: someone must be due
            bus.on("after_run", _noop)
        published = Published(bus)
        clocks = _Clocks()
        clocks.start()
        published.steps(rows, _raw)
        clocks.handed_over()
        sink.flush()
        timing = clocks.flushed()
        published.close()
        return timing

    return run


def tf_summary_writer(rows: int, directory: str) -> Timing:
    import tensorflow as tf

    writer = tf.summary.create_file_writer(directory)
    clocks = _Clocks()
    try:
        with writer.as_default():
            clocks.start()
            for step in range(1, rows + 1):
                for key, value in _raw(step).items():
                    tf.summary.scalar(key, float(value), step=step)
            clocks.handed_over()
            writer.flush()
            timing = clocks.flushed()
    finally:
        writer.close()
    return timing


def csv_writer(rows: int, directory: str) -> Timing:
    clocks = _Clocks()
    with open(os.path.join(directory, "plain.csv"), "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "wall_time", *KEYS])
        clocks.start()
        for step in range(1, rows + 1):
            values = _raw(step)
            writer.writerow([step, time.time(), *(float(values[k]) for k in KEYS)])
        clocks.handed_over()
        handle.flush()
        return clocks.flushed()


def mlflow_sink(directory: str) -> hookbus.sink_api.Sink:
    """``MLflowSink`` on its default store in ``directory``: a copy of one made once per process."""
    from hookbus.sinks import MLflowSink

    schema = _MLFLOW_SCHEMA.get("path")
    if schema is None:
        from mlflow.tracking import MlflowClient

        schema = os.path.join(tempfile.mkdtemp(prefix="bench-mlflow-"), "mlflow.db")
        MlflowClient(f"sqlite:///{schema}").search_experiments()  # MLflow makes its tables
        _MLFLOW_SCHEMA["path"] = schema
    shutil.copyfile(schema, os.path.join(directory, "mlflow.db"))
    sink: hookbus.sink_api.Sink = MLflowSink(directory=directory, every_n_steps=1)
    return sink


_MLFLOW_SCHEMA: dict[str, str] = {}


def _has_mlflow() -> bool:
    import importlib.util

    return importlib.util.find_spec("mlflow") is not None


WRITERS: dict[str, Callable[[int, str], Timing]] = {
    "TensorBoardSink": hookbus_writer(lambda d: TensorBoardSink(os.path.join(d, "tb"), every_n_steps=1)),
    "tf.summary (eager)": tf_summary_writer,
    "CSVSink": hookbus_writer(lambda d: CSVSink(os.path.join(d, "metrics.csv"), every_n_steps=1)),
    "csv.writer": csv_writer,
    "EventLogSink": hookbus_writer(lambda d: EventLogSink(os.path.join(d, "events.jsonl"))),
}
if _has_mlflow():
    WRITERS["MLflowSink"] = hookbus_writer(mlflow_sink)


def measure_writers(rounds: int, rows: int) -> list[dict[str, Any]]:
    names = list(WRITERS)
    times: dict[str, list[Timing]] = {name: [] for name in names}
    with tempfile.TemporaryDirectory(prefix="bench-writers-") as root:
        for name in names:  # warm-up: imports, first file, TensorFlow's first eager ops
            WRITERS[name](min(rows, 200), tempfile.mkdtemp(dir=root))
        for r in range(rounds):
            shift = r % len(names)
            for name in names[shift:] + names[:shift]:
                times[name].append(WRITERS[name](rows, tempfile.mkdtemp(dir=root)))
    result = []
    for name in names:
        thread = [rows / t[0] for t in times[name]]
        total = [rows / t[1] for t in times[name]]
        result.append(
            {
                "writer": name,
                "train_thread_rows_per_s_max": max(thread),
                "train_thread_rows_per_s_median": statistics.median(thread),
                "end_to_end_rows_per_s_max": max(total),
                "end_to_end_rows_per_s_median": statistics.median(total),
                "train_thread_us_per_row_median": 1e6 / statistics.median(thread),
                "train_thread_cpu_us_per_row_median": statistics.median(t[2] for t in times[name]) / rows * 1e6,
                "process_cpu_us_per_row_median": statistics.median(t[3] for t in times[name]) / rows * 1e6,
            }
        )
    return result


def print_tables(result: dict[str, Any]) -> None:
    print(
        f"hookbus {hookbus.__version__}, blinker {result['blinker']}, TF {result['tensorflow']}, "
        f"Python {result['python']}, {result['machine']}"
    )
    print(f"\nDispatch: training-thread µs per step ({result['rounds']} rounds x {result['steps']} steps)")
    header = (
        f"{'subscribers':>11} {'hookbus due min':>15} {'median':>7} {'blinker send min':>16} {'median':>7} "
        f"{'quiet step min':>14} {'median':>7}"
    )
    print(header)
    print("-" * len(header))
    for row in result["dispatch"]:
        print(
            f"{row['subscribers']:>11} {row['hookbus_min_us']:>15.2f} {row['hookbus_median_us']:>7.2f} "
            f"{row['blinker_min_us']:>16.2f} {row['blinker_median_us']:>7.2f} "
            f"{row['quiet_min_us']:>14.2f} {row['quiet_median_us']:>7.2f}"
        )
    print(
        f"\nLearning-rate sinks: training-thread µs per due step, every step ({result['rounds']} rounds x "
        f"{result['steps']} steps)"
    )
    header = f"{'subscriber':<26} {'due step min':>12} {'median':>7}"
    print(header)
    print("-" * len(header))
    for row in result["steering"]:
        print(f"{row['subscriber']:<26} {row['due_min_us']:>12.2f} {row['due_median_us']:>7.2f}")
    print(
        f"\nWriters: rows of {len(KEYS)} scalars per second ({result['rounds']} rounds x {result['rows']} rows; "
        "best and median)"
    )
    header = (
        f"{'writer':<20} {'training thread best':>20} {'median':>9} {'µs/row':>7} "
        f"{'end to end best':>15} {'median':>9} {'CPU µs/row: thread':>18} {'process':>8}"
    )
    print(header)
    print("-" * len(header))
    for row in result["writers"]:
        print(
            f"{row['writer']:<20} {row['train_thread_rows_per_s_max']:>20,.0f} "
            f"{row['train_thread_rows_per_s_median']:>9,.0f} {row['train_thread_us_per_row_median']:>7.1f} "
            f"{row['end_to_end_rows_per_s_max']:>15,.0f} {row['end_to_end_rows_per_s_median']:>9,.0f} "
            f"{row['train_thread_cpu_us_per_row_median']:>18.1f} {row['process_cpu_us_per_row_median']:>8.1f}"
        )


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20000, help="steps per dispatch case per round")
    parser.add_argument("--rows", type=int, default=2000, help="rows per writer per round")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 rounds of few steps and rows")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.rounds, args.steps, args.rows = 2, 300, 50
    import tensorflow as tf

    result: dict[str, Any] = {
        "benchmark": "dispatch",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "blinker": _blinker_version(),
        "rounds": args.rounds,
        "steps": args.steps,
        "rows": args.rows,
        "dispatch": measure_dispatch(args.rounds, args.steps),
        "steering": measure_rate_sinks(args.rounds, args.steps, _raw(1)),
        "writers": measure_writers(args.rounds, args.rows),
    }
    print_tables(result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


def _blinker_version() -> str:
    from importlib.metadata import version

    return version("blinker")


if __name__ == "__main__":
    main()
