"""The console dashboard's terminal: live or plain, and logging routed through the console.

Three facts decide the design here: rich takes a pipe for a terminal under ``FORCE_COLOR``;
logging handlers made before a ``Live`` display started hold the real stdout/stderr, past its
redirect of ``print``; and the terminal echoes what is typed (``^C``, Enter) at the cursor, which
``Live`` keeps at the end of its frame: one echoed line break and every later frame is drawn a
line lower, under a stale copy of its top border. So the live display turns the echo of typed
input off while it runs (Ctrl-C still interrupts) and back on as it stops.

A fourth: rich's ``Live`` draws its frame on a thread of its own, and a line printed or logged on
any other thread (TensorFlow's, the machine sampler's, the training thread's own ``print``) places
itself above the frame by a cursor move computed from the frame's last height, then draws the frame
again, outside the lock the refresh holds: a refresh in between changes the height, and the frame
is drawn under a stale copy of itself. So the streams and the logging handlers are routed through
proxies whose writes hold the ``Live``'s lock, set up before its first frame and undone after its
last.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Mapping
from typing import IO, TYPE_CHECKING, Any

try:
    import termios
except ImportError:  # not a POSIX system: no terminal modes to change
    termios = None  # type: ignore[assignment]

from rich.console import Console
from rich.file_proxy import FileProxy
from rich.live import Live
from rich.text import Text

from ._notebook import NotebookDisplay

if TYPE_CHECKING:
    from rich.console import RenderableType

__all__ = ["SerialProxy", "TerminalDisplay", "redirect_output", "restore_logging", "route_logging", "wants_live"]

Routed = list[tuple["logging.StreamHandler[Any]", IO[str]]]


class SerialProxy(FileProxy):
    """rich's :class:`~rich.file_proxy.FileProxy` (a stream's lines printed through a console), whose
    writes hold ``lock``: the ``Live``'s, so a line never lands while its frame is being drawn."""

    def __init__(self, console: Console, file: IO[str], lock: Any) -> None:
        super().__init__(console, file)
        self._serial = lock

    def write(self, text: str) -> int:
        with self._serial:
            return super().write(text)

    def flush(self) -> None:
        with self._serial:
            super().flush()


def live_lock(live: Live) -> Any:
    """The lock ``live``'s refreshes hold (rich's ``Live._lock``, an ``RLock`` in every rich hookbus
    supports); a lock of its own where a rich has none (lines then print unserialized, as rich's)."""
    lock = getattr(live, "_lock", None)
    return lock if hasattr(lock, "__enter__") else threading.RLock()


#: The proxies the last dashboards redirected the streams through (see :func:`redirect_output`).
_RETIRED: collections.deque[SerialProxy] = collections.deque(maxlen=16)


def redirect_output(console: Console, lock: Any) -> Callable[[], None]:
    """Point ``sys.stdout`` and ``sys.stderr`` at ``console`` through :class:`SerialProxy` (as
    ``Live(redirect_stdout=True, redirect_stderr=True)`` does with rich's own proxies); returns what
    restores them, flushing what they hold."""
    saved = sys.stdout, sys.stderr
    proxies = []
    if not isinstance(sys.stdout, FileProxy):
        sys.stdout = SerialProxy(console, sys.stdout, lock)
        proxies.append(sys.stdout)
    if not isinstance(sys.stderr, FileProxy):
        sys.stderr = SerialProxy(console, sys.stderr, lock)
        proxies.append(sys.stderr)

    def restore() -> None:
        for proxy in proxies:
            proxy.flush()
        # Kept alive past the swap: CPython 3.11's print() holds sys.stdout without a reference, so
        # a thread printing while the last one was dropped would write through a freed object.
        _RETIRED.extend(proxies)
        sys.stdout, sys.stderr = saved

    return restore


def wants_live(console: Console, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``console`` should get a live dashboard rather than plain lines.

    Live in a Jupyter notebook (rich's ``console.is_jupyter``: the dashboard is one output,
    updated in place). Plain when ``TTY_INTERACTIVE=0``, when rich finds no interactive
    terminal, and when the console writes to a real OS stream that is not a tty
    (``FORCE_COLOR`` makes rich take a pipe for a terminal). In-memory files (no ``fileno``)
    follow rich's judgement.
    """
    if environ.get("TTY_INTERACTIVE") == "0":
        return False
    if console.is_jupyter:
        return True
    if not (console.is_terminal and console.is_interactive) or console.is_dumb_terminal:
        return False
    try:
        fd = console.file.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO and friends: no OS stream
        return True
    return os.isatty(fd)


def route_logging(console: Console, streams: set[int], lock: Any) -> Routed:
    """Point every logging handler that writes to one of ``streams`` (by id) at ``console``, through
    a :class:`SerialProxy` holding ``lock`` (the ``Live``'s).

    Covers the root logger and every existing logger (TensorFlow's ``tensorflow`` included);
    absl's handler is not a stream handler but wraps one (``python_handler``). File handlers
    are left alone. Returns what :func:`restore_logging` needs to undo it.
    """
    loggers: list[logging.Logger] = [logging.getLogger()]
    loggers += [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    seen: set[int] = set()
    routed: Routed = []
    for logger in loggers:
        for handler in logger.handlers:
            for candidate in (handler, getattr(handler, "python_handler", None)):
                if (
                    isinstance(candidate, logging.StreamHandler)
                    and not isinstance(candidate, logging.FileHandler)
                    and id(candidate) not in seen
                    and id(candidate.stream) in streams
                ):
                    seen.add(id(candidate))
                    stream = candidate.stream
                    candidate.setStream(SerialProxy(console, stream, lock))
                    routed.append((candidate, stream))
    return routed


def quiet_input(stream: IO[str] | None) -> Callable[[], None]:
    """Stop the terminal behind ``stream`` from echoing typed input; returns what restores it.

    Only the echo changes: line editing and the signals of Ctrl-C and Ctrl-Z stay as they were.
    Nothing happens (and the restore does nothing) when ``stream`` is not a terminal or this
    process is not its foreground job.
    """
    if termios is None or stream is None:
        return lambda: None
    try:
        fd = stream.fileno()
        # Only the foreground job's: a background job that changed the terminal's modes would be
        # stopped by SIGTTOU (and the terminal is not its to change).
        if not os.isatty(fd) or os.tcgetpgrp(fd) != os.getpgrp():
            return lambda: None
        saved = termios.tcgetattr(fd)
        quiet = list(saved)
        quiet[3] &= ~(termios.ECHO | getattr(termios, "ECHOCTL", 0))
        termios.tcsetattr(fd, termios.TCSANOW, quiet)
    except (AttributeError, OSError, ValueError, termios.error):  # no usable terminal: leave it be
        return lambda: None

    def restore() -> None:
        with contextlib.suppress(OSError, termios.error):  # the terminal went away: nothing to restore
            termios.tcsetattr(fd, termios.TCSANOW, saved)

    return restore


def restore_logging(routed: Routed) -> None:
    """Give every routed handler its own stream back (flushing what it buffered)."""
    for handler, stream in reversed(routed):
        handler.setStream(stream)


class TerminalDisplay:
    """Where the dashboard goes: a rich ``Live`` on an interactive terminal, one output updated in
    place in a Jupyter notebook (:class:`NotebookDisplay`), plain lines elsewhere.

    Owns the console, the ``Live`` (which draws ``get_renderable()`` on rich's own thread) or
    the notebook display, and the logging handlers routed through a ``Live`` while it runs.

    Args:
        console: The console (default ``None``: a new ``Console()`` at :meth:`start`).
        live: ``True``/``False`` force the mode; ``None`` (default) asks :func:`wants_live`.
        refresh_per_second: Frames per second of the live display.
        get_renderable: What to draw (called on rich's refresh thread: must not raise).
    """

    def __init__(
        self,
        console: Console | None,
        live: bool | None,
        refresh_per_second: float,
        get_renderable: Callable[[], RenderableType],
    ) -> None:
        self.console = console
        self.live = live
        self.refresh_per_second = refresh_per_second
        self._get_renderable = get_renderable
        self._live: Live | None = None
        #: The notebook display while the dashboard runs in a Jupyter notebook (else ``None``).
        self.notebook: NotebookDisplay | None = None
        self._routed: Routed = []
        self._restore_output: Callable[[], None] = lambda: None
        self._on_exit: Callable[[], None] | None = None
        self._restore_input: Callable[[], None] = lambda: None

    @property
    def is_live(self) -> bool:
        return self._live is not None or self.notebook is not None

    def start(self, on_exit: Callable[[], None]) -> None:
        """Show the live display if this is a terminal; ``on_exit`` runs at interpreter exit if
        the display is still up then (a process that dies without closing gets its cursor back)."""
        if self.console is None:
            self.console = Console()
        live = self.live if self.live is not None else wants_live(self.console)
        if not live:
            return
        if self.console.is_jupyter:
            # No cursor and no terminal here: prints and logging are the notebook's own outputs.
            self.notebook = NotebookDisplay(self.console.width, self.refresh_per_second, self._get_renderable)
            self.notebook.start()
            return
        streams = {id(s) for s in (sys.stdout, sys.stderr, sys.__stdout__, sys.__stderr__, self.console.file)}
        # The streams are redirected here, not by the Live: through proxies that hold its lock.
        self._live = shown = Live(
            get_renderable=self._get_renderable,
            console=self.console,
            refresh_per_second=self.refresh_per_second,
            redirect_stdout=False,
            redirect_stderr=False,
        )
        self._on_exit = on_exit
        atexit.register(on_exit)
        self._restore_input = quiet_input(sys.stdin)
        # Output first, then the frame: a record another thread logs between the two (the machine
        # sampler's notice at a run's start) would otherwise reach the terminal past the frame, and
        # every later frame would be drawn under a stale copy of it. Routed, it prints through the
        # console, in plain lines until the frame is up and above it after.
        lock = live_lock(shown)
        self._routed = route_logging(self.console, streams, lock)
        self._restore_output = redirect_output(self.console, lock)
        shown.start(refresh=True)

    def print(self, line: str) -> None:
        """A plain line, shown literally (plain mode only: the live display has its own frame)."""
        if not self.is_live and self.console is not None:
            self.console.print(Text(line), highlight=False, soft_wrap=True)

    def stop(self, summary: Iterable[str]) -> None:
        """Draw the final frame (live) or print ``summary`` (plain), then restore logging.

        The frame is drawn while logging is still routed through the console (what the handlers
        buffered first, above it): a record logged on another thread meanwhile prints above the
        frame, never through it.
        """
        notebook, self.notebook = self.notebook, None
        if notebook is not None:
            notebook.stop()
            return
        live, self._live = self._live, None
        routed, self._routed = self._routed, []
        output, self._restore_output = self._restore_output, lambda: None
        try:
            if live is not None:
                if self._on_exit is not None:
                    atexit.unregister(self._on_exit)
                try:
                    for handler, _ in routed:
                        handler.flush()  # a partial line the proxy held: above the final frame
                    live.stop()
                finally:
                    restore, self._restore_input = self._restore_input, lambda: None
                    restore()
            else:
                for line in summary:
                    self.print(line)
        finally:
            try:
                output()
            finally:
                restore_logging(routed)
