"""Checkpoint backends: how a publisher's model is saved and restored, and the files around it.

A publisher offers a :class:`CheckpointBackend` (``PublisherCore.offer_checkpoints``); the
:class:`~hookbus.sinks.CheckpointSink` decides *when* and *what else* (the barrier, retention,
the pointer) and asks the backend only to write or read the model's variables. The TF1
:class:`SaverBackend` wraps ``tf.compat.v1.train.Saver``; a ``tf.train.Checkpoint`` backend is
``save = checkpoint.write``, ``restore = checkpoint.read``.

The file helpers below work on TensorFlow's checkpoint layout (``<prefix>.index``,
``<prefix>.data-*``, ``<prefix>.meta`` and the ``checkpoint`` state file), shared by ``Saver``
and ``tf.train.Checkpoint``. Beside each checkpoint hookbus keeps ``<prefix>.hookbus.json``,
the sinks' states. TensorFlow is imported lazily: importing this module costs nothing.
"""

from __future__ import annotations

import contextlib
import glob
import json
import os
import re
import shutil
from typing import Any, Protocol, runtime_checkable

from hookbus._tf import require_tensorflow
from hookbus._writer import write_atomically

__all__ = [
    "STATE_SUFFIX",
    "CheckpointBackend",
    "SaverBackend",
    "checkpoint_problem",
    "copy_checkpoint",
    "list_checkpoints",
    "read_state_file",
    "record_checkpoints",
    "recover_checkpoints",
    "remove_checkpoint",
    "set_aside",
    "step_of",
    "write_state_file",
]

#: Suffix of the file holding the sinks' states beside a checkpoint prefix.
STATE_SUFFIX = ".hookbus.json"
#: Where :func:`set_aside` moves a checkpoint that cannot be restored, inside its directory.
SET_ASIDE = "unreadable"
_STEP = re.compile(r"-(\d+)$")
#: The files of a checkpoint prefix, after the prefix: TensorFlow's and the sinks' states.
_FILE = re.compile(r"\.(index|meta|data-\d+-of-\d+|hookbus\.json)")


@runtime_checkable
class CheckpointBackend(Protocol):
    """What a publisher provides so that a checkpoint sink can save and restore its model.

    A backend only moves variables; the sink owns the schedule, the barrier, the pointer
    (``checkpoint`` file) and retention.
    """

    @property
    def ready(self) -> bool:
        """Whether a model (a live session) is there to save or restore now."""
        ...

    def save(self, path: str) -> str:
        """Write the model's variables to checkpoint prefix ``path``; return the prefix written.

        Must not touch the ``checkpoint`` state file nor delete anything.
        """
        ...

    def restore(self, path: str) -> None:
        """Load the variables saved at prefix ``path`` into the live model."""
        ...


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


# -- files --------------------------------------------------------------------------------------
def step_of(path: str) -> int | None:
    """The step in a checkpoint prefix's ``-N`` suffix, or ``None``."""
    found = _STEP.search(path)
    return int(found.group(1)) if found else None


def _exists(path: str) -> bool:
    return os.path.exists(path + ".index")


def list_checkpoints(directory: str) -> list[str]:
    """Existing checkpoints recorded in ``directory``'s state file, oldest first (absolute prefixes).

    This is how a new process recovers the checkpoints of earlier ones, so ``keep`` holds
    across restarts.
    """
    if not os.path.exists(os.path.join(directory, "checkpoint")):
        return []
    state = _tf().compat.v1.train.get_checkpoint_state(directory)
    if state is None:
        return []
    paths = [os.path.abspath(p) for p in state.all_model_checkpoint_paths]
    latest = os.path.abspath(state.model_checkpoint_path)
    if latest not in paths:
        paths.append(latest)
    return [p for p in paths if _exists(p)]


def record_checkpoints(directory: str, paths: list[str]) -> None:
    """Atomically write ``directory``'s state file: ``paths`` (oldest first), the last the latest.

    Paths are written relative to ``directory`` so it can be moved.
    """
    from google.protobuf import text_format

    names = [os.path.relpath(p, directory) for p in paths]
    # TensorFlow's own proto and text format (what tf.train.latest_checkpoint reads), written
    # atomically here: update_checkpoint_state would do the same but is deprecated and says so.
    state = _tf().compat.v1.train.generate_checkpoint_state_proto(
        directory, names[-1], all_model_checkpoint_paths=names
    )
    write_atomically(os.path.join(directory, "checkpoint"), text_format.MessageToString(state))


def _files_of(path: str) -> list[str]:
    """The files of checkpoint prefix ``path`` (not those of a longer prefix such as ``path + "0"``)."""
    return [name for name in glob.glob(glob.escape(path) + ".*") if _FILE.fullmatch(name[len(path) :])]


def remove_checkpoint(path: str) -> None:
    """Delete every file of checkpoint prefix ``path``, its state file last.

    The state file goes last: a kill halfway leaves it, so the next start still recognizes the
    rest as hookbus's and finishes the job (:func:`recover_checkpoints`).
    """
    for name in sorted(_files_of(path), key=lambda name: name.endswith(STATE_SUFFIX)):
        with contextlib.suppress(FileNotFoundError):  # a kill between two removals already took it
            os.remove(name)


def recover_checkpoints(directory: str, keep: int | None) -> tuple[list[str], list[str]]:
    """``(kept, dropped)`` as a run starts: the pointer's checkpoints to keep, and what to prune.

    ``kept`` are the last ``keep`` checkpoints the pointer names (all of them for ``None``),
    oldest first; ``dropped`` are those beyond ``keep`` and every checkpoint hookbus saved in
    ``directory`` that the pointer does not name: what a kill between the pointer and pruning
    leaves behind (or between a save and the pointer, which named it never). Only prefixes with
    a hookbus state file count as hookbus's: TensorFlow's own unlisted checkpoints (a Saver's
    ``keep_checkpoint_every_n_hours``) are left alone. The latest checkpoint is never dropped,
    and nothing is while the pointer names no checkpoint on disk (none yet, or a directory moved
    under a pointer with absolute paths): without a latest, nothing is known to be stale.
    """
    listed = list_checkpoints(directory)
    if not listed:
        return [], []
    kept = listed if keep is None else listed[-keep:]
    unlisted = {
        prefix
        for state in glob.glob(os.path.join(glob.escape(directory), "*" + STATE_SUFFIX))
        if (prefix := state[: -len(STATE_SUFFIX)]) not in listed and step_of(prefix) is not None
    }
    dropped = listed[: len(listed) - len(kept)] + sorted(unlisted, key=lambda p: step_of(p) or 0)
    return kept, dropped


def checkpoint_problem(path: str) -> str | None:
    """What keeps checkpoint prefix ``path`` from being restored, or ``None`` when it reads back whole.

    Reads every value in it as a restore would (TensorFlow checks each value's checksum), so a
    truncated or damaged data file, or a missing one, is found before a session tries to restore
    it and fails with TensorFlow's bare ``Read less bytes than requested``.
    """
    if not _exists(path):
        return f"its index file {os.path.basename(path)}.index is missing"
    try:
        reader = _tf().train.load_checkpoint(path)
        for name in reader.get_variable_to_shape_map():
            reader.get_tensor(name)
    except Exception as error:  # TensorFlow's DataLossError, NotFoundError, IndexError, ... alike
        data = sorted(glob.glob(glob.escape(path) + ".data-*"))
        sizes = ", ".join(f"{os.path.basename(d)} {os.path.getsize(d):,} bytes" for d in data) or "no data file"
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        return f"reading it fails with {type(error).__name__}: {detail} ({sizes})"
    return None


def set_aside(path: str) -> str:
    """Move every file of checkpoint prefix ``path`` into ``<its directory>/unreadable``; the new prefix.

    Kept for a person to look at, out of the way of the pointer, retention and pruning (which
    look only at the directory itself); a checkpoint saved again at its step replaces nothing.
    """
    target = os.path.join(os.path.dirname(path), SET_ASIDE, os.path.basename(path))
    os.makedirs(os.path.dirname(target), exist_ok=True)
    for name in _files_of(path):
        os.replace(name, target + name[len(path) :])
    return target


def copy_checkpoint(path: str, directory: str) -> str:
    """Copy checkpoint prefix ``path`` (all its files) into ``directory``; return the new prefix."""
    os.makedirs(directory, exist_ok=True)
    target = os.path.join(directory, os.path.basename(path))
    for name in glob.glob(glob.escape(path) + ".*"):
        shutil.copyfile(name, target + name[len(path) :])
    return target


def write_state_file(path: str, data: dict[str, Any]) -> str:
    """Write ``data`` (JSON) beside checkpoint prefix ``path``, atomically; return the file.

    Temp file in the same directory, then ``os.replace``: a crash leaves either no file or the
    whole new one, never half of one.
    """
    target = path + STATE_SUFFIX
    write_atomically(target, json.dumps(data))
    return target


def read_state_file(path: str) -> dict[str, Any] | None:
    """What :func:`write_state_file` wrote beside checkpoint prefix ``path``, or ``None``."""
    try:
        with open(path + STATE_SUFFIX, encoding="utf-8") as file:
            data = json.load(file)
    except FileNotFoundError:
        return None
    return dict(data)
