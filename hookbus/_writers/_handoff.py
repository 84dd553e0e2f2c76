"""The bounded queue between a sink's callers and its background writer thread.

What :class:`queue.Queue` does for a writer (bounded, blocking when full, first in first out,
nothing lost), at less cost to the caller: a put takes one uncontended lock and appends to a
deque, and wakes the writer only when the writer said it sleeps on an empty queue (with the
writer's batching, about once a batch); ``queue.Queue`` takes its lock and notifies a condition
on every put. One thread takes entries out (the writer's); any number may put.

The wake-ups rely on the GIL's ordering of plain reads and writes: the writer announces that it
sleeps, then looks at the deque again; a put appends, then looks at the announcement. Either the
writer sees the entry or the put sees the announcement and sets the event. The put that sets the
event withdraws the announcement first, so the puts after it (until the writer runs, which on a
busy machine can be a whole switch interval of the GIL) do not set it again: each set costs the
training thread as much as the put itself. The writer announces again before every wait, so a
wake-up left over from before (an event set late) only makes it look at the deque once more.
"""

from __future__ import annotations

import queue
import threading
import time
from collections import deque
from typing import Generic, TypeVar

__all__ = ["Handoff"]

E = TypeVar("E")


class Handoff(Generic[E]):
    """A bounded FIFO of ``maxsize`` entries: many putters, one taker.

    Raises :class:`queue.Full` and :class:`queue.Empty` as :class:`queue.Queue` does.
    """

    def __init__(self, maxsize: int) -> None:
        self.maxsize = maxsize
        self._entries: deque[E] = deque()
        self._lock = threading.Lock()  # putters only: the bound is exact with several of them
        self._taker_sleeps = False
        self._filled = threading.Event()
        self._putter_sleeps = False
        self._room = threading.Event()

    def empty(self) -> bool:
        """Whether nothing waits (exact on the taker's thread)."""
        return not self._entries

    def put_nowait(self, entry: E) -> None:
        """Append ``entry``, or raise :class:`queue.Full`."""
        with self._lock:
            if len(self._entries) >= self.maxsize:
                raise queue.Full
            self._entries.append(entry)
        if self._taker_sleeps:
            self._taker_sleeps = False  # one wake-up is enough: the later puts skip the set
            self._filled.set()

    def put(self, entry: E, timeout: float) -> None:
        """Append ``entry``, waiting at most ``timeout`` seconds for room; else :class:`queue.Full`."""
        end = time.monotonic() + timeout
        while True:
            try:
                self.put_nowait(entry)
                return
            except queue.Full:
                pass
            self._room.clear()
            self._putter_sleeps = True
            try:
                if len(self._entries) >= self.maxsize:  # looked at after the announcement
                    remaining = end - time.monotonic()
                    waited = remaining > 0 and self._room.wait(remaining)
                    if not waited and len(self._entries) >= self.maxsize:
                        raise queue.Full
            finally:
                self._putter_sleeps = False

    def get_nowait(self) -> E:
        """The oldest entry, or raise :class:`queue.Empty` (the taker's thread only)."""
        try:
            entry = self._entries.popleft()
        except IndexError:
            raise queue.Empty from None
        if self._putter_sleeps:
            self._room.set()
        return entry

    def get(self, timeout: float | None = None) -> E:
        """The oldest entry, waiting at most ``timeout`` seconds (``None``: as long as it takes);
        else :class:`queue.Empty` (the taker's thread only)."""
        entries = self._entries
        if not entries:
            end = None if timeout is None else time.monotonic() + timeout
            try:
                while True:
                    # Announced before each wait (a put withdraws it when it sets the event), and
                    # the deque looked at after the announcement; a stale wake-up loops.
                    self._filled.clear()
                    self._taker_sleeps = True
                    if entries:
                        break
                    remaining = None if end is None else end - time.monotonic()
                    if remaining is not None and remaining <= 0:
                        raise queue.Empty
                    self._filled.wait(remaining)
            finally:
                self._taker_sleeps = False
        return self.get_nowait()
