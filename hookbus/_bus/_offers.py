"""What a training publisher offers the sinks of its bus: its model's checkpoints, weights, graph, variables, export."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hookbus._checkpoints._backend import CheckpointBackend
    from hookbus._checkpoints._store import CheckpointStore
    from hookbus._contract._context import EpochProgress
    from hookbus._contract._learning_rate import LearningRate
    from hookbus._contract._model import ModelExport
    from hookbus._contract._weights import WeightsBackend

__all__ = ["Offers"]


@dataclass
class Offers:
    """Set by the publishers' port (``PublisherCore.offer_*``), read by the sinks' contexts.

    Attributes:
        checkpoints: How the model is saved and restored, and the store that keeps its files
            (``None`` before a train publisher began).
        weights: How the live model's weights are taken and put back in memory, where one is held.
        graph_def: Returns the training graph serialized (a ``GraphDef``), where there is one.
        model_config: Returns the Keras model's JSON configuration, where there is one.
        directions: Which way a metric goes (``"min"``, ``"max"``, ``None``) by bus key, where
            the publisher knows (the Keras callback's compiled metrics).
        ends_epochs: Whether the training publisher ends epochs (the Keras callback under fit).
        progress: Returns the epoch the training publisher is in (the Keras callback), or ``None``.
        learning_rate: The training publisher's learning rate, where it offers one.
        training_params: Returns the training's own parameters (Keras ``fit``'s and its
            optimizer's), where the publisher knows them.
        variables: Returns the model's variables by name (NumPy arrays), where the publisher has them.
        model_summary: Returns the model's summary as text (Keras's ``model.summary()``), where there is one.
        export: Writes the model for serving, where the publisher can.
    """

    checkpoints: tuple[CheckpointBackend, CheckpointStore] | None = None
    weights: WeightsBackend | None = None
    graph_def: Callable[[], bytes | None] | None = None
    model_config: Callable[[], str | None] | None = None
    directions: Callable[[str], str | None] | None = None
    ends_epochs: bool = False
    progress: Callable[[], EpochProgress | None] | None = None
    learning_rate: LearningRate | None = None
    training_params: Callable[[], Mapping[str, Any]] | None = None
    variables: Callable[[], Mapping[str, Any]] | None = None
    model_summary: Callable[[], str | None] | None = None
    export: ModelExport | None = None
