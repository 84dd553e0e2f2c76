"""Keys typed at the watcher's terminal, read without ever holding up a frame.

While a :class:`Keys` reader is open, the terminal behind it is in cbreak mode: each key arrives as
it is typed, nothing typed is echoed (an echoed line break would push rich's live frame down a
line), and Ctrl-C still interrupts. Closing it gives the terminal back the mode it had, and the
reader is closed by a ``with`` block's exit: on a normal end, on Ctrl-C and on any exception alike.
:meth:`Keys.read` waits with ``select`` at most as long as the frame's interval, so the table is
redrawn on time whether or not a key comes.

Nothing changes (and no key is ever read) when the stream is not a terminal, or when this process
is a background job of the terminal (changing its modes would stop the job with SIGTTOU).
"""

from __future__ import annotations

import codecs
import contextlib
import os
import select
import time
from types import TracebackType
from typing import IO, Any

try:
    import termios
except ImportError:  # not a POSIX system: no terminal modes, no keys
    termios = None  # type: ignore[assignment]

__all__ = [
    "BACKSPACE",
    "DOWN",
    "END",
    "ENTER",
    "ESCAPE",
    "HOME",
    "LEFT",
    "PAGE_DOWN",
    "PAGE_UP",
    "RIGHT",
    "UP",
    "Keys",
    "decode",
]

UP, DOWN, LEFT, RIGHT = "up", "down", "left", "right"
PAGE_UP, PAGE_DOWN, HOME, END = "page up", "page down", "home", "end"
ENTER, ESCAPE, BACKSPACE = "enter", "escape", "backspace"

# What terminals send for the named keys (xterm's, in both its cursor-key modes, and the VT220's).
_SEQUENCES = {
    "\x1b[A": UP,
    "\x1bOA": UP,
    "\x1b[B": DOWN,
    "\x1bOB": DOWN,
    "\x1b[C": RIGHT,
    "\x1bOC": RIGHT,
    "\x1b[D": LEFT,
    "\x1bOD": LEFT,
    "\x1b[5~": PAGE_UP,
    "\x1b[6~": PAGE_DOWN,
    "\x1b[H": HOME,
    "\x1bOH": HOME,
    "\x1b[1~": HOME,
    "\x1b[7~": HOME,
    "\x1b[F": END,
    "\x1bOF": END,
    "\x1b[4~": END,
    "\x1b[8~": END,
}


def decode(text: str) -> list[str]:
    """The keys in ``text`` as read from a terminal: a printable key as itself, the others by name
    (:data:`UP`, :data:`ENTER`, ...); an escape sequence this does not name is dropped whole."""
    keys: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\x1b":
            named = next((seq for seq in _SEQUENCES if text.startswith(seq, index)), None)
            if named is not None:
                keys.append(_SEQUENCES[named])
                index += len(named)
                continue
            if text[index + 1 : index + 2] in ("[", "O"):  # another key's sequence: up to its final byte
                end = index + 2
                while end < len(text) and not ("@" <= text[end] <= "~"):
                    end += 1
                index = end + 1
                continue
            keys.append(ESCAPE)
        elif char in "\r\n":
            keys.append(ENTER)
        elif char in "\x7f\x08":
            keys.append(BACKSPACE)
        elif char.isprintable():
            keys.append(char)
        index += 1
    return keys


class Keys:
    """The keys typed at the terminal behind ``stream`` (a context manager: cbreak mode while open).

    Args:
        stream: Where keys come from (``sys.stdin``); ``None`` or a stream that is not a terminal
            reads none.
    """

    def __init__(self, stream: IO[str] | None) -> None:
        self._stream = stream
        self._fd: int | None = None
        self._saved: list[Any] | None = None
        self._hung_up = False
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")

    @property
    def active(self) -> bool:
        """Whether keys are being read (a terminal of this process's, in cbreak mode)."""
        return self._saved is not None

    def open(self) -> None:
        """Put the terminal in cbreak mode (see the module's docstring for when nothing changes)."""
        if termios is None or self._stream is None or self._saved is not None:
            return
        try:
            fd = self._stream.fileno()
            if not os.isatty(fd):
                return
            with contextlib.suppress(OSError):  # ENOTTY: not this process's controlling terminal
                if os.tcgetpgrp(fd) != os.getpgrp():  # a background job: the terminal is not ours
                    return
            saved = termios.tcgetattr(fd)
            cbreak = list(saved)
            cbreak[3] &= ~(termios.ICANON | termios.ECHO | getattr(termios, "ECHOCTL", 0))
            cbreak[6] = list(saved[6])
            cbreak[6][termios.VMIN] = 1
            cbreak[6][termios.VTIME] = 0
            termios.tcsetattr(fd, termios.TCSANOW, cbreak)
        except (AttributeError, OSError, ValueError, termios.error):  # no usable terminal: read no keys
            return
        self._fd, self._saved = fd, saved

    def close(self) -> None:
        """Give the terminal back the mode it had when opened. Idempotent."""
        fd, saved = self._fd, self._saved
        self._fd = self._saved = None
        if fd is not None and saved is not None and termios is not None:
            with contextlib.suppress(OSError, termios.error):  # the terminal went away: nothing to restore
                termios.tcsetattr(fd, termios.TCSANOW, saved)

    def __enter__(self) -> Keys:
        self.open()
        return self

    def __exit__(
        self, kind: type[BaseException] | None, error: BaseException | None, traceback: TracebackType | None
    ) -> None:
        self.close()

    def read(self, timeout: float) -> list[str]:
        """The keys typed, waiting at most ``timeout`` seconds for the first (none: an empty list,
        after ``timeout`` seconds; without a terminal, always that)."""
        fd = self._fd
        if fd is None or self._hung_up:
            time.sleep(timeout)
            return []
        ready, _, _ = select.select([fd], [], [], timeout)
        if not ready:
            return []
        try:
            data = os.read(fd, 4096)
        except OSError:  # the terminal hung up: no more keys, the frames go on
            data = b""
        if not data:
            self._hung_up = True
            return []
        return decode(self._decoder.decode(data))
