"""``from_hooks``: a ``basic_session_run_hooks`` list as one :class:`~hookbus.EventBusHook` and its sinks.

The migration table (docs/guides/migrating.md "From `basic_session_run_hooks`"), as code: each of TensorFlow's
hooks that
hookbus has an equivalent for becomes a sink built from the hook's own arguments (read from the
hook), writing the same files at the same paths; the tensors the hooks fetched become the
publisher's fetches. Every other hook (a subclass too: it may behave differently) passes through
unchanged, in order. An argument hookbus cannot honour fails here, before the session starts,
naming the hook, the argument and its value.

The hooks are recognised by their class (``tf.compat.v1.train.<Name>``, exactly), so this module
needs no TensorFlow import of its own.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from hookbus._bus._bus import EventBus
from hookbus._contract._sink import Sink
from hookbus._tf.hook._hook import EventBusHook
from hookbus._tf.hook._listeners import write_graph_def
from hookbus.sinks import (
    CheckpointSink,
    ConsoleSink,
    LoggingSink,
    NanGuardSink,
    StopAtStepSink,
    TensorBoardSink,
    TimelineSink,
)
from hookbus.validate import flag

__all__ = ["from_hooks"]

_TF_HOOKS = "tensorflow.python.training.basic_session_run_hooks"

#: The hooks converted, in the order their keys are named (a LoggingTensorHook's tags first).
CONVERTED = (
    "LoggingTensorHook",
    "CheckpointSaverHook",
    "SummarySaverHook",
    "StepCounterHook",
    "NanTensorHook",
    "StopAtStepHook",
    "ProfilerHook",
    "FeedFnHook",
    "FinalOpsHook",
    "GlobalStepWaiterHook",
)

#: The hooks that ride along: they write nothing, so alone they are no reason for an EventBusHook and stay hooks.
RIDERS = frozenset({"FeedFnHook", "FinalOpsHook", "GlobalStepWaiterHook"})


def _kind(hook: object) -> str | None:
    """The TensorFlow hook class ``hook`` is exactly an instance of, or ``None``."""
    kind = type(hook)
    return kind.__name__ if kind.__module__ == _TF_HOOKS and kind.__name__ in CONVERTED else None


class _Refused(ValueError):
    pass


def _refuse(hook: object, argument: str, value: object, why: str) -> _Refused:
    return _Refused(f"from_hooks: {type(hook).__name__}({argument}={value!r}) has no hookbus equivalent: {why}")


def _timer(hook: object) -> tuple[int | None, float | None]:
    """``(every_steps, every_secs)`` of a hook's ``SecondOrStepTimer``."""
    timer = getattr(hook, "_timer", None)
    return getattr(timer, "_every_steps", None), getattr(timer, "_every_secs", None)


def _same(a: object, b: object) -> bool:
    """Whether two fetch values are one graph element (the same object, or the same name)."""
    if a is b:
        return True
    name_a = a if isinstance(a, str) else getattr(a, "name", None)
    name_b = b if isinstance(b, str) else getattr(b, "name", None)
    return name_a is not None and name_a == name_b


class _Fetches:
    """The publisher's fetches, gathered from the hooks: one key per graph element."""

    def __init__(self) -> None:
        self.elements: dict[str, Any] = {}

    def key(self, preferred: str, element: object) -> str:
        for key, held in self.elements.items():
            if _same(held, element):
                return key
        key, n = preferred, 1
        while key in self.elements:
            key, n = f"{preferred}_{n}", n + 1
        self.elements[key] = element
        return key


@dataclasses.dataclass
class _Converted:
    """What the hooks became: sinks, the hook's extra arguments, and what to do once it exists."""

    sinks: list[Sink] = dataclasses.field(default_factory=list)
    listeners: list[Any] = dataclasses.field(default_factory=list)
    graph_dirs: list[str] = dataclasses.field(default_factory=list)
    meta_graph: bool = True
    feed_fn: Callable[[], Mapping[Any, Any]] | None = None
    wait_for_step: int | None = None
    final_feed_dict: Mapping[Any, Any] | None = None
    final_keys: list[str] = dataclasses.field(default_factory=list)
    finals: list[tuple[Any, Any]] = dataclasses.field(default_factory=list)  # (FinalOpsHook, its structure of keys)
    summaries: dict[str, tuple[TensorBoardSink, tuple[int | None, float | None]]] = dataclasses.field(
        default_factory=dict
    )


def _from_tf_timer(sink: Sink) -> Sink:
    """``sink`` with its schedule counted as TensorFlow's ``SecondOrStepTimer`` counts."""
    sink.schedule = dataclasses.replace(sink.schedule, steps_from_last_firing=True)
    return sink


def _logging(hook: Any, fetches: _Fetches, done: _Converted) -> None:
    if hook._log_at_end:
        raise _refuse(
            hook,
            "at_end",
            True,
            "it runs the tensors again after the last step (and the input pipeline with them); "
            "hookbus reads only EventBusHook(final_fetches=...) at the end: log on a schedule, or "
            "pass the hook through by hand",
        )
    steps, secs = _timer(hook)
    keys, dtypes = [], {}
    for tag in hook._tag_order:
        element = hook._tensors[tag]
        key = fetches.key(str(tag), element)
        keys.append(key)
        dtype = getattr(getattr(element, "dtype", None), "name", None)
        if isinstance(dtype, str):
            dtypes[key] = dtype
    sink = LoggingSink(
        keys,
        every_n_steps=steps,
        every_n_secs=secs,
        formatter=hook._formatter,
        logger="tensorflow",
        dtypes=dtypes,
        name=f"LoggingTensorHook {', '.join(keys)}",
    )
    done.sinks.append(_from_tf_timer(sink))


def _saves_everything(saver: Any) -> bool:
    """Whether ``saver`` saves every global variable of its graph (a default ``Saver``'s list)."""
    held = saver._var_list
    if held is None:
        return True
    elements = list(held.values()) if isinstance(held, Mapping) else list(held)
    if not elements:
        return True
    graph = getattr(elements[0], "graph", None)
    if graph is None:
        return False
    wanted = graph.get_collection("variables") + graph.get_collection("saveable_objects")
    return {getattr(e, "name", id(e)) for e in elements} == {getattr(e, "name", id(e)) for e in wanted}


def _checkpoints(hook: Any, done: _Converted) -> None:
    keep = 5  # the Scaffold's Saver's max_to_keep, which the hook uses without a saver
    saver = hook._saver if hook._saver is not None else getattr(hook._scaffold, "saver", None)
    if saver is not None:
        if not _saves_everything(saver):
            raise _refuse(
                hook,
                "saver",
                saver,
                "a Saver over some variables; CheckpointSink saves every global variable, as a default Saver does",
            )
        keep = saver._max_to_keep
        if not keep:
            raise _refuse(
                hook, "saver", saver, f"max_to_keep={keep!r} keeps every checkpoint; CheckpointSink keeps a number"
            )
    if any(isinstance(s, CheckpointSink) for s in done.sinks):
        raise _refuse(hook, "checkpoint_dir", hook._checkpoint_dir, "one CheckpointSaverHook per list")
    steps, secs = _timer(hook)
    sink = CheckpointSink(
        hook._checkpoint_dir,
        every_n_steps=steps,
        every_n_secs=secs,
        keep=keep,
        basename=os.path.basename(hook._save_path),
    )
    done.sinks.append(_from_tf_timer(sink))  # counted from each session's start step, as the hook counts
    done.listeners.extend(hook._listeners)
    if hook._save_graph_def:
        done.graph_dirs.append(hook._checkpoint_dir)
    done.meta_graph = bool(hook._save_graph_def)


def _output_dir(hook: Any) -> str:
    writer = hook._summary_writer
    if hook._output_dir:
        return str(hook._output_dir)
    if writer is not None and callable(getattr(writer, "get_logdir", None)):
        return str(writer.get_logdir())
    raise _refuse(hook, "output_dir", None, "no output_dir and no summary_writer with a logdir: nothing to write to")


def _summaries(hook: Any, fetches: _Fetches, done: _Converted) -> None:
    op = hook._summary_op if hook._summary_op is not None else getattr(hook._scaffold, "summary_op", None)
    if op is None:
        raise _refuse(
            hook,
            "summary_op",
            None,
            "the scaffold's summary op is made as the session starts; pass summary_op=tf.compat.v1.summary.merge_all()",
        )
    ops = list(op) if isinstance(op, Sequence) and not isinstance(op, str) else [op]
    keys = [fetches.key("summary", o) for o in ops]
    directory = _output_dir(hook)
    steps, secs = _timer(hook)
    if directory in done.summaries:
        raise _refuse(hook, "output_dir", directory, "two SummarySaverHooks writing one directory")
    sink = TensorBoardSink(
        directory,
        every_n_steps=steps,
        every_n_secs=secs,
        keys=keys,
        train_run="",
        rate_tag=None,
        throughput=False,  # StepCounterHook, if one joins, writes its rate alone
        name=f"SummarySaverHook {directory}",
    )
    done.summaries[directory] = (sink, (steps, secs))
    done.sinks.append(_from_tf_timer(sink))


def _step_counter(hook: Any, done: _Converted) -> bool:
    """Join a SummarySaverHook writing the same directory on the same timer; ``False``: pass it through."""
    try:
        directory = _output_dir(hook)
    except _Refused:
        return False
    found = done.summaries.get(directory)
    if found is None or found[1] != _timer(hook):
        return False
    found[0].rate_tag = "global_step/sec"
    return True


def _nan(hook: Any, fetches: _Fetches, done: _Converted) -> None:
    key = fetches.key("loss", hook._loss_tensor)
    error = getattr(sys.modules[type(hook).__module__], "NanLossDuringTrainingError", None)
    on_nan = "raise" if hook._fail_on_nan_loss else "stop"
    sink = NanGuardSink(key, on_nan=on_nan, name=f"NanTensorHook {key}")
    if isinstance(error, type) and issubclass(error, BaseException):
        sink.error = error  # what the hook raises
    done.sinks.append(sink)


def _stop(hook: Any, done: _Converted) -> None:
    if hook._last_step is not None:
        done.sinks.append(StopAtStepSink(last_step=hook._last_step))
    else:
        done.sinks.append(StopAtStepSink(num_steps=hook._num_steps))


@dataclasses.dataclass(frozen=True)
class _Leaf:
    """A final tensor in its structure: its key, and the numpy scalar type a session returns it as."""

    key: str
    scalar: type[np.generic] | None


def _final_structure(hook: Any, ops: Any, fetches: _Fetches, done: _Converted, name: str) -> Any:
    """``ops`` (a tensor, or a list, tuple or dict of them, nested) with each tensor replaced by its
    :class:`_Leaf`."""
    if isinstance(ops, Mapping):
        return {k: _final_structure(hook, v, fetches, done, str(k)) for k, v in ops.items()}
    if isinstance(ops, list | tuple):
        return type(ops)(_final_structure(hook, v, fetches, done, name) for v in ops)
    dtype = getattr(ops, "dtype", None)
    if dtype is None and not isinstance(ops, str):
        raise _refuse(
            hook,
            "final_ops",
            ops,
            "an operation, not a tensor: its value is None; EventBusHook(final_fetches=...) reads tensors",
        )
    key = fetches.key(name if isinstance(ops, str) or name != "final" else _op_name(ops), ops)
    if key not in done.final_keys:
        done.final_keys.append(key)
    numpy_dtype = getattr(getattr(dtype, "base_dtype", dtype), "as_numpy_dtype", None)
    scalar = numpy_dtype if isinstance(numpy_dtype, type) and issubclass(numpy_dtype, np.generic) else None
    return _Leaf(key, scalar)


def _op_name(element: Any) -> str:
    """A key for a final tensor given without a name: its op's name (``w`` for ``w:0``), else ``final``."""
    name = getattr(getattr(element, "op", None), "name", None)
    return name.rsplit("/", 1)[-1] if isinstance(name, str) and name else "final"


def _profiler(hook: Any, done: _Converted) -> None:
    directory = os.path.dirname(hook._output_file) or os.curdir  # os.path.join(output_dir, "timeline-{}.json")
    if any(isinstance(s, TimelineSink) and s.output_dir == directory for s in done.sinks):
        raise _refuse(hook, "output_dir", directory, "two ProfilerHooks writing one directory")
    steps, secs = _timer(hook)
    sink = TimelineSink(
        directory,
        every_n_steps=steps,
        every_n_secs=secs,
        show_dataflow=bool(hook._show_dataflow),
        show_memory=bool(hook._show_memory),
        name=f"ProfilerHook {directory}",
    )
    # The hook's timer starts at each session's first run, which it never traces: by steps and by time.
    sink.schedule = dataclasses.replace(sink.schedule, steps_from_last_firing=True, secs_from_session_start=True)
    done.sinks.append(sink)


def _wait_until(hook: Any) -> int:
    """The global step a ``GlobalStepWaiterHook`` waits for (one at or below 0: none, as the hook starts at once)."""
    until = hook._wait_until_step
    if isinstance(until, bool) or not isinstance(until, int | np.integer):
        raise _refuse(hook, "wait_until_step", until, "a global step is an int")
    return max(0, int(until))


def _final_ops(hook: Any, fetches: _Fetches, done: _Converted) -> bool:
    """Read the hook's final ops at the end; ``False``: it has none (nothing to do, it stays a hook)."""
    if hook._final_ops is None or not _has_tensor(hook._final_ops):
        return False  # nothing to read: the hook's end would run an empty structure
    feeds = hook._final_ops_feed_dict
    if feeds is not None or done.final_feed_dict is not None:
        if done.finals:  # one read at the end, with one feed_dict: it would feed the other hook's tensors too
            raise _refuse(
                hook,
                "final_ops_feed_dict",
                feeds if feeds is not None else done.final_feed_dict,
                "EventBusHook reads every final op in one run with one feed_dict; a FinalOpsHook with "
                "feeds converts only as the list's one FinalOpsHook",
            )
        done.final_feed_dict = feeds
    done.finals.append((hook, _final_structure(hook, hook._final_ops, fetches, done, "final")))
    return True


def _has_tensor(ops: Any) -> bool:
    """Whether a structure of final ops holds any leaf at all (``[]`` and ``{}`` hold none)."""
    if isinstance(ops, Mapping):
        return any(_has_tensor(v) for v in ops.values())
    if isinstance(ops, list | tuple):
        return any(_has_tensor(v) for v in ops)
    return True


def _final_values(structure: Any, values: Mapping[str, Any]) -> Any:
    """``structure`` (:func:`_final_structure`'s) filled with the final values, as a session returns
    them: scalars as the tensor's numpy type (a published scalar is a Python float), arrays as they are."""
    if isinstance(structure, dict):
        return {k: _final_values(v, values) for k, v in structure.items()}
    if isinstance(structure, list):
        return [_final_values(v, values) for v in structure]
    if isinstance(structure, tuple):
        return tuple(_final_values(v, values) for v in structure)
    value = values[structure.key]
    return structure.scalar(value) if structure.scalar is not None and isinstance(value, float) else value


def _keys_in(structure: Any) -> list[str]:
    """The keys in :func:`_final_structure`'s ``structure``, in order, each once."""
    if isinstance(structure, dict):
        found = [k for v in structure.values() for k in _keys_in(v)]
    elif isinstance(structure, list | tuple):
        found = [k for v in structure for k in _keys_in(v)]
    else:
        found = [structure.key]
    return list(dict.fromkeys(found))


def _final_filler(hook: Any, structure: Any) -> Callable[[Any], None]:
    """An ``at_end`` subscriber that sets ``hook.final_ops_values`` as the hook's own ``end`` would."""

    def fill(event: Any) -> None:
        if event.final:
            hook._final_ops_values = _final_values(structure, event.values)

    return fill


def from_hooks(
    hooks: Iterable[Any],
    *,
    bus: EventBus | None = None,
    train_op: Any = None,
    fetches: Mapping[str, Any] | None = None,
    report: Callable[[str], None] | None = None,
    dashboard: bool = True,
) -> list[Any]:
    """Turn a list of ``tf.compat.v1.train`` hooks into one :class:`hookbus.EventBusHook` and its sinks.

    Pass what it returns as ``hooks=`` to :func:`hookbus.monitored_training_session` (TF's own
    ``MonitoredTrainingSession`` with ``checkpoint_dir`` adds its own checkpoint, summary and
    step-counter hooks beside them). Converted, from their own arguments:

    - ``CheckpointSaverHook(checkpoint_dir, save_secs | save_steps, saver, checkpoint_basename,
      scaffold, listeners, save_graph_def)``: a :class:`~hookbus.sinks.CheckpointSink` writing
      ``<checkpoint_dir>/<basename>-<step>``, the ``checkpoint`` pointer with the saver's
      ``max_to_keep`` (a scaffold's default, 5, without one), the ``.meta`` files and
      ``graph.pbtxt`` (``save_graph_def``), and the listeners called around each save with the
      session (``after_save`` returning ``True`` stops). Not saved: the hook's checkpoint of the
      step a session starts at (``model.ckpt-0`` of the untrained model on a fresh start), and
      the listeners are not called for it; the event file the hook adds to ``checkpoint_dir``
      (the graph again, a ``CHECKPOINT`` marker per save) is not written.
    - ``SummarySaverHook(save_steps | save_secs, output_dir | summary_writer, summary_op |
      scaffold)``: a :class:`~hookbus.sinks.TensorBoardSink` writing the summary op's
      serialized summaries as they are into ``output_dir`` itself, at the hook's steps (the
      first step, then every ``save_steps`` after it), with the graph; the summary op runs only
      on those steps.
    - ``StepCounterHook(every_n_steps | every_n_secs, output_dir | summary_writer)`` beside a
      ``SummarySaverHook`` writing the same directory on the same schedule: its
      ``global_step/sec`` in that sink (any other passes through unchanged).
    - ``LoggingTensorHook(tensors, every_n_iter | every_n_secs, formatter)``: a
      :class:`~hookbus.sinks.LoggingSink` logging the hook's lines to the ``tensorflow`` logger at
      the hook's steps. ``at_end=True`` is refused (it runs the tensors after the last step).
    - ``NanTensorHook(loss_tensor, fail_on_nan_loss)``: a :class:`~hookbus.sinks.NanGuardSink`
      raising ``tf.compat.v1.train.NanLossDuringTrainingError`` (or stopping); it also stops on
      an infinite loss, which the hook lets pass.
    - ``StopAtStepHook(num_steps | last_step)``: a :class:`~hookbus.sinks.StopAtStepSink`.
    - ``ProfilerHook(save_steps | save_secs, output_dir, show_dataflow, show_memory)``: a
      :class:`~hookbus.sinks.TimelineSink` writing ``<output_dir>/timeline-<step>.json`` (Chrome
      traces of the run reaching that global step, traced in full) and the run metadata tagged
      ``step_<step>`` in an event file there, at the hook's steps (counted from each session's
      first run, which is never traced). The event file is hookbus's own beside the (empty) one
      the hook made when it was constructed.
    - ``FeedFnHook(feed_fn)``, beside a hook converted above: the ``EventBusHook``'s ``feed_fn``
      (every run gets its ``feed_dict``); alone, or a second one, it stays a hook.
    - ``FinalOpsHook(final_ops)``, beside a hook converted above: its tensors are the
      ``EventBusHook``'s ``final_fetches``, read once as the session ends (never on a step by the
      sinks made here), and your hook object's ``final_ops_values`` is filled as its own ``end``
      fills it (a tensor, list, tuple or dict, nested as given; scalars as the tensor's numpy
      type), with ``final_ops_feed_dict`` as the read's ``feed_dict``. An operation among the
      final ops is refused, and so is a feed dict beside another ``FinalOpsHook`` (one read).
    - ``GlobalStepWaiterHook(wait_until_step)``, beside a hook converted above: the
      ``EventBusHook``'s ``wait_for_step`` with ``always_wait=True``, so it waits on the process it
      is installed on, as the hook does (the chief and one machine too), before the first step;
      a stop ends the wait. A second one stays a hook.

    ``FeedFnHook``, ``FinalOpsHook`` and ``GlobalStepWaiterHook`` write nothing: alone (nothing
    else converts) they stay hooks. Every other hook — a subclass of any hook, your own — passes
    through unchanged, in order.

    Args:
        hooks: The hooks, as given to ``MonitoredTrainingSession(hooks=...)``.
        bus: The bus to publish on (default: a new :class:`hookbus.EventBus`, reachable as the
            returned hook's ``bus``). Pass your own to attach more sinks and to use ``with bus:``:
            without it the run, and the
            locks on its directories, end only at ``bus.close()`` or when the interpreter exits, so a
            second training in the same process writing the same directories fails naming the first.
        train_op: The training op (recommended: exact steps; see :class:`hookbus.EventBusHook`).
        fetches: More ``{key: tensor}`` to publish beside the hooks' (default ``None``).
        report: Called with the one line saying what was converted and what passes through
            (default: printed to standard error).
        dashboard: Also attach a :class:`~hookbus.sinks.ConsoleSink`, what hookbus adds beside the
            files (default ``True``; ``False`` declines it). It shows the hooks' values, never a
            summary op's, so it adds no summary run.

    Returns:
        The hooks in their order, the converted ones replaced by one ``EventBusHook`` where the
        first of them stood; the list unchanged when none converts.

    Raises:
        ValueError: before any session starts, naming the hook, the argument and its value, for
            an argument with no hookbus equivalent.
    """
    flag("dashboard", dashboard)
    given = list(hooks)
    kinds = [_kind(h) for h in given]
    gathered = _Fetches()
    for key, element in (fetches or {}).items():
        gathered.elements[key] = element
    done = _Converted()
    converted: list[str] = []
    # LoggingTensorHook's tags name the keys first: its lines show them.
    order = sorted(range(len(given)), key=lambda i: CONVERTED.index(kinds[i]) if kinds[i] else len(CONVERTED))
    taken: set[int] = set()
    for i in order:
        hook, kind = given[i], kinds[i]
        if kind is None:
            continue
        if kind == "LoggingTensorHook":
            _logging(hook, gathered, done)
        elif kind == "CheckpointSaverHook":
            _checkpoints(hook, done)
        elif kind == "SummarySaverHook":
            _summaries(hook, gathered, done)
        elif kind == "StepCounterHook":
            if not _step_counter(hook, done):
                continue
        elif kind == "NanTensorHook":
            _nan(hook, gathered, done)
        elif kind == "StopAtStepHook":
            _stop(hook, done)
        elif kind == "ProfilerHook":
            _profiler(hook, done)
        elif kind == "FeedFnHook":
            if done.feed_fn is not None:
                continue  # one feed function per EventBusHook: a second FeedFnHook stays a hook
            done.feed_fn = hook.feed_fn
        elif kind == "FinalOpsHook" and not _final_ops(hook, gathered, done):
            continue
        elif kind == "GlobalStepWaiterHook":
            if done.wait_for_step is not None:
                continue  # one start gate per EventBusHook: a second GlobalStepWaiterHook stays a hook
            done.wait_for_step = _wait_until(hook)
        taken.add(i)
    if all(kinds[i] in RIDERS for i in taken):
        taken = set()  # feeds, final ops or a wait alone are no reason for an EventBusHook: those hooks stay
    kept = [h for i, h in enumerate(given) if i not in taken]
    say = report if report is not None else _print
    if not taken:
        say(f"hookbus.from_hooks: nothing converted; {_names(kept)} pass through unchanged")
        return given
    bus = bus if bus is not None else EventBus()
    publisher = EventBusHook(
        bus,
        gathered.elements,
        train_op=train_op,
        checkpoint_listeners=done.listeners,
        feed_fn=done.feed_fn,
        final_fetches=done.final_keys,
        final_feed_dict=done.final_feed_dict,
        wait_for_step=done.wait_for_step,
        always_wait=done.wait_for_step is not None,
    )
    if publisher.checkpoint_backend is not None:
        publisher.checkpoint_backend.write_meta_graph = done.meta_graph
    summaries = {k for sink, _ in done.summaries.values() for k in sink.keys or ()}
    # The final ops are read at the end alone: no sink made here asks for them on a step.
    finals = set(done.final_keys) - {k for sink in done.sinks for k in sink.keys or ()}
    values = frozenset(k for k in gathered.elements if k not in summaries and k not in finals)
    for sink in done.sinks:
        # It needs the step, not the summary op: at its steps that must not run (an extra summary run the
        # hooks never made); it still sees the scalars, to refuse a non-finite step's save. (StopAtStepSink
        # needs the step alone by itself.)
        if isinstance(sink, CheckpointSink):
            sink.keys = values
        bus.attach(sink)
    if dashboard:
        console = ConsoleSink()
        console.keys = values  # the hooks' values (maybe none: the step alone), never the summary op
        bus.attach(console)
    for hook, structure in done.finals:
        keys = _keys_in(structure)
        bus.on(
            "after_run", _final_filler(hook, structure), at_end=True, keys=keys, name=f"FinalOpsHook {', '.join(keys)}"
        )
    for directory in done.graph_dirs:
        bus.on("session_created", _graph_writer(directory), name=f"graph.pbtxt in {directory}")
    first = min(taken)
    result = [publisher if i == first else h for i, h in enumerate(given) if i == first or i not in taken]
    converted = [type(given[i]).__name__ for i in sorted(taken)]
    rest = f"; passing through unchanged: {_names(kept)}" if kept else ""
    say(f"hookbus.from_hooks: converted {', '.join(converted)} into one EventBusHook{rest}")
    return result


def _graph_writer(directory: str) -> Callable[[Any], None]:
    def write(event: Any) -> None:
        if event.mode == "train":
            write_graph_def(directory)

    return write


def _names(hooks: Sequence[Any]) -> str:
    return ", ".join(type(h).__name__ for h in hooks) or "none"


def _print(line: str) -> None:
    print(line, file=sys.stderr)
