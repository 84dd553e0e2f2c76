"""TensorFlow's learning-rate backends: a TF1 graph's rate, a Keras optimizer's, a ``tf.Variable``.

- :class:`GraphRate` (``EventBusHook(learning_rate=...)``): a rate *variable* is set with an
  assign op built in ``begin``. A rate *tensor* (a schedule such as ``exponential_decay``) cannot
  be set, and the train op, built before ``begin``, already consumes it; so in ``begin`` hookbus
  builds ``rate × multiplier`` (a hookbus variable, 1.0 at first) and moves every consumer of the
  rate tensor onto that product (``Operation._update_input``, what TensorFlow's own graph editor
  did), before the graph is finalized. The published ``learning_rate`` is the product: the rate
  each step trained with. The multiplier is kept out of checkpoints (a rate sink's state holds it).
- :class:`OptimizerRate` (``EventBusCallback``, ``LoopPublisher(optimizer=...)``): a Keras
  optimizer's ``learning_rate``; with a ``LearningRateSchedule``, the schedule times a multiplier
  (while training runs, the optimizer's reading of its rate is multiplied; its schedule stays the
  user's object, so what Keras saves meanwhile names it), instead of Keras's ``TypeError`` on
  setting a scheduled rate.
- :class:`VariableRate` (``LoopPublisher(learning_rate=...)``): a ``tf.Variable`` the loop's
  optimizer reads.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from hookbus._tf._elements import resolve
from hookbus._tf._import import require_keras, require_tensorflow

if TYPE_CHECKING:
    from hookbus._contract._cluster import Task
    from hookbus._contract._learning_rate import LearningRate

__all__ = ["GraphRate", "HookRate", "OptimizerRate", "VariableRate", "check_rate_argument"]


def check_rate_argument(value: Any) -> Any:
    """Validate ``EventBusHook(learning_rate=...)``: a variable, a tensor or a tensor's name."""
    tf = require_tensorflow("EventBusHook")
    if value is not None and not isinstance(value, str | tf.Tensor | tf.Variable):
        raise TypeError(
            f"learning_rate must be the rate variable, the rate tensor the train op uses, or its name (got {value!r})"
        )
    return value


class GraphRate:
    """The rate of a TF1 graph (see the module): built in ``begin``, used through the hook's session."""

    def __init__(self, argument: Any) -> None:
        self._argument = argument
        self._graph: Any = None
        self.scheduled = False
        self.element: Any = None  # what the due steps fetch as ``learning_rate``
        self._variable: Any = None  # the rate variable, or hookbus's multiplier
        self._ops: dict[str, Any] = {}
        self._session: Any = None

    def build(self, tf: Any, graph: Any, device: str | None, global_step: Any = None) -> Any:
        """Make the element to fetch and the ops to set it (before the graph is finalized); the element.

        ``device``: where hookbus's multiplier lives (the global step's: the parameter server).
        ``global_step``: in parameter-server training, read right after each assign (the step
        the change took effect at, which the other workers move meanwhile); else ``None``.

        Raises:
            ValueError: for a rate tensor no operation of the graph uses.
        """
        if self._graph is graph:
            return self.element  # a train/evaluate loop begins again on the same, finalized graph
        resolved = resolve(graph, "learning_rate", self._argument)
        variable = _variable_of(tf, graph, resolved)
        with graph.as_default(), tf.name_scope("hookbus_learning_rate"):
            if variable is not None:
                self.scheduled, self.element, self._variable = False, variable, variable
            else:
                rate = resolved if isinstance(resolved, tf.Tensor) else None
                if rate is None or rate.dtype.base_dtype not in (tf.float16, tf.bfloat16, tf.float32, tf.float64):
                    name = getattr(resolved, "name", resolved)
                    raise ValueError(f"learning_rate {name!r} must be a float tensor or a variable")
                if rate.op.type in ("Placeholder", "PlaceholderWithDefault"):
                    raise ValueError(
                        f"learning_rate {rate.name!r} is fed (a placeholder): hookbus reads and sets the rate "
                        "between steps, without your feed; pass a rate variable (tf.compat.v1.Variable) instead"
                    )
                consumers = list(rate.consumers())
                if not consumers:
                    raise ValueError(
                        f"learning_rate {rate.name!r} is used by no operation of the graph; pass the rate "
                        "tensor (or variable) the optimizer was built with"
                    )
                with graph.device(device or ""):
                    self._variable = tf.compat.v1.Variable(
                        1.0, dtype=rate.dtype.base_dtype, trainable=False, collections=[], name="multiplier"
                    )
                self.element = tf.multiply(rate, self._variable.read_value(), name="scaled")
                for op in consumers:
                    for index, tensor in enumerate(op.inputs):
                        if tensor is rate:
                            op._update_input(index, self.element)  # the train op trains with the product
                self.scheduled = True
            value = tf.compat.v1.placeholder(self._variable.dtype.base_dtype, shape=(), name="value")
            assign = self._variable.assign(value, read_value=False)
            self._ops = {"value": value, "assign": assign}
            if global_step is not None:
                with tf.control_dependencies([assign]):
                    self._ops["assign"] = [assign, tf.identity(global_step.read_value(), name="applied_at")]
            if self.scheduled:  # hookbus's own variable: made with each session
                ready = tf.compat.v1.is_variable_initialized(self._variable)
                self._ops.update(ready=ready, init=self._variable.initializer)
        self._graph = graph
        return self.element

    def attach_session(self, session: Any, *, multiplier: float, chief: bool) -> None:
        """A session exists: the multiplier is made (a new session starts from 1.0 on one machine;
        on the parameter server the chief sets it, the others initialise it if nobody did)."""
        self._session = session
        if session is not None and self.scheduled:
            if not session.run(self._ops["ready"]):
                session.run(self._ops["init"])
            if chief:
                self._assign(multiplier)

    def _assign(self, value: float) -> int | None:
        done = self._session.run(self._ops["assign"], feed_dict={self._ops["value"]: value})
        return int(done[1]) if isinstance(done, list) else None

    def read(self) -> float:
        return float(self._session.run(self.element))

    def set_rate(self, rate: float) -> int | None:
        return self._assign(rate)

    def set_multiplier(self, multiplier: float) -> int | None:
        return self._assign(multiplier)


class HookRate:
    """A TF1 hook's rate across its sessions: its :class:`GraphRate` and the
    :class:`~hookbus.sink_api.LearningRate` the sinks read and steer it through.

    Args:
        graph_rate: The rate's backend.
        task: The hook's task in parameter-server training (``None``: one machine): the
            multiplier then lives on the parameter server, and only the chief sets the rate.
    """

    def __init__(self, graph_rate: GraphRate, task: Task | None) -> None:
        self._graph_rate, self._task = graph_rate, task
        self._rate: LearningRate | None = None

    def begin(self, tf: Any, graph: Any, global_step: Any, offer: Callable[..., LearningRate | None]) -> Any:
        """Build the rate in ``graph`` and offer it (``offer``: the core's ``offer_learning_rate``);
        the element the due steps fetch as ``learning_rate``."""
        task = self._task
        device = getattr(global_step, "device", None) if task is not None else None
        shared = global_step if task is not None else None  # others move it meanwhile
        element = self._graph_rate.build(tf, graph, device, shared)
        rate = self._rate = offer(self._graph_rate, publisher="EventBusHook")
        if rate is not None and task is not None and not task.is_chief:
            rate.drop_requests()  # one rate variable on the parameter server: the chief sets it
        return element

    def attach_session(self, session: Any) -> None:
        """A session exists: the multiplier in effect is put in it (``None``: the session ends)."""
        if session is None:
            self._graph_rate.attach_session(None, multiplier=1.0, chief=False)
            return
        chief = self._task is None or bool(self._task.is_chief)
        multiplier = self._rate.multiplier if self._rate is not None else 1.0
        self._graph_rate.attach_session(session, multiplier=multiplier, chief=chief)


def _variable_of(tf: Any, graph: Any, element: Any) -> Any:
    """The variable ``element`` is (a variable, or a variable's handle or value named), else ``None``."""
    if isinstance(element, tf.Variable):
        return element
    for variable in graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES):
        if element is getattr(variable, "handle", None) or element is getattr(variable, "_variable", None):
            return variable
    return None


class VariableRate:
    """A ``tf.Variable`` (or Keras variable) the training reads its rate from."""

    scheduled = False

    def __init__(self, variable: Any, steps: Callable[[], int] = lambda: 0) -> None:
        if not callable(getattr(variable, "assign", None)) or not callable(getattr(variable, "numpy", None)):
            raise TypeError(f"learning_rate must be a tf.Variable the optimizer reads (got {variable!r})")
        self.variable = variable
        self._steps = steps  # the publisher's steps trained so far
        self._before: tuple[int, float] | None = None  # (steps, the rate that trained the last step) at a change

    def read(self) -> float:
        return float(self.variable.numpy())

    def used(self) -> float:
        """The rate the last step trained with (the variable is set between steps only); after a
        change, until a step trains, the rate before it."""
        if self._before is not None and self._before[0] == self._steps():
            return self._before[1]
        return self.read()

    def set_rate(self, rate: float) -> None:
        self._before = (self._steps(), self.used())
        self.variable.assign(rate)

    def set_multiplier(self, multiplier: float) -> None:
        raise ValueError("a learning-rate variable follows no schedule: set its rate")


#: One multiplier per optimizer, so that a train function traced in an earlier ``fit`` keeps reading
#: the same variable.
_multipliers: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

#: The optimizer's method every read of its rate goes through (``learning_rate``, the update step,
#: weight decay): hookbus overrides it on the optimizer itself while training runs.
_CURRENT_RATE = "_get_current_learning_rate"


class OptimizerRate:
    """A Keras optimizer's rate: its ``learning_rate`` variable, or its schedule times a multiplier.

    Call :meth:`install` as training begins (before the train function is traced) and
    :meth:`uninstall` as it ends. On a schedule, the optimizer keeps the user's schedule object
    throughout (what Keras serialises: a model saved during ``fit`` by any callback loads without
    hookbus and names the user's schedule); only the optimizer's reading of its rate is multiplied
    meanwhile, by an instance attribute that shadows the method and holds no hookbus object Keras
    would serialise.
    """

    def __init__(self, optimizer: Any) -> None:
        keras = require_keras("a Keras optimizer's learning rate")
        self.optimizer = optimizer
        current = getattr(optimizer, "_learning_rate", None)
        self._schedule = current if isinstance(current, keras.optimizers.schedules.LearningRateSchedule) else None
        self.scheduled = self._schedule is not None
        self._multiplier: Any = None  # the variable the train function reads, while installed
        self._before: tuple[int, float] | None = None  # (iterations, the rate that trained the last step) at a change

    def install(self) -> None:
        if self._schedule is None:
            return
        tf = require_tensorflow("a scheduled learning rate")
        keras = require_keras("a scheduled learning rate")
        optimizer, schedule = self.optimizer, self._schedule
        multiplier = _multipliers.get(optimizer)
        if multiplier is None:
            multiplier = tf.Variable(1.0, trainable=False, dtype=tf.float32, name="hookbus_lr_multiplier")
            _multipliers[optimizer] = multiplier
        multiplier.assign(1.0)  # a new run: the plain schedule
        iterations = optimizer.iterations

        def scaled() -> Any:
            value = schedule(iterations)
            return value * keras.ops.cast(multiplier, getattr(value, "dtype", "float32"))

        # Past Keras's (and TensorFlow's tracking) __setattr__: a plain function is no state to track.
        object.__setattr__(optimizer, _CURRENT_RATE, scaled)
        self._multiplier = multiplier

    def uninstall(self) -> None:
        if self._multiplier is not None:
            self._multiplier.assign(1.0)  # a later fit without hookbus trains the plain schedule
            if _CURRENT_RATE in vars(self.optimizer):
                object.__delattr__(self.optimizer, _CURRENT_RATE)
            self._multiplier = None

    def _value(self, iterations: int) -> float:
        assert self._schedule is not None
        rate = self._schedule(iterations)
        if self._multiplier is not None:
            rate = rate * float(self._multiplier.numpy())
        return float(rate.numpy() if hasattr(rate, "numpy") else rate)

    def read(self) -> float:
        """The rate the next step trains with."""
        if self._schedule is None:
            return float(self.optimizer.learning_rate.numpy())
        return self._value(int(self.optimizer.iterations.numpy()))

    def used(self) -> float:
        """The rate the last step trained with (a schedule's value at the iteration before it); after
        a change, until a step trains, the rate before it (a reduction at the last epoch's end did not
        train the last step)."""
        iterations = int(self.optimizer.iterations.numpy())
        if self._before is not None and self._before[0] == iterations:
            return self._before[1]
        if self._schedule is None:
            return float(self.optimizer.learning_rate.numpy())
        return self._value(max(iterations - 1, 0))

    def _changing(self) -> None:
        """Keep the rate that trained the last step, for :meth:`used` until the next step trains (a
        second change before it keeps the first's)."""
        self._before = (int(self.optimizer.iterations.numpy()), self.used())

    def set_rate(self, rate: float) -> None:
        if self._schedule is not None:
            raise ValueError("this optimizer's learning rate is a schedule: set its multiplier")
        self._changing()
        self.optimizer.learning_rate.assign(rate)

    def set_multiplier(self, multiplier: float) -> None:
        if self._multiplier is None:
            raise ValueError("this optimizer's learning rate follows no schedule (or training has not begun)")
        self._changing()
        self._multiplier.assign(multiplier)
