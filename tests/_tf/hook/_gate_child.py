"""One task of a local parameter-server cluster, for tests/_tf/hook/test_gate_cluster.py (the start gate).

Usage: ``python tests/_tf/hook/_gate_child.py '<json>'`` with ``cluster``, ``type`` (``ps`` or ``worker``),
``index``, ``scenario`` and ``out``. A parameter server serves until it is killed; a worker
prints one ``REPORT {...}`` line. Worker 0 is the chief. It trains to step 5, waits there until
every other worker is at its gate (a file each, written by its ``waiting_for_step`` subscriber or,
for TensorFlow's hook, at session creation), then:

- ``start``: trains on, holds again at its 50th step until workers 1 and 2 trained (so a loaded
  machine cannot end the run within one of their polls), then to step 80 (``StopAtStepSink``),
  which stops the cluster. Worker 1 waits
  with ``wait_for_step=40``; worker 2 with TensorFlow's own ``GlobalStepWaiterHook(40)``; worker 3
  for a step that never comes (the cluster's stop ends its wait).
- ``timeout``: kills itself (SIGKILL: the chief is gone). Workers 1 and 2 wait for a step that
  never comes with a 2 s timeout, ``on_timeout="raise"`` and ``"start"``; worker 3 without a
  timeout, until the test sends it SIGTERM (once worker 2 trains and worker 1 timed out), which
  stops worker 2 too.
"""

from __future__ import annotations

import faulthandler
import json
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

# Run as a script, this file's folder comes first on sys.path: tests/ in its place, for the helpers
# the children share.
sys.path[0] = str(Path(__file__).resolve().parents[2])

from _ps_task import ps_task, training_session, wait_for_chief  # noqa: E402 - after the path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

NEVER = 10**9
GATES: dict[str, dict[int, dict[str, Any]]] = {
    "start": {1: {"wait_for_step": 40}, 3: {"wait_for_step": NEVER}},
    "timeout": {
        1: {"wait_for_step": NEVER, "wait_timeout_secs": 2.0, "on_timeout": "raise"},
        2: {"wait_for_step": NEVER, "wait_timeout_secs": 2.0, "on_timeout": "start"},
        3: {"wait_for_step": NEVER},
    },
}


def hold(files: list[Path], limit: float = 60.0) -> None:
    """Wait until every file exists (at most ``limit`` seconds): the chief waits for the others."""
    until = time.monotonic() + limit
    while not all(p.exists() for p in files) and time.monotonic() < until:
        time.sleep(0.01)


def main(config: dict[str, Any]) -> None:
    faulthandler.dump_traceback_later(float(config.get("dump_after", 120)), exit=False)
    scenario, out = config["scenario"], Path(config["out"])
    task = ps_task(config)
    tf, index, loss, train_op = task.tf, task.index, task.loss, task.train_op

    from rich.console import Console

    import hookbus
    from hookbus.sinks import ConsoleSink, EventLogSink, StopAtStepSink

    bus = hookbus.EventBus()
    if index == 0:
        bus.attach(StopAtStepSink(last_step=80 if scenario == "start" else NEVER)).runs_on = "chief"
    if scenario == "timeout" and index == 2:  # it trains after its timeout: a cap, should the SIGTERM not stop it
        bus.attach(StopAtStepSink(last_step=5000))
    console_file = (out / f"w{index}-console.txt").open("w")
    bus.attach(ConsoleSink(Console(file=console_file, width=200), live=False, plain_every_n_secs=0)).runs_on = "all"
    bus.attach(EventLogSink(out / "events.jsonl", runs_on="each"))
    seen: dict[str, Any] = {"gate": [], "first_step": None}

    @bus.on("waiting_for_step")
    def gate(event: Any) -> None:
        seen["gate"].append([event.state, event.until_step, event.step, event.starts])
        (out / f"w{index}-at-gate").touch()
        if event.state == "timed_out":
            (out / f"w{index}-timed-out").touch()

    @bus.on("after_run")
    def record(event: Any) -> None:
        if seen["first_step"] is None:
            seen["first_step"] = event.step  # the global step after this worker's first run
            (out / f"w{index}-trained").touch()

    @bus.on("stop_requested")
    def stopped(request: Any) -> None:
        seen.setdefault("stop_source", request.source)

    hooks: list[Any] = [hookbus.EventBusHook(bus, {"loss": loss}, train_op=train_op, **GATES[scenario].get(index, {}))]
    if scenario == "start" and index == 2:
        hooks.insert(0, tf.compat.v1.train.GlobalStepWaiterHook(40))  # TensorFlow's, beside ours without a gate

        @bus.on("session_created")
        def joined(event: Any) -> None:
            (out / "w2-at-gate").touch()  # TensorFlow's hook waits in the first before_run, next

    wait_for_chief(out, index)
    local, error = 0, None
    handed_on: list[int] = []  # a SIGTERM `with bus:` hands on to this program's handler once the run ended
    signal.signal(signal.SIGTERM, lambda signum, frame: handed_on.append(signum))
    try:
        with (
            bus,
            training_session(task, hooks) as sess,
        ):
            if index == 0:
                (out / "chief-ready").touch()
            while not sess.should_stop():
                sess.run(train_op)
                local += 1
                if index == 0 and local == 5:
                    hold([out / f"w{i}-at-gate" for i in (1, 2, 3)])
                    if scenario == "timeout":
                        os.kill(os.getpid(), signal.SIGKILL)
                if index == 0 and local == 50:  # past 40: let the gated workers train before the run ends
                    hold([out / f"w{i}-trained" for i in (1, 2)])
                time.sleep(0.005)
    except Exception as caught:
        error = f"{type(caught).__name__}: {caught}"
    console_file.close()
    report = {
        "index": index,
        "local": local,
        "stop_reason": bus.stop_reason,
        "error": error,
        "end_step": bus.step,
        "handed_on": handed_on,
        **seen,
    }
    print("REPORT " + json.dumps(report), flush=True)


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
