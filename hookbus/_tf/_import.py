"""The one place hookbus imports TensorFlow: lazily, when a publisher or a backend first needs it;
and where the publishers become TensorFlow's and Keras's classes (:func:`with_framework_base`).

``import hookbus`` must not import TensorFlow (about 5 s and 500 MB): the bus, the schedules and
the observability sinks run without it, and ``hookbus demo`` holds TensorFlow's start-up notices
back around the first import.
"""

from __future__ import annotations

from typing import Any

__all__ = ["require_keras", "require_tensorflow", "require_timeline", "with_framework_base"]

_tensorflow: Any = None


def require_tensorflow(what: str) -> Any:
    """The ``tensorflow`` module (imported once) for ``what``, or an ``ImportError`` saying how to install it."""
    global _tensorflow
    if _tensorflow is None:
        try:
            import tensorflow
        except ImportError:
            raise ImportError(f"{what} needs TensorFlow: pip install 'hookbus[tf-cpu]' (or 'hookbus[tf]')") from None
        _tensorflow = tensorflow
    return _tensorflow


def require_keras(what: str) -> Any:
    """Import Keras (with TensorFlow) for ``what``, or say how to install it."""
    require_tensorflow(what)
    import keras  # type: ignore[import-untyped]  # Keras ships no type information

    return keras


def require_timeline(what: str) -> Any:
    """TensorFlow's Chrome-trace writer for a run's step stats (``tensorflow.python.client.timeline``,
    what ``ProfilerHook`` writes its timelines with; it has no public name) for ``what``."""
    require_tensorflow(what)
    from tensorflow.python.client import timeline

    return timeline


_mixed: dict[tuple[type, type], type] = {}


def with_framework_base(cls: type, base: type) -> type:
    """``cls`` with TensorFlow's or Keras's ``base`` class mixed in, made once, on first use.

    The publishers are real ``SessionRunHook`` / ``keras.callbacks.Callback`` instances, yet
    ``import hookbus`` does not import TensorFlow: the framework base joins in ``__new__``.
    """
    if issubclass(cls, base):
        return cls
    made = _mixed.get((cls, base))
    if made is None:
        namespace = {"__module__": cls.__module__, "__qualname__": cls.__qualname__, "__doc__": cls.__doc__}
        made = _mixed[(cls, base)] = type(cls.__name__, (cls, base), namespace)
    return made
