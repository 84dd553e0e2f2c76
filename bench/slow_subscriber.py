"""What a slow subscriber costs a Keras ``fit``: on the training thread, off it, and none at all.

A notifier POSTs to a webhook (a real HTTP server on 127.0.0.1 that takes ``--delay`` seconds to
answer each request) every ``--every`` steps. Configurations, each with its own copy of a small
model (the same architecture and data), each fit inside its own ``with bus:``:

    none        ``hookbus.EventBusCallback`` on a bus with no subscriber.
    inline      the notifier on the training thread (``bus.on("after_run", post, every_n_steps=N)``).
    background  the same notifier on a thread of its own (``background=True``).

All open at once in one process, each round runs one ``fit`` of ``--epochs`` epochs and the
run's close in every configuration in turn, the order rotated each round (``bench/_interleave.py``;
the method is described in ``bench/README.md``); one warm-up fit per configuration first.
Reported against ``none``: ``x_wall`` etc. of the whole round (``fit`` and the close, where a
background notifier's queue drains within its close deadline), and ``fit_x_wall``: the ``fit``
alone, what the training thread waits for. With ``--runs N`` (default 3) each run is its own
process and every figure is the median of the runs with their [min–max].

    python bench/slow_subscriber.py [--runs 3] [--rounds 8] [--epochs 2] [--delay 0.1] [--every 32] [--quick]
                                    [--json out.json]
"""

from __future__ import annotations

import argparse
import datetime
import http.server
import json
import os
import platform
import statistics
import sys
import threading
import time
import urllib.request
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np  # noqa: E402
from _interleave import cell, interleave, runs_of, spread, summarize  # noqa: E402

import hookbus  # noqa: E402

CONFIGS = ("none", "inline", "background")
ROWS, BATCH = 512, 8  # 64 steps an epoch


class Webhook:
    """A webhook on 127.0.0.1 that answers each POST after ``delay`` seconds, counting them."""

    def __init__(self, delay: float) -> None:
        self.received = 0
        webhook = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:
                self.rfile.read(int(self.headers["Content-Length"]))
                time.sleep(delay)
                webhook.received += 1
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base's name
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_port}/hook"
        threading.Thread(target=self.server.serve_forever, name="webhook", daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _post(url: str) -> Any:
    def notify(event: hookbus.Event) -> None:
        body = json.dumps({"step": event.step, "loss": event.values.get("loss")}).encode()
        request = urllib.request.Request(url, body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=60) as response:
            response.read()

    return notify


class Config:
    """One configuration: its model, and a bus per fit with its notifier (or none)."""

    def __init__(self, name: str, url: str, every: int) -> None:
        import keras

        self.name, self.url, self.every = name, url, every
        keras.utils.set_random_seed(0)
        self.model = keras.Sequential(
            [keras.Input((4,)), keras.layers.Dense(16, activation="relu"), keras.layers.Dense(1)]
        )
        self.model.compile(keras.optimizers.SGD(0.01), "mse")
        self.fit_seconds: list[float] = []
        self.delivered = 0
        self.lost = 0

    def run(self, x: np.ndarray[Any, Any], y: np.ndarray[Any, Any], epochs: int) -> int:
        bus = hookbus.EventBus()
        if self.name != "none":
            background = self.name == "background"
            bus.on("after_run", _post(self.url), every_n_steps=self.every, name="notify", background=background)
        with bus:
            began = time.perf_counter()
            self.model.fit(x, y, epochs=epochs, batch_size=BATCH, verbose=0, callbacks=[hookbus.EventBusCallback(bus)])
            self.fit_seconds.append(time.perf_counter() - began)
        if self.name == "background":
            writer = bus.stats()["notify"].writer
            assert writer is not None
            self.delivered += writer.written or 0
            self.lost += writer.lost
        return epochs * ROWS // BATCH


def measure(args: argparse.Namespace) -> list[dict[str, Any]]:
    """One run: the configurations side by side; per configuration its series and fit times."""
    rng = np.random.default_rng(0)
    x = rng.normal(size=(ROWS, 4)).astype("float32")
    y = (x @ np.array([1.0, -2.0, 0.5, 3.0], dtype="float32"))[:, None]
    webhook = Webhook(args.delay)
    try:
        configs = {name: Config(name, webhook.url, args.every) for name in CONFIGS}
        for config in configs.values():  # warm-up: traces the train function
            config.run(x, y, 1)
            config.fit_seconds.clear()
            config.delivered = config.lost = 0
        series = interleave(CONFIGS, lambda name: configs[name].run(x, y, args.epochs), args.rounds)
    finally:
        webhook.close()
    steps = args.epochs * ROWS // BATCH
    fits = {name: [s / steps for s in c.fit_seconds] for name, c in configs.items()}
    return [
        {
            "series": series,
            "fit": fits,
            "background": {"delivered": configs["background"].delivered, "lost": configs["background"].lost},
        }
    ]


def figures(run: dict[str, Any]) -> dict[str, dict[str, float]]:
    """The standard figures of a run against ``none``, with ``fit_x_wall`` (the fit alone) beside them."""
    out = summarize(run["series"], "none")
    fits = run["fit"]
    for name in CONFIGS:
        out[name]["fit_us"] = statistics.fmean(fits[name]) * 1e6
        out[name]["fit_x_wall"] = sum(fits[name]) / sum(fits["none"])
    return out


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--epochs", type=int, default=2)
    parser.add_argument("--delay", type=float, default=0.1, help="the webhook's seconds per answer")
    parser.add_argument("--every", type=int, default=32, help="steps between notifications")
    parser.add_argument("--quick", action="store_true", help="a smoke run: 2 runs of 2 rounds of one epoch")
    parser.add_argument("--json", default=None, metavar="PATH", help="also write the results here")
    parser.add_argument("--raw", default=None, help=argparse.SUPPRESS)  # one run of several: its result
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.rounds, args.epochs = 2, 2, 1
    runs = runs_of(__file__, argv if argv is not None else sys.argv[1:], args.runs, args.raw, lambda: measure(args))
    if args.raw is not None:
        return {}
    per_run = [figures(run["groups"][0]) for run in runs]
    import keras
    import tensorflow as tf

    result: dict[str, Any] = {
        "benchmark": "slow_subscriber",
        "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} CPUs, {platform.system()}",
        "load": os.getloadavg()[0],
        "python": platform.python_version(),
        "tensorflow": tf.__version__,
        "keras": keras.__version__,
        "runs": len(runs),
        "rounds": args.rounds,
        "epochs": args.epochs,
        "steps_per_fit": args.epochs * ROWS // BATCH,
        "delay": args.delay,
        "every": args.every,
        "rows": spread(per_run),
        "background": [run["groups"][0]["background"] for run in runs],
    }
    result["targets"] = targets(result)
    print_table(result)
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(result, fh, indent=2)
    return result


def targets(result: dict[str, Any]) -> list[tuple[str, bool]]:
    """The item's promise, judged on the median of the runs: off the training thread, the webhook
    costs the fit little (at most 1.10x none), where on it the fit waits for every answer."""
    rows = result["rows"]
    background = rows["background"]["fit_x_wall"]["median"]
    inline = rows["inline"]["fit_x_wall"]["median"]
    lost = sum(counts["lost"] for counts in result["background"])
    return [
        (f"background fit x none <= 1.10 (got {background:.3f}; inline {inline:.3f})", background <= 1.10),
        (f"background fit faster than inline (got {background:.3f} vs {inline:.3f})", background < inline),
        (f"no post lost at a close (got {lost})", lost == 0),
    ]


def print_table(result: dict[str, Any]) -> None:
    print(
        f"slow subscriber: a webhook answering in {1e3 * result['delay']:g} ms, a POST every {result['every']} steps, "
        f"{result['steps_per_fit']} steps a fit; {result['runs']} runs x {result['rounds']} rounds "
        f"(load {result['load']:.2f}, {result['machine']})"
    )
    print(f"{'':<11} {'fit us/step':>22} {'fit x none':>22} {'fit+close x none':>22} {'thread CPU x none':>22}")
    for name in CONFIGS:
        row = result["rows"][name]
        print(
            f"{name:<11} {cell(row['fit_us'], 0):>22} {cell(row['fit_x_wall']):>22} {cell(row['x_wall']):>22} "
            f"{cell(row['x_thread']):>22}"
        )
    for i, counts in enumerate(result["background"]):
        print(f"run {i + 1}: background delivered {counts['delivered']} posts, lost {counts['lost']}")
    print("targets (median of the runs):")
    for text, ok in result["targets"]:
        print(f"  {'met    ' if ok else 'NOT MET'} {text}")


if __name__ == "__main__":
    main()
