"""The model seam: one framework-free view of the training publisher's model, for the sinks that
show, ship, restore or steer by it.

A publisher offers one :class:`ModelView` as it begins and withdraws it as it ends
(``PublisherCore.offer_model``); a sink reads it as ``context.model()``. The base class answers
"not offered" for every member (``None``, or ``False`` for :meth:`ModelView.ends_epochs`); each
publisher's view, beside the publisher, overrides what its framework can answer: the Keras
callback's (model and ``fit``'s params), the TF1 hook's (graph, session and serving signature),
the loop publisher's (weights and serving). A new thing a sink may learn about the model is one
member here, answered where a publisher knows it.

The protocols a view hands out: :class:`WeightsBackend` (take and put back the weights in memory)
and :class:`ModelExport` (write the model for serving). TensorFlow's implementations live under
``hookbus/_tf/``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol, runtime_checkable

__all__ = ["NOT_OFFERED", "EpochProgress", "ModelExport", "ModelView", "WeightsBackend"]


@runtime_checkable
class WeightsBackend(Protocol):
    """Takes and puts back a copy of a live model's weights (:meth:`ModelView.weights`): what
    ``EarlyStoppingSink(restore_best=True)`` restores, as Keras's ``restore_best_weights`` does.

    Weights only: the optimizer's slots and the step stay as they are, so restoring never moves
    training, or a checkpoint, back.
    """

    def snapshot(self) -> object:
        """A copy of the weights now, independent of later training steps."""
        ...

    def restore(self, snapshot: object) -> None:
        """Put the weights of ``snapshot`` back into the live model."""
        ...

    def read(self, prefix: str) -> object | None:
        """The weights the checkpoint ``prefix`` holds, as a snapshot, leaving the live model as
        it is; ``None`` where they cannot be read from it."""
        ...


@runtime_checkable
class ModelExport(Protocol):
    """Writes the live model for serving (:meth:`ModelView.export`, for
    :class:`~hookbus.sinks.ExportSink`).

    Attributes:
        suffix: How the written path ends: ``".keras"`` (one file ``keras.models.load_model``
            opens) or ``""`` (a SavedModel directory with a ``serving_default`` signature).
        kind: The format in words, for messages (``"a .keras file"``, ``"a SavedModel"``).
    """

    suffix: str
    kind: str

    @property
    def ready(self) -> bool:
        """Whether the model can be written now (the TF1 hook's: while its session is open)."""
        ...

    def export(self, path: str) -> None:
        """Write the model as it is now to ``path``, which does not exist yet (the caller moves it
        into place): never changes the model or training."""
        ...


@dataclass(frozen=True)
class EpochProgress:
    """Where a publisher that trains in epochs is (Keras ``fit``), for dashboards.

    Attributes:
        epoch: The epoch being trained, counted from 1 (Keras's progress bar: ``Epoch 3/12``).
        epochs: The epochs the training runs to (``fit(epochs=...)``).
        steps_per_epoch: Training steps per epoch; ``None`` when the input's length is unknown.
        epoch_start: The step this epoch began at; ``None``: ``(epoch - 1) × steps_per_epoch``, a
            ``fit`` that began at step 0 with its first epoch. A second ``fit`` of a model in memory
            begins where the first left ``iterations``, one given ``initial_epoch`` at step 0.
    """

    epoch: int
    epochs: int
    steps_per_epoch: int | None
    epoch_start: int | None = None

    @property
    def total_steps(self) -> int | None:
        """The step training ends at, the epoch's start plus its and the later epochs' steps
        (``epochs × steps_per_epoch`` for a ``fit`` from step 0); ``None`` when not known."""
        per_epoch = self.steps_per_epoch
        if per_epoch is None:
            return None
        start = (self.epoch - 1) * per_epoch if self.epoch_start is None else self.epoch_start
        return start + (self.epochs - self.epoch + 1) * per_epoch


class ModelView:
    """What the training publisher knows of its model, framework-free; this base answers "not
    offered" for every member (``None``; ``False`` for :meth:`ends_epochs`).

    A sink reads the view its bus's training publisher offers as ``context.model()`` (this base
    where none offers one: before a publisher began, after it ended, or a publisher without a
    model); it asks a member when it needs the answer, since the answers follow the live model.
    A publisher subclasses it beside itself and overrides what it can answer, with one rule: a
    member that needs a live session or model answers "not offered" once it is gone.
    """

    def weights(self) -> WeightsBackend | None:
        """How to take and put back the live model's weights in memory (``snapshot()`` /
        ``restore(snapshot)``): what ``EarlyStoppingSink(restore_best=True)`` restores."""
        return None

    def export(self) -> ModelExport | None:
        """How to write the live model for serving (:class:`~hookbus.sinks.ExportSink`)."""
        return None

    def weights_export(self) -> ModelExport | None:
        """How to write the live model's weights alone (Keras's ``.weights.h5``, what
        ``ModelCheckpoint(save_weights_only=True)`` writes): ``ExportSink(weights_only=True)``."""
        return None

    def variables(self) -> Mapping[str, Any] | None:
        """The model's variables now, name to NumPy array (Keras's weight paths under ``fit``, the
        graph's trainable variables under the TF1 hook, a loop's ``weights=``): TensorBoard's
        histograms. Reads them (a device-to-host copy): ask only when writing."""
        return None

    def graph_def(self) -> bytes | None:
        """The training graph as a serialized ``GraphDef`` (the TF1 hook): what TensorBoard's graph
        tab shows."""
        return None

    def config(self) -> str | None:
        """The model's JSON configuration, as Keras's ``TensorBoard(write_graph=True)`` writes it
        for the graph tab's conceptual graph (Sequential and functional Keras models)."""
        return None

    def summary(self) -> str | None:
        """The model's summary as text (Keras's ``model.summary()``): what MLflow's Keras callback
        logs as ``model_summary.txt``."""
        return None

    def training_params(self) -> Mapping[str, Any] | None:
        """The training's own parameters by name (under Keras ``fit``: ``epochs``,
        ``steps_per_epoch`` and the optimizer's configuration as ``optimizer_<name>``, what MLflow's
        Keras callback logs), for trackers."""
        return None

    def direction(self, key: str) -> str | None:
        """Which way the metric behind bus key ``key`` goes, ``"min"`` or ``"max"``, where the model
        declares it (a Keras compiled metric's own direction): monitors' ``mode="auto"`` asks it
        first."""
        return None

    def ends_epochs(self) -> bool:
        """Whether the training publisher ends epochs (Keras ``fit``), so that sinks' defaults
        follow Keras's (``CheckpointSink`` saves at each epoch end)."""
        return False

    def progress(self) -> EpochProgress | None:
        """The :class:`EpochProgress` while the publisher trains in epochs (Keras ``fit``, from the
        first epoch's start to its end), for dashboards."""
        return None


#: The view a bus gives while no publisher offers one: every member answers "not offered".
NOT_OFFERED = ModelView()
