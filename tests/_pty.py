"""Run a command under a real pseudo-terminal and read its screen with a terminal emulator (pyte).

Reusable by any test that must see what a person would see::

    result = run_in_pty([sys.executable, "script.py"])
    assert "step 150" in result.text
    assert result.cursor_visible
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import select
import signal
import struct
import subprocess
import termios
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import pyte

__all__ = ["PtyResult", "run_in_pty"]

#: Variables that would make rich (or the child) ignore the terminal it is given.
_CLEARED = ("FORCE_COLOR", "NO_COLOR", "TTY_INTERACTIVE", "TTY_COMPATIBLE", "COLUMNS", "LINES", "JUPYTER_COLUMNS")


@dataclass
class PtyResult:
    """What the terminal shows once the command has exited.

    Attributes:
        output: Every byte the command wrote to the terminal.
        returncode: Its exit status (negative: killed by that signal).
        screen: The emulated terminal after all output.
        interrupted: Whether SIGINT was sent (see ``interrupt_on``) or Ctrl-C typed (``ctrl_c_when``).
        moments: The screen's rows (trailing blanks removed) at the first moment each of
            ``moments``' conditions held, by name; a name is missing if its moment never came.
    """

    output: bytes
    returncode: int
    screen: pyte.Screen
    interrupted: bool
    moments: dict[str, list[str]] = field(default_factory=dict)

    @property
    def lines(self) -> list[str]:
        """The screen's rows, trailing blanks removed."""
        return [line.rstrip() for line in self.screen.display]

    @property
    def text(self) -> str:
        """The screen as text, one row per line."""
        return "\n".join(self.lines)

    @property
    def scrolled(self) -> list[str]:
        """Rows that scrolled off the top of the screen, oldest first, then the screen's rows."""
        top = getattr(self.screen, "history", None)
        old = [] if top is None else list(top.top)
        cols = self.screen.columns
        return ["".join(row[x].data for x in range(cols)).rstrip() for row in old] + self.lines

    @property
    def cursor_visible(self) -> bool:
        """Whether the command left the cursor shown (DECTCEM set)."""
        return not self.screen.cursor.hidden


#: How rich's live display begins each redraw (back to the line's start, erase it, then up and
#: erase line by line): a frame boundary in the output.
_REDRAW = b"\r\x1b[2K"


def run_in_pty(
    argv: Sequence[str],
    *,
    cols: int = 100,
    rows: int = 50,
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    timeout: float = 60.0,
    interrupt_on: bytes | None = None,
    moments: Mapping[str, Callable[[str], bool]] | None = None,
    ctrl_c_when: Callable[[str], bool] | None = None,
    own_terminal: bool = False,
) -> PtyResult:
    """Run ``argv`` with a fresh pty of ``cols`` x ``rows`` as stdin, stdout and stderr.

    Args:
        argv: The command.
        cols, rows: The terminal size the command sees (default 100 x 50).
        env: Extra environment variables; ``TERM=xterm-256color`` is set and variables that
            override terminal detection (``FORCE_COLOR``, ``TTY_INTERACTIVE``, ...) are cleared.
        cwd: Working directory (default: the current one).
        timeout: Seconds before the command is killed and :class:`TimeoutError` raised
            (default 60).
        interrupt_on: Send SIGINT (what Ctrl-C does) once this byte string has appeared in the
            output (default ``None``: never).
        moments: ``name -> condition`` on the screen's text: the screen is kept at the first
            moment each condition holds (see :attr:`PtyResult.moments`). Default none.
        ctrl_c_when: Type Ctrl-C into the terminal (the command runs in its own session with
            the pty as its controlling terminal, so the line discipline sends SIGINT and echoes
            ``^C`` as a terminal does) once this condition on the screen's text holds.
        own_terminal: Run the command in its own session with the pty as its controlling
            terminal even without ``ctrl_c_when`` (for job control: ``set -m`` in a shell).
    """
    environ = {k: v for k, v in os.environ.items() if k not in _CLEARED}
    environ.update({"TERM": "xterm-256color", "PYTHONUNBUFFERED": "1"})
    environ.update(env or {})
    master, slave = os.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def controlling_terminal() -> None:  # in the child: its own session, the pty its terminal
        os.setsid()
        fcntl.ioctl(0, termios.TIOCSCTTY, 0)

    try:
        process = subprocess.Popen(
            list(argv),
            stdin=slave,
            stdout=slave,
            stderr=slave,
            env=environ,
            cwd=cwd,
            close_fds=True,
            preexec_fn=controlling_terminal if ctrl_c_when is not None or own_terminal else None,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)  # the child holds its copy; EOF arrives when it exits
    chunks: list[bytes] = []
    interrupted = False
    screen = pyte.HistoryScreen(cols, rows, history=10_000)
    stream = pyte.ByteStream(screen)
    waiting = dict(moments or {})
    seen: dict[str, list[str]] = {}
    deadline = time.monotonic() + timeout
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                process.kill()
                process.wait()
                tail = b"".join(chunks)[-2000:].decode("utf-8", "replace")
                raise TimeoutError(f"{argv!r} did not exit within {timeout} s; last output:\n{tail}")
            ready, _, _ = select.select([master], [], [], min(left, 0.1))
            if ready:
                try:
                    data = os.read(master, 65536)
                except OSError:  # EIO: every slave end is closed, the command is done
                    break
                if not data:
                    break
                chunks.append(data)
                if interrupt_on is not None and not interrupted and interrupt_on in b"".join(chunks):
                    process.send_signal(signal.SIGINT)
                    interrupted = True
                # One read may hold several frames (a reader that fell behind): the conditions are
                # looked at before each frame's redraw begins, so no frame goes unseen.
                pieces = data.split(_REDRAW)
                for index, piece in enumerate(pieces):
                    stream.feed(piece if index == 0 else _REDRAW + piece)
                    if not (waiting or (ctrl_c_when is not None and not interrupted)):
                        continue
                    lines = [line.rstrip() for line in screen.display]
                    text = "\n".join(lines)
                    for name, condition in list(waiting.items()):
                        if condition(text):
                            seen[name] = lines
                            del waiting[name]
                    if ctrl_c_when is not None and not interrupted and ctrl_c_when(text):
                        os.write(master, b"\x03")
                        interrupted = True
        returncode = process.wait(timeout=max(1.0, deadline - time.monotonic()))
    finally:
        with contextlib.suppress(OSError):
            os.close(master)
        if process.poll() is None:
            process.kill()
            process.wait()
    return PtyResult(b"".join(chunks), returncode, screen, interrupted, seen)
