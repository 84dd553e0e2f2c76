"""Alerts from ``hookbus watch``: one word to a person per change of a run's state, from outside it.

The watcher reads files only, so it can report the runs an in-process notifier cannot: a run
SIGKILLed or OOM-killed is "presumed dead" once its logs stay silent past ``--dead-after``. Each
alert is one change of one run: it ended (finished, stopped, crashed), it was presumed dead, it
went stale, a key recorded a non-finite value, or no new training step came for ``--stalled-after``
seconds while it was live. An alert is sent by running a command (``/bin/sh -c``, the alert as
JSON on its standard input and in ``HOOKBUS_*`` variables) and/or POSTing JSON to a URL (a
``text`` field, which Slack's incoming webhooks show, beside the structured fields), on a thread
of its own with bounded retries, so a webhook that refuses or hangs never holds the view.

Deduplicated across restarts of the watcher: what was delivered is kept in a small state file
(by default ``.hookbus-alerts.json`` in the directory watched), written atomically after each
delivery; a restarted watcher sends only what changed since. On its first look at runs it has no
record of, a watcher does not announce the ends that happened before it watched; runs that appear
later are announced. A URL's credentials (its user info, query and path past the host) are never
printed.
"""

from __future__ import annotations

import json
import logging
import math
import os
import queue
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from hookbus._contract._ending import CRASHED, DEAD, FINISHED, STOPPED
from hookbus._rules._files import write_atomically
from hookbus._watch._run import STALE

__all__ = ["Alert", "Alerter", "Delivery", "redact"]

logger = logging.getLogger("hookbus")

STALLED = "stalled"
NONFINITE = "non-finite"
#: The states a change into is announced.
ANNOUNCED = frozenset({FINISHED, STOPPED, CRASHED, DEAD, STALE})
STATE_FILE = ".hookbus-alerts.json"


def redact(url: str) -> str:
    """``url`` as it may be printed: scheme and host only (a webhook's secret is its path or query)."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{host}{port}/…" if parts.scheme else "<a URL>"


@dataclass(frozen=True)
class Alert:
    """One change of one run, as sent.

    Attributes:
        run: The run's name (its directory under the one watched).
        kind: The new state (``finished``, ``stopped``, ``crashed``, ``presumed dead``, ``stale``),
            ``stalled`` or ``non-finite``.
        previous: The state it was last seen in (``None`` for a run first seen now).
        step: Its newest step.
        detail: The error it crashed with, the key that went non-finite, how long it stalled.
        hparams: Its hyper-parameters.
        key: What this alert is, for deduplication (kind and detail).
    """

    run: str
    kind: str
    previous: str | None
    step: int | None
    detail: str | None = None
    hparams: Mapping[str, Any] = field(default_factory=dict)

    @property
    def key(self) -> str:
        return f"{self.kind}:{self.detail}" if self.kind == NONFINITE else self.kind

    @property
    def text(self) -> str:
        words = f"hookbus: run {self.run} {self.kind}"
        if self.step is not None:
            words += f" at step {self.step}"
        if self.detail:
            words += f" ({self.detail})"
        return words

    def payload(self) -> dict[str, Any]:
        return {
            "text": self.text,
            "run": self.run,
            "state": self.kind,
            "previous": self.previous,
            "step": self.step,
            "detail": self.detail,
            "hparams": dict(self.hparams),
        }


@dataclass(frozen=True)
class Delivery:
    """Where alerts go and how hard to try.

    Attributes:
        command: A shell command run per alert (``None``: none).
        url: A URL POSTed the alert's JSON (``None``: none).
        attempts: Tries per alert and destination (default 3).
        timeout: Seconds one try may take (default 10).
        backoff: Seconds before the second try, doubled for each next (default 1).
    """

    command: str | None = None
    url: str | None = None
    attempts: int = 3
    timeout: float = 10.0
    backoff: float = 1.0

    def send(self, alert: Alert, wait: Callable[[float], bool]) -> bool:
        """Deliver ``alert`` to each destination (``wait(secs)`` between tries: ``True`` to give up);
        whether every destination took it."""
        ok = True
        if self.command is not None:
            ok &= self._tried(lambda: self._run(alert), "the alert command", wait)
        if self.url is not None:
            ok &= self._tried(lambda: self._post(alert), f"the webhook {redact(self.url)}", wait)
        return ok

    def _tried(self, attempt: Callable[[], None], what: str, wait: Callable[[float], bool]) -> bool:
        delay = self.backoff
        for tries in range(1, self.attempts + 1):
            try:
                attempt()
                return True
            except Exception as error:  # noqa: BLE001 - any failure of a destination is retried, then said
                failure = str(error) if self.url is None or self.url not in str(error) else type(error).__name__
                logger.warning("hookbus watch: %s failed (try %d of %d): %s", what, tries, self.attempts, failure)
            if tries < self.attempts and wait(delay):
                return False
            delay *= 2
        return False

    def _run(self, alert: Alert) -> None:
        assert self.command is not None
        payload = alert.payload()
        env = {
            **os.environ,
            "HOOKBUS_RUN": alert.run,
            "HOOKBUS_STATE": alert.kind,
            "HOOKBUS_STEP": "" if alert.step is None else str(alert.step),
            "HOOKBUS_TEXT": alert.text,
        }
        done = subprocess.run(
            ["/bin/sh", "-c", self.command],
            input=json.dumps(payload),
            text=True,
            env=env,
            timeout=self.timeout,
            capture_output=True,
            check=False,
        )
        if done.returncode != 0:
            raise RuntimeError(f"exit status {done.returncode}: {done.stderr.strip()[-300:]}")

    def _post(self, alert: Alert) -> None:
        assert self.url is not None
        body = json.dumps(alert.payload()).encode("utf-8")
        request = urllib.request.Request(self.url, data=body, headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 - the user's URL
                response.read()
        except urllib.error.HTTPError as error:
            raise RuntimeError(f"HTTP {error.code}") from None
        except urllib.error.URLError as error:
            raise RuntimeError(f"not reached: {error.reason}") from None


class Alerter:
    """Turns each poll's runs into alerts and delivers them on its own thread.

    Args:
        delivery: Where they go.
        state_file: What was delivered, across restarts of the watcher.
        stalled_after: Seconds without a new training step (while live) before a run is stalled
            (``None``: not watched).
        clock: The wall clock (train records' times are compared with it).
    """

    def __init__(
        self,
        delivery: Delivery,
        state_file: Path,
        *,
        stalled_after: float | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.delivery = delivery
        self.state_file = state_file
        self.stalled_after = stalled_after
        self.clock = clock
        self._lock = threading.Lock()  # the records: the poll's thread and the delivery's
        self._sent: dict[str, dict[str, Any]] = self._load()  # run -> {"state": ..., "keys": [...]}
        self._seen: dict[str, str] = {}  # run -> state seen by this watcher
        self._queued: dict[str, set[str]] = {}  # run -> keys of the alerts queued and not yet through
        self._first = True
        self._dirty = False
        self._queue: queue.Queue[Alert | None] = queue.Queue()
        self._stopping = threading.Event()
        self.delivered: list[Alert] = []
        self.failed: list[Alert] = []
        self._thread = threading.Thread(target=self._deliver, name="hookbus-watch-alerts", daemon=True)
        self._thread.start()

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            data = json.loads(self.state_file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return {}
        except (OSError, ValueError):
            logger.warning("hookbus watch: %s is unreadable; alerts start afresh", self.state_file)
            return {}
        runs = data.get("runs") if isinstance(data, dict) else None
        return {str(k): dict(v) for k, v in runs.items() if isinstance(v, dict)} if isinstance(runs, dict) else {}

    def observe(self, rows: Iterable[Any]) -> list[Alert]:
        """One poll's rows (:class:`hookbus._watch._sweep.RunRow`): the alerts it gives, queued."""
        alerts: list[Alert] = []
        now = self.clock()
        with self._lock:
            for row in rows:
                alerts += self._changes(row, now)
            self._first = False
            if self._dirty:
                self._save()
        for alert in alerts:
            self._queue.put(alert)
        return alerts

    def _changes(self, row: Any, now: float) -> list[Alert]:
        """The alerts ``row`` gives. The state file keeps, per run, the last state announced (or a
        quiet one seen: live, waiting) and the keys of the other alerts delivered; an announced
        state is written there once delivered, so a watcher stopped before delivering sends it again."""
        name, state = row.name, row.state
        record = self._sent.get(name)
        if record is None:
            record = self._sent[name] = {"state": None, "keys": []}
            if self._first and state in ANNOUNCED - {STALE}:
                record["state"] = state  # it ended before this watcher looked: not news
                self._dirty = True
                return []
        previous = self._seen.get(name, record.get("state"))
        self._seen[name] = state
        sent_keys = set(record.get("keys", []))
        found: list[Alert] = []
        if state in ANNOUNCED and state != previous and state != record.get("state"):
            detail = row.error if state in (CRASHED, DEAD) and row.error else None
            found.append(Alert(name, state, previous, row.step, detail, row.hparams))
        elif state not in ANNOUNCED and record.get("state") != state:
            record["state"] = state  # a quiet state is recorded at once: a later end is news after a restart
            self._dirty = True
        for key, summary in row.keys.items():
            if summary.nonfinite and f"{NONFINITE}:{key}" not in sent_keys:
                found.append(Alert(name, NONFINITE, previous, row.step, key, row.hparams))
        stalled = self._stalled(row, now)
        if stalled is not None and STALLED not in sent_keys:
            found.append(Alert(name, STALLED, previous, row.step, stalled, row.hparams))
        elif stalled is None and STALLED in sent_keys and state == "live":
            record["keys"] = sorted(sent_keys - {STALLED})  # steps came again: a next stall is news
            self._dirty = True
        queued = self._queued.setdefault(name, set())
        found = [a for a in found if a.key not in queued]  # sent already, or on its way
        queued.update(a.key for a in found)
        return found

    def _stalled(self, row: Any, now: float) -> str | None:
        after = self.stalled_after
        last = getattr(row, "last_train", None)
        if after is None or row.state != "live" or last is None:
            return None
        waited = now - last
        return f"no new step for {waited:.0f} s" if math.isfinite(waited) and waited > after else None

    def _deliver(self) -> None:
        while True:
            alert = self._queue.get()
            if alert is None:
                return
            ok = self.delivery.send(alert, self._stopping.wait)
            with self._lock:
                self._queued.get(alert.run, set()).discard(alert.key)
                if not ok:
                    self.failed.append(alert)
                    continue
                self.delivered.append(alert)
                record = self._sent.setdefault(alert.run, {"state": None, "keys": []})
                if alert.kind in ANNOUNCED:
                    record["state"] = alert.kind
                else:
                    record["keys"] = sorted({*record.get("keys", []), alert.key})
                self._save()

    def _save(self) -> None:
        self._dirty = False
        try:
            write_atomically(self.state_file, json.dumps({"v": 1, "runs": self._sent}, indent=1, sort_keys=True))
        except OSError as error:
            logger.warning("hookbus watch: cannot keep the alerts delivered in %s: %s", self.state_file, error)

    def close(self, deadline: float = 30.0) -> None:
        """Deliver what is queued within ``deadline`` seconds, then stop."""
        self._queue.put(None)
        self._thread.join(deadline)
        if self._thread.is_alive():
            self._stopping.set()  # retries give up; a try in progress ends by its own timeout
            self._thread.join(self.delivery.timeout + 1.0)
