"""``CheckpointSaverListener``\\ s around a :class:`~hookbus.sinks.CheckpointSink`'s saves, with the hook's session.

TensorFlow's ``CheckpointSaverHook`` calls its listeners' ``begin()`` as the graph is built,
``before_save(session, step)`` and ``after_save(session, step)`` around each checkpoint (an
``after_save`` that returns ``True`` stops training) and ``end(session, step)`` after the last
save. Here the saves are the checkpoint barrier's: ``before_save`` on ``checkpoint_saving``
(before the writers flush for it), ``after_save`` on ``checkpoint_saved`` (the pointer already
names it, as after the hook's ``Saver.save``: ``tf.train.latest_checkpoint`` returns it).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

from hookbus._contract._schedule import Schedule
from hookbus._contract._sink import PRIORITY_DEFAULT, Sink
from hookbus._tf._import import require_tensorflow

if TYPE_CHECKING:
    from hookbus._contract._events import CheckpointSaved, Event

__all__ = ["CheckpointListeners", "check_listeners", "write_graph_def"]

logger = logging.getLogger("hookbus")

_METHODS = ("begin", "before_save", "after_save", "end")


def check_listeners(listeners: object) -> tuple[Any, ...]:
    """``listeners`` as a tuple, each checked to have the four ``CheckpointSaverListener`` methods.

    Raises:
        TypeError: naming the first listener that lacks one, and the method.
    """
    if listeners is None:
        return ()
    if isinstance(listeners, str | bytes) or not isinstance(listeners, Iterable):
        raise TypeError(f"checkpoint_listeners must be a list of CheckpointSaverListener (got {listeners!r})")
    found = tuple(listeners)
    for listener in found:
        missing = [m for m in _METHODS if not callable(getattr(listener, m, None))]
        if missing:
            raise TypeError(
                f"checkpoint_listeners: {listener!r} has no {missing[0]}() method; a "
                "tf.compat.v1.train.CheckpointSaverListener has begin, before_save, after_save and end"
            )
    return found


class CheckpointListeners(Sink):
    """Calls ``CheckpointSaverListener``\\ s as ``CheckpointSaverHook`` calls them, around each save.

    Args:
        listeners: The listeners, called in order.
        session: Returns the training session while one is open (the hook's), else ``None``.
        request_stop: Asks the bus to stop (an ``after_save`` returned ``True``).
    """

    priority = PRIORITY_DEFAULT + 1  # after the checkpoint sink's final save at the end
    on_error = "raise"  # a listener's error is the training's, as under the hook

    def __init__(
        self,
        listeners: Iterable[Any],
        session: Callable[[], Any],
        request_stop: Callable[[str], None],
    ) -> None:
        super().__init__(name="CheckpointSaverListeners")
        self.schedule = Schedule()  # never due on a step: it follows the saves
        self.listeners = check_listeners(listeners)
        self._session = session
        self._request_stop = request_stop

    def on_begin(self, event: Event) -> None:
        if event.mode != "train":
            return
        for listener in self.listeners:
            listener.begin()

    def on_checkpoint_saving(self, event: CheckpointSaved) -> None:
        logger.info("Calling checkpoint listeners before saving checkpoint %d...", event.step)
        for listener in self.listeners:
            listener.before_save(self._session(), event.step)

    def on_checkpoint_saved(self, event: CheckpointSaved) -> None:
        logger.info("Calling checkpoint listeners after saving checkpoint %d...", event.step)
        for listener in self.listeners:
            if listener.after_save(self._session(), event.step):
                self._request_stop(f"a CheckpointSaverListener requested that training be stopped: {listener!r}")

    def on_end(self, event: Event) -> None:
        if event.mode != "train":
            return
        for listener in self.listeners:
            listener.end(self._session(), event.step)


def write_graph_def(directory: str) -> None:
    """Write the default graph as ``directory/graph.pbtxt``, as ``CheckpointSaverHook(save_graph_def=True)``
    writes it when a session is created (text, with shapes)."""
    tf = require_tensorflow("graph.pbtxt")
    os.makedirs(directory, exist_ok=True)
    graph_def = tf.compat.v1.get_default_graph().as_graph_def(add_shapes=True)
    tf.io.write_graph(graph_def, directory, "graph.pbtxt")
