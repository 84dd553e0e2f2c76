"""A command running under a real pseudo-terminal while the test acts beside it (pyte reads the screen).

tests/_pty.py runs a command to its end; ``hookbus watch`` runs beside a trainer the test starts,
kills and restarts, so this one is driven step by step: :meth:`PtySession.wait_for` reads the
terminal until a condition on the screen holds (with a deadline, never a timed assertion).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Sequence

import pyte
from _pty import _CLEARED

__all__ = ["PtySession"]


class PtySession:
    """``argv`` on a fresh ``cols`` x ``rows`` pty; the screen as a terminal would show it.

    Args:
        argv: The command.
        cols, rows: The terminal's size.
        env: Extra environment variables (terminal-detection overrides are cleared, as in _pty).
        own_terminal: Run the command in its own session with the pty as its controlling terminal,
            so that a typed Ctrl-C (:meth:`type`) interrupts it as a terminal does.
    """

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cols: int = 80,
        rows: int = 24,
        env: dict[str, str] | None = None,
        own_terminal: bool = False,
    ) -> None:
        environ = {k: v for k, v in os.environ.items() if k not in _CLEARED}
        environ.update({"TERM": "xterm-256color", "PYTHONUNBUFFERED": "1", **(env or {})})
        self._master, slave = os.openpty()
        fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        #: The terminal's modes before the command started (see :meth:`modes`).
        self.modes_before = termios.tcgetattr(slave)

        def controlling_terminal() -> None:  # in the child: its own session, the pty its terminal
            os.setsid()
            fcntl.ioctl(0, termios.TIOCSCTTY, 0)

        try:
            self.process = subprocess.Popen(
                list(argv),
                stdin=slave,
                stdout=slave,
                stderr=slave,
                env=environ,
                close_fds=True,
                preexec_fn=controlling_terminal if own_terminal else None,
            )
        finally:
            os.close(slave)
        self.screen = pyte.Screen(cols, rows)
        self._stream = pyte.ByteStream(self.screen)
        self.output = bytearray()
        self.closed = False

    @property
    def text(self) -> str:
        """The screen now, one row per line (trailing blanks removed)."""
        return "\n".join(line.rstrip() for line in self.screen.display)

    def type(self, keys: str | bytes) -> None:
        """Type ``keys`` at the terminal (``"\\x1b[B"`` is the down arrow, ``"\\x03"`` Ctrl-C)."""
        os.write(self._master, keys.encode() if isinstance(keys, str) else keys)

    def modes(self) -> list[object]:
        """The terminal's modes now (``termios.tcgetattr``: the line discipline's, read from the
        master side, so they can be read after the command has exited)."""
        modes: list[object] = termios.tcgetattr(self._master)
        return modes

    def pump(self, wait: float = 0.05) -> None:
        """Read what the command wrote (waiting at most ``wait`` seconds for it)."""
        if self.closed:
            time.sleep(wait)
            return
        ready, _, _ = select.select([self._master], [], [], wait)
        if not ready:
            return
        try:
            data = os.read(self._master, 65536)
        except OSError:  # EIO: the command exited and closed its end
            data = b""
        if not data:
            self.closed = True
            return
        self.output += data
        self._stream.feed(data)

    def wait_for(
        self, condition: Callable[[str], bool], *, deadline: float = 60.0, tick: Callable[[], None] | None = None
    ) -> str:
        """Read the terminal until ``condition(screen text)`` holds; the screen then.

        ``tick`` runs between reads (the test's own work beside the command). Raises
        :class:`TimeoutError` with the screen after ``deadline`` seconds.
        """
        until = time.monotonic() + deadline
        while True:
            self.pump()
            if tick is not None:
                tick()
            text = self.text
            if condition(text):
                return text
            if time.monotonic() > until:
                raise TimeoutError(f"the screen never showed what was waited for; it shows:\n{text}")

    def finish(self, deadline: float = 60.0, tick: Callable[[], None] | None = None) -> int:
        """Wait for the command to exit (reading its last output, ``tick`` between reads); its status."""
        until = time.monotonic() + deadline
        while not self.closed and time.monotonic() < until:
            self.pump(0.1)
            if tick is not None:
                tick()
        return self.process.wait(timeout=max(1.0, until - time.monotonic()))

    def close(self) -> None:
        """Kill the command if it still runs and release the terminal."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait()
        with contextlib.suppress(OSError):
            os.close(self._master)
