"""A notifier that POSTs to a webhook during a real Keras ``fit``, on a thread of its own
(``bus.on(..., background=True)``), against a real HTTP server on 127.0.0.1 that holds requests.

Issue 47, item 4: such a subscriber on the training thread took a 6-epoch fit from 1.2 s to 31 s.
Counted, not timed: with the option the fit ends while the server still holds the first request;
what the server receives is compared with what a plain Keras callback POSTing the same values
sends on the same seeded fit.
"""

from __future__ import annotations

import http.server
import io
import json
import threading
import urllib.request
from collections.abc import Callable, Iterator
from typing import Any

import pytest

tf = pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")

from rich.console import Console  # noqa: E402 - after the skip: the module needs TensorFlow

import hookbus  # noqa: E402
from hookbus.sinks import ConsoleSink  # noqa: E402

_WAIT = 60.0  # a bound on waits for other threads: a broken build fails instead of hanging
EPOCHS, BATCH, ROWS = 6, 8, 16  # 12 steps


class HeldServer:
    """A webhook on 127.0.0.1 that holds every request until :attr:`release` is set.

    Attributes:
        arrived: The JSON bodies received, in order (as the request arrived).
        answered: Those answered (after the release), each recorded as its answer is sent.
        first: Set when the first request arrives.
    """

    def __init__(self) -> None:
        self.arrived: list[dict[str, Any]] = []
        self.answered: list[dict[str, Any]] = []
        self.first = threading.Event()
        self.release = threading.Event()
        server = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                server.arrived.append(body)
                server.first.set()
                server.release.wait(_WAIT)
                server.answered.append(body)  # before the answer: the client goes on once it has it
                self.send_response(204)
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                pass

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.httpd.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.httpd.server_port}/hook"
        self._thread = threading.Thread(target=self.httpd.serve_forever, name="webhook", daemon=True)
        self._thread.start()

    def close(self) -> None:
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self._thread.join(_WAIT)


@pytest.fixture
def server() -> Iterator[HeldServer]:
    held = HeldServer()
    yield held
    held.close()


def post(url: str, body: dict[str, Any]) -> None:
    """What a notifier does: one JSON POST, waiting for the answer."""
    request = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=_WAIT) as response:
        response.read()


def _fit(callbacks: list[Any]) -> Any:
    keras.utils.set_random_seed(0)
    rng = __import__("numpy").random.default_rng(0)
    x = rng.normal(size=(ROWS, 1)).astype("float32")
    model = keras.Sequential([keras.Input((1,)), keras.layers.Dense(1, name="dense")])
    model.compile(keras.optimizers.SGD(0.1, name="sgd"), "mse")
    return model.fit(x, 2 * x, epochs=EPOCHS, batch_size=BATCH, shuffle=False, verbose=0, callbacks=callbacks)


def _notifier(url: str) -> Callable[[hookbus.Event], None]:
    def notify(event: hookbus.Event) -> None:
        post(url, {"step": event.step, "loss": event.values["loss"]})

    return notify


def test_the_fit_ends_while_the_server_holds_the_first_request(server: HeldServer) -> None:
    screen = io.StringIO()
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(Console(file=screen, width=300), live=False))
    bus.on("after_run", _notifier(server.url), name="webhook", background=True)
    published: list[int] = []
    bus.on("after_run", lambda event: published.append(event.step), name="record")
    batches: list[int] = []
    counter = keras.callbacks.LambdaCallback(on_train_batch_end=lambda batch, logs: batches.append(batch))
    with bus:
        _fit([hookbus.EventBusCallback(bus), counter])
        # Every batch trained, and the server has not answered the first POST yet.
        assert server.first.wait(_WAIT)
        assert len(batches) == EPOCHS * ROWS // BATCH
        assert [body["step"] for body in server.arrived] == [1]
        assert server.answered == []
        waiting = bus.stats()["webhook"].writer
        assert waiting is not None
        assert (waiting.rows, waiting.written, waiting.lost) == (12, 0, 0)
        server.release.set()  # the server answers: the run's close delivers the rest, in order
    assert published == list(range(1, 13))
    assert [body["step"] for body in server.answered] == published
    stats = bus.stats()["webhook"]
    assert stats.writer is not None
    assert (stats.writer.written, stats.writer.lost, stats.errors, stats.failed) == (12, 0, 0, False)
    (summary,) = [line for line in screen.getvalue().splitlines() if line.startswith("  sinks: ")]
    assert summary.startswith("  sinks: 3 ok |")


def test_what_the_webhook_receives_is_what_a_keras_callback_posting_the_loss_sends(server: HeldServer) -> None:
    server.release.set()  # a server that answers at once: only what it receives is compared
    steps = iter(range(1, 10_000))

    class KerasNotifier(keras.callbacks.Callback):  # type: ignore[misc,name-defined]  # the Keras way
        def on_train_batch_end(self, batch: int, logs: dict[str, Any] | None = None) -> None:
            post(server.url, {"step": next(steps), "loss": (logs or {})["loss"]})

    _fit([KerasNotifier()])
    by_keras, server.answered = server.answered, []
    bus = hookbus.EventBus()
    bus.on("after_run", _notifier(server.url), name="webhook", background=True)
    with bus:
        _fit([hookbus.EventBusCallback(bus)])
    assert len(by_keras) == 12
    assert [b["step"] for b in server.answered] == [b["step"] for b in by_keras]
    assert [b["loss"] for b in server.answered] == pytest.approx([b["loss"] for b in by_keras], rel=1e-6)


def test_a_server_that_never_answers_costs_the_close_deadline_counted(
    server: HeldServer, recwarn: pytest.WarningsRecorder
) -> None:
    screen = io.StringIO()
    bus = hookbus.EventBus()
    bus.attach(ConsoleSink(Console(file=screen, width=300), live=False))
    bus.on("after_run", _notifier(server.url), name="webhook", background=True, close_deadline=0.5)
    with bus:
        _fit([hookbus.EventBusCallback(bus)])
        assert server.first.wait(_WAIT)
    (warned,) = [str(w.message) for w in recwarn if issubclass(w.category, hookbus.sink_api.WriterWarning)]
    assert warned.startswith("webhook: 12 events not delivered within the 0.5 s close deadline")
    stats = bus.stats()["webhook"]
    assert stats.writer is not None
    assert (stats.writer.rows, stats.writer.written, stats.writer.lost) == (12, 0, 12)
    (summary,) = [line for line in screen.getvalue().splitlines() if line.startswith("  sinks: ")]
    assert summary.startswith("  sinks: 1 ok, 1 failing |")
    assert "12 events not delivered" in summary
    assert [body["step"] for body in server.arrived] == [1]  # nothing more is sent after the close
