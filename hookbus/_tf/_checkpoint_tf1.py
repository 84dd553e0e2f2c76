"""The TF1 checkpoint backend (``tf.compat.v1.train.Saver``), and TensorFlow's checkpoint layout.

A publisher offers a :class:`~hookbus.publisher_api.CheckpointBackend` (``PublisherCore.offer_checkpoints``),
and with it a :class:`~hookbus.publisher_api.CheckpointStore` (the TensorFlow publishers give
:data:`TENSORFLOW`, a :class:`TensorFlowStore`); the
:class:`~hookbus.sinks.CheckpointSink` decides *when* and *what to keep*, the backend only
writes or reads the model's variables, and the store keeps the files (listing, the pointer, the
sinks' states beside each checkpoint, removing). The TF1 :class:`SaverBackend` wraps
``tf.compat.v1.train.Saver``; a ``tf.train.Checkpoint`` backend is ``save = checkpoint.write``,
``restore = checkpoint.read``. TensorFlow is imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import glob
import logging
import os
from typing import Any

from hookbus._checkpoints._store import FileCheckpointStore, step_of
from hookbus._rules._files import write_atomically
from hookbus._tf._checkpoint_index import CompressedIndex, index_problem
from hookbus._tf._import import require_tensorflow

__all__ = [
    "TENSORFLOW",
    "SaverBackend",
    "TensorFlowStore",
    "checkpoint_problem",
    "list_checkpoints",
    "read_problem",
    "read_state_file",
    "restore_failed",
]

logger = logging.getLogger("hookbus")


def _tf() -> Any:
    return require_tensorflow("checkpoints")


class SaverBackend:
    """The TF1 backend: a ``tf.compat.v1.train.Saver`` over the graph's saveable variables.

    :meth:`prepare` builds the Saver and must run in the hook's ``begin()`` (the graph is
    finalized after); :meth:`attach_session` gives it the session of ``after_create_session``.
    The Saver keeps every file (``max_to_keep=None``) and never writes the state file: the
    sink records and prunes checkpoints itself, after the new one is complete.

    Args:
        write_meta_graph: Also write ``<prefix>.meta`` (default ``True``, like
            ``CheckpointSaverHook``), for ``tf.compat.v1.train.import_meta_graph``.
    """

    def __init__(self, *, write_meta_graph: bool = True) -> None:
        self.write_meta_graph = write_meta_graph
        self._saver: Any = None
        self._graph: Any = None
        self._session: Any = None
        self._meta: bytes | None = None  # the finalized graph's serialized MetaGraphDef
        #: The global step variable, when other processes move it during a save (parameter-server
        #: training): each checkpoint is then named after the step it really holds.
        self.step_variable: Any = None

    def prepare(self) -> None:
        """Build the Saver in the current default graph (call from ``begin()``)."""
        tf = _tf()
        self._session = None
        self._meta = None  # ops may still be added before the graph is finalized again
        graph = tf.compat.v1.get_default_graph()
        saveable = graph.get_collection(tf.compat.v1.GraphKeys.GLOBAL_VARIABLES) + graph.get_collection(
            tf.compat.v1.GraphKeys.SAVEABLE_OBJECTS
        )
        if self._saver is not None and self._graph is graph:
            return  # the train/evaluate loop begins again on the same graph: reuse, don't grow it
        self._graph = graph
        # A graph without variables has nothing to checkpoint; save() then says so.
        self._saver = tf.compat.v1.train.Saver(max_to_keep=None) if saveable else None

    def attach_session(self, session: Any) -> None:
        """Use ``session`` (the raw session of ``after_create_session``; ``None`` at the end)."""
        self._session = session

    @property
    def ready(self) -> bool:
        return self._saver is not None and self._session is not None

    def _check(self) -> None:
        if self._saver is None:
            raise RuntimeError("nothing to checkpoint: the graph has no variables (or begin() has not run)")
        if self._session is None:
            raise RuntimeError("no live session to checkpoint: the training session has not started or has ended")

    def save(self, path: str) -> str:
        self._check()
        gfile = _tf().io.gfile
        # Exporting the MetaGraphDef is most of a save (60-75% on small models, measured by
        # bench/overhead.py), and a finalized graph's cannot change: export it once, then copy it.
        reuse = self.write_meta_graph and self._meta is not None and self._graph.finalized
        written = str(
            self._saver.save(
                self._session, path, write_meta_graph=self.write_meta_graph and not reuse, write_state=False
            )
        )
        if reuse:
            with gfile.GFile(written + ".meta", "wb") as file:
                file.write(self._meta)
        elif self.write_meta_graph and self._graph.finalized:
            with gfile.GFile(written + ".meta", "rb") as file:
                self._meta = file.read()
        if self.step_variable is not None:
            written = self._name_after_saved_step(written)
        return written

    def _name_after_saved_step(self, written: str) -> str:
        """Rename checkpoint ``written`` to ``<base>-<the global step it holds>`` if that differs.

        Other workers advance the global step between the chief's read and its save; the name
        must be the step a restore gets back, or two checkpoints could hold one step.
        """
        held = int(_tf().train.load_variable(written, self.step_variable.op.name))
        named = step_of(written)
        if named is None or named == held:
            return written
        target = written[: written.rindex("-")] + f"-{held}"
        for name in glob.glob(glob.escape(written) + ".*"):
            os.replace(name, target + name[len(written) :])
        return target

    def restore(self, path: str) -> None:
        self._check()
        self._saver.restore(self._session, path)


# -- TensorFlow's layout -------------------------------------------------------------------
class TensorFlowStore(FileCheckpointStore):
    """The default :class:`~hookbus.publisher_api.CheckpointStore`: TensorFlow's checkpoint layout.

    ``<prefix>.index``, ``<prefix>.data-*`` and (TF1) ``<prefix>.meta``, shared by ``Saver`` and
    ``tf.train.Checkpoint``, and the ``checkpoint`` state file as the pointer (what
    ``tf.train.latest_checkpoint`` reads). A checkpoint exists once its index is written.
    """

    def __init__(self) -> None:
        super().__init__(".index", r"\.(index|meta|data-\d+-of-\d+)", pointer="checkpoint")

    def checkpoints(self, directory: str) -> list[str]:
        if not os.path.exists(os.path.join(directory, self.pointer)):
            return []
        state = _tf().compat.v1.train.get_checkpoint_state(directory)
        if state is None:
            return []
        paths = [os.path.abspath(p) for p in state.all_model_checkpoint_paths]
        latest = os.path.abspath(state.model_checkpoint_path)
        if latest not in paths:
            paths.append(latest)
        return [p for p in paths if self.exists(p)]

    def set_pointer(self, directory: str, prefixes: list[str]) -> None:
        from google.protobuf import text_format

        names = [os.path.relpath(p, directory) for p in prefixes]
        if not names:  # no checkpoint left (CheckpointSink(delete_at_end=True)): no pointer, as TensorFlow reads it
            with contextlib.suppress(FileNotFoundError):
                os.remove(os.path.join(directory, self.pointer))
            return
        # TensorFlow's own proto and text format, written atomically here: update_checkpoint_state
        # would do the same but is deprecated and says so.
        state = _tf().compat.v1.train.generate_checkpoint_state_proto(
            directory, names[-1], all_model_checkpoint_paths=names
        )
        write_atomically(os.path.join(directory, self.pointer), text_format.MessageToString(state))

    def problem(self, prefix: str) -> str | None:
        """What its index shows (:func:`~hookbus._tf._checkpoint_index.index_problem`): a truncated or
        missing data file, a damaged index, found before a session tries to restore it and fails with
        TensorFlow's bare ``Read less bytes than requested``. No tensor is read: a damaged byte inside
        a tensor's data is found by the restore itself (TensorFlow checks each tensor's checksum)."""
        missing = super().problem(prefix)
        if missing is not None:
            return missing
        try:
            found = index_problem(prefix)
        except CompressedIndex:  # TensorFlow writes none; another writer's: TensorFlow's reader decompresses
            return read_problem(prefix)
        if found is not None and read_problem(prefix) is None:
            # TensorFlow reads every tensor of it: a checkpoint it restores is never set aside on the
            # index check's word alone (the whole read runs only when that check finds something).
            logger.warning("checkpoint %s: %s by its index, but TensorFlow reads it whole; it is kept", prefix, found)
            return None
        return found


#: TensorFlow's layout, for the code that knows its checkpoints have it (the TF publishers' restore,
#: the train/evaluate loop, tests); a sink goes through the store its publisher offers.
TENSORFLOW = TensorFlowStore()


def list_checkpoints(directory: str) -> list[str]:
    """:meth:`TensorFlowStore.checkpoints`: the pointer's existing checkpoints, oldest first."""
    return TENSORFLOW.checkpoints(directory)


def read_problem(prefix: str) -> str | None:
    """What reading every tensor of ``prefix`` back shows (each tensor's checksum checked), or ``None``.

    A read of the whole model: :meth:`TensorFlowStore.problem` reads only the index, and this only
    where that cannot (a compressed index) or to say why a restore failed.
    """
    try:
        reader = _tf().train.load_checkpoint(prefix)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as error:  # TensorFlow's DataLossError, NotFoundError, IndexError, ... alike
        data = sorted(glob.glob(glob.escape(prefix) + ".data-*"))
        sizes = ", ".join(f"{os.path.basename(d)} {os.path.getsize(d):,} bytes" for d in data) or "no data file"
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"reading it fails with {type(error).__name__}: {detail} ({sizes})"
    return None


def checkpoint_problem(path: str) -> str | None:
    """:meth:`TensorFlowStore.problem`: why ``path`` cannot be restored, or ``None``."""
    return TENSORFLOW.problem(path)


def _not_this_model(error: BaseException) -> bool:
    """Whether a restore's ``error`` says the checkpoint does not fit the model (not that it is damaged).

    TensorFlow's object-based restore raises ``ValueError`` for a variable of another shape and
    its status's ``assert_existing_objects_matched`` an ``AssertionError`` for a variable the
    checkpoint has no value for; a name-based (TF1) restore raises ``InvalidArgumentError`` for a
    shape and ``NotFoundError`` for a missing key.
    """
    errors = _tf().errors
    return isinstance(error, (ValueError, AssertionError, errors.InvalidArgumentError, errors.NotFoundError))


def restore_failed(prefix: str, error: BaseException) -> RuntimeError:
    """The error for a restore of the latest checkpoint ``prefix`` that raised ``error``: which, why, what to do.

    A damaged index, a data file cut short or missing is what :meth:`TensorFlowStore.problem`
    finds before a session restores (a CheckpointSink on the directory falls back on its own then).
    TensorFlow's ``DataLossError`` with all of that whole is a damaged byte inside a tensor's data,
    which only the restore's checksums see, after the sinks began from the checkpoints they found:
    where an earlier checkpoint is kept, ``prefix`` is set aside here (``<directory>/unreadable``)
    and the pointer names the earlier one, so that the next start resumes from it, sinks' states
    and all. Without an earlier one nothing is moved: a person decides. A whole checkpoint that
    does not fit the model (another shape, a variable it has no value for: a changed model) is
    said to be that, not damage, and nothing is moved either.
    """
    problem = checkpoint_problem(prefix)
    if problem is None and _not_this_model(error):
        detail = str(error).strip().splitlines()[0].rstrip(". ") if str(error).strip() else ""
        return RuntimeError(
            f"cannot restore checkpoint {prefix} into this model: {type(error).__name__}: {detail}. The checkpoint "
            "is whole (its index and data files check out); it was saved from a model whose variables differ from "
            "this one's (other layers or other shapes). Restore it into the model that saved it, or train this "
            "model with another checkpoint directory (or restore=False) to start it from scratch"
        )
    if problem is not None or not isinstance(error, _tf().errors.DataLossError):
        problem = problem or f"{type(error).__name__}: {error}"
        return RuntimeError(
            f"cannot restore checkpoint {prefix}: {problem}. A CheckpointSink on its directory resumes "
            "from the previous checkpoint instead; without one, move it away to restore the previous"
        )
    # Graph execution wraps TensorFlow's own line (which names the bundle) in a traceback.
    lines = [line.strip() for line in error.message.splitlines() if line.strip()]
    detail = next((line for line in lines if os.path.basename(prefix) in line), lines[0] if lines else "")
    what = (
        f"cannot restore checkpoint {prefix}: DataLossError: {detail}. Bytes inside a tensor are damaged "
        "(its index and the sizes of its data files are whole: only the restore's checksums see this)"
    )
    directory = os.path.dirname(prefix)
    kept = TENSORFLOW.checkpoints(directory)
    if not kept or kept[-1] != prefix or len(kept) == 1:
        return RuntimeError(
            f"{what}, and no earlier checkpoint is kept: move it away to train from scratch, or restore a copy"
        )
    moved = TENSORFLOW.set_aside(prefix)
    TENSORFLOW.set_pointer(directory, kept[:-1])
    return RuntimeError(
        f"{what}. It is moved to {moved} and the pointer names the previous checkpoint {kept[-2]} "
        f"(step {step_of(kept[-2])}): start again to resume from that one"
    )


def read_state_file(path: str) -> dict[str, Any] | None:
    """:meth:`TensorFlowStore.read_state`: what was written beside prefix ``path``, or ``None``."""
    return TENSORFLOW.read_state(path)
