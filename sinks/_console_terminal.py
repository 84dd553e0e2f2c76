"""The console dashboard's terminal: live or plain, and logging routed through the console.

Two facts decide the design here: rich takes a pipe for a terminal under ``FORCE_COLOR``, and
logging handlers made before a ``Live`` display started hold the real stdout/stderr, past its
redirect of ``print``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import IO, Any

from rich.console import Console
from rich.file_proxy import FileProxy

__all__ = ["restore_logging", "route_logging", "wants_live"]

Routed = list[tuple["logging.StreamHandler[Any]", IO[str]]]


def wants_live(console: Console, environ: Mapping[str, str] = os.environ) -> bool:
    """Whether ``console`` should get a live dashboard rather than plain lines.

    Plain when ``TTY_INTERACTIVE=0``, when rich finds no interactive terminal, and when the
    console writes to a real OS stream that is not a tty (``FORCE_COLOR`` makes rich take a
    pipe for a terminal). In-memory files (no ``fileno``) follow rich's judgement.
    """
    if environ.get("TTY_INTERACTIVE") == "0":
        return False
    if not (console.is_terminal and console.is_interactive) or console.is_dumb_terminal:
        return False
    try:
        fd = console.file.fileno()
    except (AttributeError, OSError, ValueError):  # io.StringIO and friends: no OS stream
        return True
    return os.isatty(fd)


def route_logging(console: Console, streams: set[int]) -> Routed:
    """Point every logging handler that writes to one of ``streams`` (by id) at ``console``.

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
                    candidate.setStream(FileProxy(console, stream))
                    routed.append((candidate, stream))
    return routed


def restore_logging(routed: Routed) -> None:
    """Give every routed handler its own stream back (flushing what it buffered)."""
    for handler, stream in reversed(routed):
        handler.setStream(stream)
