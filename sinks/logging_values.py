"""LoggingSink: values as ``logging`` records, in the lines ``LoggingTensorHook`` logs."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable, Mapping
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from hookbus.sink_api import Schedule, Sink

if TYPE_CHECKING:
    from hookbus.sink_api import Event

__all__ = ["LoggingSink"]


class LoggingSink(Sink):
    """Logs ``keys`` on a schedule as ``logging`` records: ``tag = value, tag = value (0.120 sec)``.

    The lines of TensorFlow's ``LoggingTensorHook``: the keys in the order given, numpy's print
    options with ``suppress=True``, and, after a session's first line, the seconds since the
    previous line (``%.3f sec``); or what ``formatter({key: value})`` returns. Log handlers and
    levels are the program's (``logging.getLogger(logger)``).

    Args:
        keys: The key or keys to log, in this order.
        every_n_steps: Log every n steps (default: every 100 steps when no schedule argument is
            given; schedule arguments replace the default as a whole).
        every_n_secs: Log every t seconds (default ``None``).
        formatter: ``formatter(values) -> str``, given ``{key: value}`` (numpy values), replaces
            the line (default ``None``).
        logger: The logger's name (default ``"hookbus"``; ``LoggingTensorHook`` logs to
            ``"tensorflow"``).
        level: The records' level (default ``logging.INFO``).
        dtypes: ``{key: numpy dtype name}``: values are shown as that type (a float32 tensor's
            ``0.1234567``, not the float64 ``0.12345670163631439`` the bus carries), as the hook
            shows them. Default ``None``: as published.
        name: Name in reports (default the class name).

    Raises:
        ValueError: for no keys, a formatter that is not callable or a dtype numpy does not know.
    """

    default_schedule: ClassVar[Schedule] = Schedule(every_n_steps=100)

    def __init__(
        self,
        keys: str | Iterable[str],
        every_n_steps: int | None = None,
        every_n_secs: float | None = None,
        *,
        formatter: Callable[[dict[str, Any]], str] | None = None,
        logger: str = "hookbus",
        level: int = logging.INFO,
        dtypes: Mapping[str, str] | None = None,
        name: str | None = None,
    ) -> None:
        order = (keys,) if isinstance(keys, str) else tuple(keys) if isinstance(keys, Iterable) else None
        if not order:
            raise ValueError(f"keys must be a key or a non-empty list of keys (got {keys!r})")
        super().__init__(keys=order, every_n_steps=every_n_steps, every_n_secs=every_n_secs, name=name)
        self.order = tuple(dict.fromkeys(order))
        if formatter is not None and not callable(formatter):
            raise ValueError(f"formatter must be a function of the values, or None (got {formatter!r})")
        if not isinstance(logger, str):
            raise ValueError(f"logger must be a logger's name (got {logger!r})")
        if isinstance(level, bool) or not isinstance(level, int):
            raise ValueError(f"level must be a logging level such as logging.INFO (got {level!r})")
        self.formatter = formatter
        self.logger = logging.getLogger(logger)
        self.level = level
        try:
            self.dtypes = {k: np.dtype(v) for k, v in (dtypes or {}).items()}
        except TypeError as error:
            raise ValueError(f"dtypes must map keys to numpy dtype names (got {dtypes!r}): {error}") from None
        self._last: float | None = None

    def on_session_created(self, event: Event) -> None:
        if event.mode == "train":
            self._last = None  # a session's first line carries no interval

    def _value(self, key: str, value: Any) -> Any:
        dtype = self.dtypes.get(key)
        if dtype is None or isinstance(value, bytes):
            return value
        array = np.asarray(value, dtype=dtype)
        return array[()] if array.ndim == 0 else array

    def on_after_run(self, event: Event) -> None:
        if not all(k in event.values for k in self.order):
            return
        now = self.context.clock()
        elapsed, self._last = (None if self._last is None else now - self._last), now
        values = {k: self._value(k, event.values[k]) for k in self.order}
        with np.printoptions(suppress=True):
            if self.formatter is not None:
                self.logger.log(self.level, self.formatter(values))
                return
            # str(), as "%s" shows it: a numpy scalar's format() would show it as a Python float.
            line = ", ".join(f"{k} = {v!s}" for k, v in values.items())
            if elapsed is None:
                self.logger.log(self.level, "%s", line)
            else:
                self.logger.log(self.level, "%s (%.3f sec)", line, elapsed)
