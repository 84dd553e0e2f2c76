"""How each publisher writes its model for serving (:class:`~hookbus.sink_api.ModelExport`).

- Keras (``EventBusCallback``, ``LoopPublisher(serving=keras_model)``): ``model.save(path)``, the
  ``.keras`` file ``keras.models.load_model`` opens without the training code, as
  ``ModelCheckpoint`` leaves it.
- A ``tf.Module`` (``LoopPublisher(serving=module)``): ``tf.saved_model.save`` with the module's
  one ``tf.function`` that has an ``input_signature`` as ``serving_default``.
- A TF1 graph (``EventBusHook(serving_inputs=..., serving_outputs=...)``): a SavedModel with a
  ``serving_default`` predict signature, written from the live session. MonitoredSession
  finalizes the graph after ``begin()``, and TensorFlow's ``SavedModelBuilder`` would add a
  Saver and touch a collection when it exports the graph: the Saver is built in ``begin()``
  (:class:`GraphExport` is made there) and the graph is exported without the collection
  (``unbound_inputs_col_name=None``), so nothing is added to the finalized graph.

The directory and the atomic move into place belong to :class:`~hookbus.sinks.ExportSink`; these
write to the path they are given.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Callable, Mapping
from typing import Any

from hookbus._tf._elements import resolve
from hookbus._tf._import import require_tensorflow

__all__ = ["GraphExport", "KerasExport", "KerasWeightsExport", "ModuleExport", "check_serving", "loop_export"]

#: The signature a serving system calls when it is given no name (TF Serving's default).
SERVING_DEFAULT = "serving_default"


class KerasExport:
    """A Keras model written as one ``.keras`` file (``model.save``), optimizer included, as
    ``ModelCheckpoint`` (``save_weights_only=False``) writes it."""

    suffix = ".keras"
    kind = "a .keras file"
    ready = True  # the model lives in memory

    def __init__(self, model: Any) -> None:
        self.model = model

    def export(self, path: str) -> None:
        self.model.save(path)


class KerasWeightsExport:
    """A Keras model's weights written as one ``.weights.h5`` file (``model.save_weights``), as
    ``ModelCheckpoint(save_weights_only=True)`` writes them; ``model.load_weights`` reads them."""

    suffix = ".weights.h5"
    kind = "a .weights.h5 file"
    ready = True

    def __init__(self, model: Any) -> None:
        self.model = model

    def export(self, path: str) -> None:
        self.model.save_weights(path)


class ModuleExport:
    """A ``tf.Module`` written as a SavedModel whose ``serving_default`` is ``signature`` (one of
    its ``tf.function`` methods with an ``input_signature``)."""

    suffix = ""
    kind = "a SavedModel"
    ready = True

    def __init__(self, module: Any, signature: Any) -> None:
        self.module = module
        self.signature = signature

    def export(self, path: str) -> None:
        tf = require_tensorflow("LoopPublisher(serving=...)")
        tf.saved_model.save(self.module, path, signatures={SERVING_DEFAULT: self.signature})


def _serving_function(tf: Any, module: Any) -> Any:
    """The one ``tf.function`` of ``module`` with an ``input_signature`` (bound), found without
    calling any property; a TypeError naming what was found otherwise."""
    function_type = tf.types.experimental.PolymorphicFunction
    names = sorted(
        name
        for name in dir(module)
        if isinstance(raw := inspect.getattr_static(module, name, None), function_type)
        and raw.input_signature is not None
    )
    if len(names) != 1:
        found = f"several: {', '.join(names)}" if names else "none"
        raise TypeError(
            f"serving= a tf.Module needs exactly one tf.function with an input_signature, its serving_default "
            f"signature (got {type(module).__name__} with {found}); decorate the one to serve with "
            "@tf.function(input_signature=[tf.TensorSpec(...)])"
        )
    return getattr(module, names[0])


def loop_export(serving: Any) -> KerasExport | ModuleExport | None:
    """What ``LoopPublisher(serving=...)`` offers: a Keras model's ``.keras`` file, a ``tf.Module``'s
    SavedModel, or nothing (``None``).

    Raises:
        TypeError: for anything else, or a module without exactly one signature to serve.
    """
    if serving is None:
        return None
    keras = sys.modules.get("keras")  # a Keras model exists only once Keras is imported: never import it here
    if keras is not None and isinstance(serving, keras.Model):
        return KerasExport(serving)
    tf = require_tensorflow("LoopPublisher(serving=...)")
    if isinstance(serving, tf.Module):
        return ModuleExport(serving, _serving_function(tf, serving))
    raise TypeError(
        f"serving must be a Keras model (written as a .keras file) or a tf.Module with one tf.function "
        f"with an input_signature (written as a SavedModel), or None (got {serving!r})"
    )


def check_serving(
    inputs: Mapping[str, Any] | None, outputs: Mapping[str, Any] | None, *, mode: str
) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``EventBusHook``'s ``serving_inputs`` and ``serving_outputs`` (both, or neither: ``None``),
    checked before any graph: mappings of a non-empty name to a tensor or a tensor name; the
    tensors themselves are resolved in ``begin()`` (:class:`GraphExport`).

    Raises:
        ValueError: one given without the other, or given in eval mode.
        TypeError: not a mapping of names to tensors or tensor names, or empty.
    """
    if inputs is None and outputs is None:
        return None
    if inputs is None or outputs is None:
        names = ("serving_inputs", "serving_outputs")
        given, missing = names if outputs is None else names[::-1]
        raise ValueError(
            f"{given} is given without {missing}: the serving signature needs both (name to input tensor, "
            "name to output tensor)"
        )
    if mode != "train":
        raise ValueError(
            f"serving_inputs and serving_outputs take mode='train' (the training graph); got mode={mode!r}"
        )
    tf = require_tensorflow("EventBusHook")
    checked = []
    for argument, value in (("serving_inputs", inputs), ("serving_outputs", outputs)):
        if not isinstance(value, Mapping) or not value:
            raise TypeError(f"{argument} must be a non-empty mapping of name to tensor or tensor name (got {value!r})")
        for name, tensor in value.items():
            if not isinstance(name, str) or not name:
                raise TypeError(f"{argument} names must be non-empty strings (got {name!r})")
            if not isinstance(tensor, str | tf.Tensor):
                raise TypeError(f"{argument}[{name!r}] must be a tensor or a tensor name like 'x:0' (got {tensor!r})")
        checked.append(dict(value))
    return checked[0], checked[1]


class _BuilderSaver:
    """What ``SavedModelBuilder`` asks of its ``saver=``: ``save`` and ``export_meta_graph``, without
    touching the finalized graph (see the module docstring)."""

    def __init__(self, graph: Any, saver: Any) -> None:
        self.graph = graph
        self.saver = saver

    def save(self, session: Any, path: str, **options: Any) -> Any:
        return self.saver.save(session, path, **options)

    def export_meta_graph(self, **options: Any) -> Any:
        tf = require_tensorflow("EventBusHook")
        return tf.compat.v1.train.export_meta_graph(
            graph=self.graph, saver_def=self.saver.saver_def, unbound_inputs_col_name=None, **options
        )


class GraphExport:
    """A TF1 graph's SavedModel: ``serving_default`` maps the ``inputs`` to the ``outputs`` tensors,
    the variables as the live session holds them. Made in ``begin()``, before the graph is
    finalized (it builds a Saver of the graph's variables).

    Args:
        graph: The training graph.
        inputs, outputs: The checked ``serving_inputs`` / ``serving_outputs`` (:func:`check_serving`).
        session: Returns the live session (``None`` between sessions: not :attr:`ready`).

    Raises:
        ValueError, TypeError: a name not in the graph (with close matches), an operation or a
            tensor of another graph.
    """

    suffix = ""
    kind = "a SavedModel"

    def __init__(
        self, graph: Any, inputs: Mapping[str, Any], outputs: Mapping[str, Any], session: Callable[[], Any]
    ) -> None:
        tf = require_tensorflow("EventBusHook")
        signature = {}
        for argument, given in (("serving_inputs", inputs), ("serving_outputs", outputs)):
            tensors = {name: resolve(graph, f"{argument}[{name!r}]", value) for name, value in given.items()}
            for name, tensor in tensors.items():
                if not isinstance(tensor, tf.Tensor):
                    raise TypeError(f"{argument}[{name!r}] must be a tensor (got {tensor!r})")
            signature[argument] = tensors
        self.graph = graph
        self.signature = tf.compat.v1.saved_model.signature_def_utils.predict_signature_def(
            signature["serving_inputs"], signature["serving_outputs"]
        )
        self._saver = _BuilderSaver(graph, tf.compat.v1.train.Saver(sharded=True, allow_empty=True))
        self._session = session

    @property
    def ready(self) -> bool:
        return self._session() is not None

    def export(self, path: str) -> None:
        session = self._session()
        if session is None:
            raise RuntimeError("no live session to export the graph's model from: the training session has ended")
        tf = require_tensorflow("EventBusHook")
        builder = tf.compat.v1.saved_model.Builder(path)
        builder.add_meta_graph_and_variables(
            session,
            [tf.saved_model.SERVING],
            signature_def_map={SERVING_DEFAULT: self.signature},
            clear_devices=True,
            strip_default_attrs=True,
            saver=self._saver,
        )
        builder.save()
