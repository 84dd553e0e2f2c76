"""A training that ends one way, for the one-word test: ``python _ending_child.py DIR HOW``.

The demo model under ``MonitoredTrainingSession`` inside ``with bus:``, with a plain
ConsoleSink on stdout, an EventLogSink (``DIR/events.jsonl``) and an MLflowSink (its default
SQLite store under ``DIR/mlflow``), ended by ``HOW`` at step 30:

- ``last_step``: StopAtStepSink's last step;
- ``early``: a function subscriber asks to stop (a decision the run was asked to make);
- ``sigterm``: the process sends itself SIGTERM (preemption);
- ``thread``: another thread calls ``bus.request_stop``;
- ``crash``: the training code raises ``ValueError``.
"""

from __future__ import annotations

import os
import signal
import sys
import threading

STEP = 30


def main() -> None:
    directory, how = sys.argv[1], sys.argv[2]

    import tensorflow as tf
    from rich.console import Console

    import hookbus
    from hookbus._cli._demo import build_linear_regression
    from hookbus.sinks import ConsoleSink, EventLogSink, MLflowSink, StopAtStepSink

    with tf.Graph().as_default():
        model = build_linear_regression()
        bus = hookbus.EventBus()
        bus.attach(ConsoleSink(Console(file=sys.stdout, width=200), live=False, run_name="ending"))
        bus.attach(EventLogSink(os.path.join(directory, "events.jsonl")))
        bus.attach(MLflowSink(experiment="ending", directory=os.path.join(directory, "mlflow"), every_n_steps=5))
        bus.attach(StopAtStepSink(last_step=STEP if how == "last_step" else 10**6))

        def at_step(event: hookbus.Event) -> None:
            if event.step != STEP:
                return
            if how == "early":
                event.request_stop("the metric stopped improving")
            elif how == "sigterm":
                os.kill(os.getpid(), signal.SIGTERM)
            elif how == "thread":
                asker = threading.Thread(target=bus.request_stop, args=("a watchdog asked",), name="watchdog")
                asker.start()
                asker.join()

        bus.on("after_run", at_step, every_n_steps=1)
        hook = hookbus.EventBusHook(bus, {"loss": model.loss}, train_op=model.train_op)
        with bus, hookbus.monitored_training_session(hooks=[hook]) as session:
            while not session.should_stop():
                session.run(model.train_op)
                if how == "crash" and bus.step == STEP:
                    raise ValueError(f"training code failed at step {bus.step}")


if __name__ == "__main__":
    main()
