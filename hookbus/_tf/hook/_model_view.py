"""The TF1 hook's view of its model (:class:`~hookbus.publisher_api.ModelView`): the training
graph, the live session and, where given, the serving signature."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from hookbus._contract._model import ModelView

if TYPE_CHECKING:
    from hookbus._tf._export_tf import GraphExport

__all__ = ["GraphModelView"]


class GraphModelView(ModelView):
    """A ``MonitoredSession``'s model: its graph, read through the session while one is open.

    One rule for the session: ``session()`` returns the live session, ``None`` once it has ended
    (the hook's ``end``); every member that reads the model through it answers "not offered"
    then, and the export is not ``ready`` (it reads the same ``session``).

    Args:
        graph: The training graph (finalized once the session is created).
        session: Returns the live session, or ``None`` outside one.
        trainable: The graph's trainable variables: TensorBoard's histograms.
        export: Writes a SavedModel through the session (``serving_inputs``/``serving_outputs``
            given to the hook), else ``None``.
    """

    def __init__(
        self, graph: Any, session: Callable[[], Any], trainable: list[Any], export: GraphExport | None
    ) -> None:
        self._graph = graph
        self._session = session
        self._trainable = trainable
        self._export = export

    def graph_def(self) -> bytes:
        """The graph serialized, as ``SummarySaverHook`` and ``CheckpointSaverHook`` write it for
        TensorBoard's graph tab (serialized when a sink asks: the graph is finalized by then)."""
        serialized: bytes = self._graph.as_graph_def(add_shapes=True).SerializeToString()
        return serialized

    def variables(self) -> Mapping[str, Any] | None:
        """The trainable variables by name, read in the open session."""
        session, trainable = self._session(), self._trainable
        if session is None:
            return None
        if not trainable:
            return {}
        return {v.op.name: value for v, value in zip(trainable, session.run(trainable), strict=True)}

    def export(self) -> GraphExport | None:
        return self._export
