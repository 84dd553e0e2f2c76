"""A notifier that POSTs each epoch's loss to a webhook, on a thread of its own, during a Keras fit.

A function that waits on the network holds every training step it is called on for as long as
the server takes to answer. ``bus.on(..., background=True)`` calls it on a thread of its own: the
training thread only puts the event in a bounded queue (it blocks when full; nothing is dropped),
the function receives every event in order, and at the end of the run the queue gets
``close_deadline`` seconds. What the function never received by then is counted in
``bus.stats()`` and in the dashboard's summary, never waited for longer.

Without ``--url`` the script starts a stand-in webhook on 127.0.0.1 that takes ``--delay``
seconds to answer each POST, so it runs anywhere. From the repository root::

    .venv/bin/python examples/webhook_notifier.py [--epochs 6] [--delay 2] [--url https://hooks.example/...]
"""

from __future__ import annotations

import argparse
import http.server
import json
import os
import threading
import time
import urllib.request
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import keras
import numpy as np

import hookbus
from hookbus.sinks import ConsoleSink


def slow_webhook(delay: float) -> tuple[http.server.ThreadingHTTPServer, list[dict[str, Any]]]:
    """A stand-in for a chat or alerting webhook that takes ``delay`` seconds to answer."""
    received: list[dict[str, Any]] = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            received.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
            time.sleep(delay)
            self.send_response(204)
            self.end_headers()

        def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, name="webhook", daemon=True).start()
    return server, received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--url", help="the webhook to POST to (default: a local stand-in)")
    parser.add_argument("--delay", type=float, default=2.0, help="the stand-in's seconds per answer")
    parser.add_argument("--close-deadline", type=float, default=30.0, help="seconds the end waits for it")
    args = parser.parse_args()
    server, received = (None, []) if args.url else slow_webhook(args.delay)
    url = args.url or f"http://127.0.0.1:{server.server_port}/hook"  # type: ignore[union-attr]

    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(run_name="webhook notifier"))

    @bus.on("after_run", keys="epoch/loss", background=True, close_deadline=args.close_deadline, name="notify")
    def notify(event: hookbus.Event) -> None:
        epoch = int(event.values["epoch"]) + 1  # the event's index is Keras's, 0-based; people count from 1
        body = {"text": f"epoch {epoch}: loss {event.values['epoch/loss']:.4f}", "step": event.step}
        request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:  # waits for the server, off the training thread
            response.read()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(256, 4)).astype("float32")
    y = x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32")
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1, name="dense")])
    model.compile(keras.optimizers.SGD(0.05, name="sgd"), "mse")
    with bus:
        model.fit(x, y, epochs=args.epochs, batch_size=32, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])
    stats = bus.stats()["notify"]
    writer = stats.writer
    assert writer is not None  # a subscriber on its own thread reports its queue
    print(
        f"notify: {writer.written} of {writer.rows} events delivered, {writer.lost} lost, {stats.errors} errors; "
        f"{1e3 * stats.max_seconds:.2f} ms at most on the training thread"
    )
    if server is not None:
        print(f"the webhook received epochs {[body['text'].split(':')[0] for body in received]}")
        server.shutdown()
        server.server_close()


if __name__ == "__main__":
    main()
