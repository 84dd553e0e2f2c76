"""The shipper: a daemon thread that reads the spool and ships it to MLflow whenever the server answers.

Training never waits for it: the checkpoint barrier flushes the spool (a local file), and the
shipper follows behind. It opens the run when the server first answers (continuing the run the
spool's ``open`` record names), ships points in ``log_batch`` calls at MLflow's limits with the
``hookbus.shipped.<mode>`` tags in the same call, ends the run at the spool's ``end`` record, and
after each chunk records in the id file how far it got. A failed call is retried, after a pause
that doubles from 0.5 s to at most 15 s; an unreachable server is reported as such (its URI
redacted, the connection error) and the points wait in the spool, on disk: in this process until
the close deadline, then until the next start in the same directory (to their own run).
"""

from __future__ import annotations

import logging
import os
import shutil
import threading
import time
from collections.abc import Callable

from ._run import TrackedRun
from ._spool import Cursor, Opening, Spool, point_of
from ._uri import Redactor

__all__ = ["Shipper", "describe_error"]

logger = logging.getLogger("hookbus")

FIRST_PAUSE = 0.5
LONGEST_PAUSE = 15.0
POLL_SECS = 1.0  # besides the writer's flushes, which wake it at once
_CHUNK = 2000  # records read and shipped before the position is recorded


def describe_error(error: BaseException) -> tuple[str, bool]:
    """A short text for ``error`` and whether it is a connection failure (the server did not answer).

    MLflow's HTTP client wraps ``requests``' errors in an ``MlflowException`` whose text is a
    paragraph; the text here is the outermost ``requests``/socket error's name and the innermost
    system error (``ConnectionError: [Errno 111] Connection refused``).
    """
    chain: list[BaseException] = []
    seen: BaseException | None = error
    while seen is not None and seen not in chain and len(chain) < 20:
        chain.append(seen)
        reason = getattr(seen, "reason", None)
        seen = seen.__cause__ or seen.__context__ or (reason if isinstance(reason, BaseException) else None)
    network = [e for e in chain if type(e).__module__.split(".")[0] in ("requests", "urllib3")]
    system = [e for e in chain if isinstance(e, OSError) and not type(e).__module__.startswith(("requests", "urllib3"))]
    database = [e for e in chain if type(e).__name__ in ("OperationalError", "TimeoutError", "DisconnectionError")]
    code = getattr(error, "error_code", None)
    if network or system:
        name = type((network or system)[0]).__name__
        detail = str(system[-1]) if system else str(network[-1])
        return f"{name}: {detail}"[:300], True
    if database:
        return f"{type(database[-1]).__name__}: {str(database[-1]).splitlines()[0]}"[:300], True
    temporary = code in ("TEMPORARILY_UNAVAILABLE", "REQUEST_LIMIT_EXCEEDED", "INTERNAL_ERROR")
    text = str(error).splitlines()[0] if str(error) else ""
    return f"{type(error).__name__}{f' {code}' if code else ''}: {text}"[:300], temporary


class Shipper:
    """Reads ``spool`` from where the last shipper stopped and ships it through ``run``.

    Args:
        name: The sink's name, first in every report.
        spool: The sink's files.
        run: The MLflow run the points go to.
        redactor: Scrubs the URI's credentials out of every text.
        waiting: How many points wait in the spool (for reports).
    """

    def __init__(
        self, name: str, spool: Spool, run: TrackedRun, redactor: Redactor, waiting: Callable[[], int]
    ) -> None:
        self.name, self.spool, self.run, self.redactor = name, spool, run, redactor
        self._waiting = waiting
        self._wake = threading.Event()
        self._finishing = False
        self._quit = False
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._loop, name=f"hookbus-shipper[{name}]", daemon=True)
        #: The last failure's text (redacted) while calls fail, else ``None``.
        self.problem: str | None = None
        self.unreachable = False  # the failure is a connection failure (or a server's temporary one)
        self.processed = 0  # points shipped or dropped as already in MLflow
        self.failures = 0  # tries that failed
        self.ended: str | None = None  # how the run ended, once its end shipped
        self.cursor: Cursor | None = None

    def start(self) -> None:
        record = self.spool.read_record()
        cursor = record.get("cursor")
        self.cursor = (int(cursor[0]), int(cursor[1])) if isinstance(cursor, list) and len(cursor) == 2 else None
        self._thread.start()

    def wake(self) -> None:
        """Look at the spool now (the writer flushed)."""
        self._wake.set()

    def finish(self, deadline: float) -> bool:
        """Ship everything the spool holds (the writer is closed), within ``deadline`` seconds.

        True once all of it, the run's end included, is in MLflow. False, at once, when a try
        made after this call fails (the server is still away: no point in waiting out the
        deadline), or at the deadline; the thread is then told to quit after its current call (a
        daemon: it never holds the process).
        """
        failures = self.failures
        self._finishing = True
        self._wake.set()  # a shipper pausing between tries tries again now
        end = time.monotonic() + max(0.0, deadline)
        done = False
        while self._thread.is_alive() or self._done.is_set():
            done = self._done.wait(min(0.05, max(0.0, end - time.monotonic())))
            if done or time.monotonic() >= end or self.failures > failures:
                break
        if not done:
            self._quit = True
            self._wake.set()
        return done

    def report(self) -> str | None:
        """``None`` while shipping works; else what fails, with the URI and what waits."""
        problem = self.problem
        if problem is None:
            return None
        what = "unreachable" if self.unreachable else "refused a request"
        waiting = self._waiting()
        return (
            f"{self.name}: {self.redactor.shown} {what} ({problem}): {waiting} point{'s' if waiting != 1 else ''} "
            f"wait in the spool"
        )

    # -- the thread ---------------------------------------------------------------------------
    def _loop(self) -> None:
        pause = FIRST_PAUSE
        while not self._quit:
            # Read before the spool: a read that found nothing counts as the last one only if the
            # writer was already closed when it began (a close between the two would strand points).
            finishing = self._finishing
            try:
                more = self._ship_some()
            except Exception as error:  # reported, retried: the points stay in the spool
                self.run.reset()
                self._failed(error)
                self._wake.wait(pause)
                self._wake.clear()
                pause = min(2 * pause, LONGEST_PAUSE)
                continue
            if self.problem is not None:
                self.problem = None
                logger.warning("%s: %s answers again; shipping the spool", self.name, self.redactor.shown)
            pause = FIRST_PAUSE
            if more:
                continue
            if finishing:
                if self.ended is not None:
                    self.spool.remove_all()  # the run ended and everything shipped
                    self.spool.write_record(cursor=None)
                self._done.set()
                return
            self._wake.wait(POLL_SECS)
            self._wake.clear()

    def _failed(self, error: BaseException) -> None:
        text, unreachable = describe_error(error)
        text = self.redactor.scrub(text)
        if text != self.problem:
            what = "unreachable" if unreachable else "refused a request"
            logger.warning(
                "%s: %s %s (%s); the points wait in the spool in %s and ship when it answers",
                self.name,
                self.redactor.shown,
                what,
                text,
                self.spool.directory,
            )
        self.problem, self.unreachable = text, unreachable
        self.failures += 1

    def _in_run(self) -> bool:
        """Whether a run takes the records (after a restart mid-spool: the id file's run, reopened)."""
        if self.run.run_id is None:
            record = self.spool.read_record()
            training, run_id = record.get("training"), record.get("run_id")
            if isinstance(training, str) and isinstance(run_id, str):
                self.run.open(training, known_run_id=run_id)
        return self.run.run_id is not None

    def _ship_some(self) -> bool:
        """Ship the next chunk of the spool; False when there was nothing to ship."""
        entries = list(self.spool.read(self.cursor, limit=_CHUNK))
        if not entries:
            return False
        points = 0
        last_ms: int | None = None  # the newest record's time in this chunk (a killed run's end, later)
        shipped_models: list[str] = []
        for entry, _ in entries:
            if self._quit:
                raise InterruptedError("closed")  # past the close deadline: nothing more is sent
            if "open" in entry:
                opening = Opening.of(entry)
                self.run.ship()  # the previous training's points first
                record = self.spool.read_record()
                known = record.get("run_id") if record.get("training") == opening.training else None
                self.run.open(
                    opening.training,
                    run_id=opening.run_id,
                    known_run_id=known if isinstance(known, str) else None,
                    new=opening.new,
                    by_run_key=opening.by_run_key,
                    start_ms=opening.start_ms,
                    run_name=opening.run_name,
                    params=opening.params,
                    tags=opening.tags,
                    texts=opening.texts,
                )
                self.ended, last_ms = None, opening.start_ms
            elif "point" in entry and self._in_run():
                point = point_of(entry)
                self.run.add(point)
                last_ms = point.timestamp_ms
                points += 1
            elif "model" in entry and self._in_run():
                staged = str(entry["model"].get("path"))
                if os.path.isdir(staged):  # else shipped already (a restart after its upload)
                    self.run.log_model(staged)
                shipped_models.append(staged)
            elif "end" in entry and self._in_run():
                end = entry["end"]
                self.run.finish(str(end["status"]), dict(end.get("tags", {})), int(end["time"]))
                self.ended = str(end.get("tags", {}).get("hookbus.end", end["status"]))
        self.run.ship()
        self.cursor = entries[-1][1]
        self.processed += points
        latest = {} if last_ms is None else {"last_ms": last_ms}
        self.spool.write_record(
            cursor=list(self.cursor),
            training=self.run.training,
            run_id=self.run.run_id,
            shipped=dict(self.run.shipped),
            ended=self.ended,
            **latest,
        )
        self.spool.remove_before(self.cursor[0])
        for staged in shipped_models:
            shutil.rmtree(staged, ignore_errors=True)
        return True
