"""TensorBoardSink(layout="keras") beside Keras's own ``TensorBoard`` callback on the same ``fit``:
the runs, tags, steps and values as TensorBoard's reader takes them; and the default layout's
``train`` run (a logdir written before it had one goes on at its root) and histograms.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("tensorflow")
keras = pytest.importorskip("keras")
from _keras_data import KERAS_NP_ARRAY, classifier, data  # noqa: E402
from _tb import Run, assert_same_runs, read_run, runs  # noqa: E402
from tensorboard.backend.event_processing import event_accumulator  # noqa: E402

import hookbus  # noqa: E402
from hookbus.sinks import TensorBoardSink  # noqa: E402

TRAIN, VAL = data(128, 0), data(64, 1)


def model() -> Any:
    """The classifier, its layers named from scratch (``dense``, ``dense_1``: the histograms' tags)."""
    keras.backend.clear_session()
    return classifier(keras.optimizers.SGD(0.1), ["accuracy"])


def fit(callback: Any, epochs: int = 4, **fit_kwargs: Any) -> Any:
    return model().fit(
        *TRAIN, validation_data=VAL, epochs=epochs, batch_size=16, verbose=0, callbacks=[callback], **fit_kwargs
    )


def fit_on_bus(*sinks: hookbus.sink_api.Sink, epochs: int = 4) -> Any:
    bus = hookbus.EventBus()
    for sink in sinks:
        bus.attach(sink)
    with bus:
        return fit(hookbus.EventBusCallback(bus, ["loss", "accuracy"]), epochs=epochs)


def _without_graphs(found: dict[str, Run]) -> dict[str, Run]:
    """Keras also writes its traced train function (a graph of ops, tag ``keras`` aside); the
    sink writes the model's configuration only: compared apart."""
    return {name: {t: p for t, p in run.items() if t != "keras"} for name, run in found.items()}


@KERAS_NP_ARRAY
def test_keras_layout_writes_the_runs_tags_steps_and_values_kerass_tensorboard_writes(tmp_path: Path) -> None:
    """Issue 38, item 1: the same deterministic fit under Keras's TensorBoard(histogram_freq=1)
    and under TensorBoardSink(layout="keras", histogram_freq=1): equal runs (train/, validation/),
    tags (epoch_*, epoch_learning_rate, evaluation_*_vs_iterations, the weights' histograms),
    steps and values, as EventAccumulator reads them."""
    keras_dir, ours_dir = tmp_path / "keras", tmp_path / "hookbus"
    fit(keras.callbacks.TensorBoard(str(keras_dir), histogram_freq=1, write_graph=False))
    fit_on_bus(TensorBoardSink(ours_dir, layout="keras", histogram_freq=1))
    theirs, ours = runs(keras_dir), _without_graphs(runs(ours_dir))
    assert sorted(theirs) == ["train", "validation"]
    train = theirs["train"]
    assert {"epoch_loss", "epoch_accuracy", "epoch_learning_rate", "sequential/dense/kernel/histogram"} <= set(train)
    assert sorted(train["epoch_loss"]) == [0, 1, 2, 3]
    assert {"epoch_loss", "evaluation_loss_vs_iterations", "evaluation_accuracy_vs_iterations"} <= set(
        theirs["validation"]
    )
    assert_same_runs(theirs, ours)


@KERAS_NP_ARRAY
def test_keras_layout_with_update_freq_writes_kerass_batch_values_and_every_epoch(tmp_path: Path) -> None:
    """update_freq=3: batch_<name> at every third step, equal to Keras's. Keras's own callback then
    writes an epoch's values only when that epoch's last batch is a multiple of update_freq (its
    batch filter stays on at the epoch's end: epoch 2 of 4 here); the sink writes every epoch's,
    equal to Keras's where Keras has them and to its update_freq="epoch" run."""
    keras_dir, epoch_dir, ours_dir = tmp_path / "keras", tmp_path / "keras-epoch", tmp_path / "hookbus"
    fit(keras.callbacks.TensorBoard(str(keras_dir), update_freq=3, write_graph=False))
    fit(keras.callbacks.TensorBoard(str(epoch_dir), write_graph=False))
    fit_on_bus(TensorBoardSink(ours_dir, layout="keras", update_freq=3))
    theirs, per_epoch, ours = runs(keras_dir), runs(epoch_dir), _without_graphs(runs(ours_dir))
    batch = {t: p for t, p in theirs["train"].items() if t.startswith("batch_")}
    assert sorted(batch) == ["batch_accuracy", "batch_loss"]
    assert sorted(batch["batch_loss"]) == list(range(3, 33, 3))
    assert_same_runs({"train": batch}, {"train": {t: p for t, p in ours["train"].items() if t.startswith("batch_")}})
    assert sorted(theirs["train"]["epoch_loss"]) == [2]

    def epochs(found: dict[str, Run]) -> dict[str, Run]:
        return {name: {t: p for t, p in run.items() if t.startswith("epoch_")} for name, run in found.items()}

    assert_same_runs(epochs(per_epoch), epochs(ours))


@KERAS_NP_ARRAY
def test_keras_layout_under_steps_per_execution_writes_kerass_batch_values_at_the_real_steps(tmp_path: Path) -> None:
    """steps_per_execution=4 (8 batches an epoch: 2 calls): Keras's callback counts calls, so its
    update_freq=1 writes batch_<name> at its steps 1, 2, ..., 8; the sink writes the same values at
    the model's steps 4, 8, ..., 32 (update_freq=4 steps), where evaluation_*_vs_iterations is."""

    def fit_with(callback: Any) -> None:
        keras.backend.clear_session()
        keras.utils.set_random_seed(0)
        m = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(2)])
        loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        m.compile(optimizer=keras.optimizers.SGD(0.1), loss=loss, metrics=["accuracy"], steps_per_execution=4)
        m.fit(*TRAIN, validation_data=VAL, epochs=4, batch_size=16, verbose=0, callbacks=[callback])

    keras_dir, ours_dir = tmp_path / "keras", tmp_path / "hookbus"
    fit_with(keras.callbacks.TensorBoard(str(keras_dir), update_freq=1, write_graph=False))
    bus = hookbus.EventBus()
    bus.attach(TensorBoardSink(ours_dir, layout="keras", update_freq=4))
    with bus:
        fit_with(hookbus.EventBusCallback(bus, ["loss", "accuracy"]))
    theirs, ours = runs(keras_dir), _without_graphs(runs(ours_dir))
    assert sorted(theirs["train"]["batch_loss"]) == list(range(1, 9))  # calls
    assert sorted(ours["train"]["batch_loss"]) == list(range(4, 33, 4))  # steps
    for tag in ("batch_loss", "batch_accuracy"):
        at_steps = {4 * call: value for call, value in theirs["train"][tag].items()}
        assert_same_runs({"train": {tag: at_steps}}, {"train": {tag: ours["train"][tag]}})
    validation = ours["validation"]["evaluation_loss_vs_iterations"]
    assert sorted(validation) == [8, 16, 24, 32]  # each epoch's last batch: among the batch steps
    assert_same_runs(
        {"validation": {"v": theirs["validation"]["evaluation_loss_vs_iterations"]}}, {"validation": {"v": validation}}
    )


@KERAS_NP_ARRAY
def test_keras_layout_histograms_every_n_epochs_as_keras_counts_them(tmp_path: Path) -> None:
    """histogram_freq=2: epochs 0 and 2 of 4 (Keras's ``epoch % histogram_freq == 0``), the model's
    configuration at step 0 as Keras's write_graph writes it."""
    keras_dir, ours_dir = tmp_path / "keras", tmp_path / "hookbus"
    fit(keras.callbacks.TensorBoard(str(keras_dir), histogram_freq=2))
    fit_on_bus(TensorBoardSink(ours_dir, layout="keras", histogram_freq=2))
    theirs, ours = runs(keras_dir), runs(ours_dir)
    kernel = "sequential/dense/kernel/histogram"
    assert sorted(ours["train"][kernel]) == sorted(theirs["train"][kernel]) == [0, 2]
    assert sorted(ours["train"]["keras"]) == [0]
    assert_same_runs(_without_graphs(theirs), _without_graphs(ours))


@KERAS_NP_ARRAY
def test_keras_layout_learning_rate_follows_a_plateau_reduction_as_kerass_tensorboard_reads_it(tmp_path: Path) -> None:
    """epoch_learning_rate is the rate that trained each epoch, reductions included: what Keras's
    TensorBoard writes listed before its ReduceLROnPlateau (the order of the issue's callback list;
    listed after it, Keras writes the rate the next epoch trains with)."""
    keras_dir, ours_dir = tmp_path / "keras", tmp_path / "hookbus"
    settings: dict[str, Any] = {"factor": 0.5, "patience": 0, "min_delta": 1e9}  # reduces at every epoch end
    callbacks = [keras.callbacks.TensorBoard(str(keras_dir)), keras.callbacks.ReduceLROnPlateau("val_loss", **settings)]
    model().fit(*TRAIN, validation_data=VAL, epochs=3, batch_size=16, verbose=0, callbacks=callbacks)
    fit_on_bus(
        hookbus.sinks.ReduceLROnPlateauSink(monitor="eval/loss", **settings),
        TensorBoardSink(ours_dir, layout="keras"),
        epochs=3,
    )
    theirs, ours = runs(keras_dir), runs(ours_dir)
    assert len(set(theirs["train"]["epoch_learning_rate"].values())) == 2  # a reduction shows
    assert ours["train"]["epoch_learning_rate"] == pytest.approx(theirs["train"]["epoch_learning_rate"])


def test_keras_layout_outside_fit_fails_before_step_1_naming_the_default_layout(tmp_path: Path) -> None:
    bus = hookbus.EventBus()
    bus.attach(TensorBoardSink(tmp_path, layout="keras"))
    loop = hookbus.LoopPublisher(bus, ["loss"])
    with pytest.raises(ValueError, match="layout='keras'.*EventBusCallback.*default layout"), loop:
        pass


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"layout": "tf"}, r"layout must be one of 'default', 'keras' \(got 'tf'\)"),
        ({"layout": "keras", "keys": ["loss"]}, "layout='keras' writes every value.*update_freq="),
        ({"layout": "keras", "every_n_steps": 5}, "layout='keras' writes every value"),
        ({"update_freq": 5}, "update_freq=5 is layout='keras''s"),
        ({"layout": "keras", "update_freq": "step"}, "update_freq must be 'epoch', 'batch' or a positive number"),
        ({"layout": "keras", "update_freq": 0}, "update_freq"),
        ({"histogram_freq": -1}, "histogram_freq"),
    ],
)
def test_bad_layout_arguments_fail_at_construction_naming_the_value(
    tmp_path: Path, kwargs: dict[str, Any], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        TensorBoardSink(tmp_path, **kwargs)


def _scalars(directory: Path) -> dict[str, dict[int, float]]:
    acc = event_accumulator.EventAccumulator(str(directory))
    acc.Reload()
    return {t: {e.step: e.value for e in acc.Scalars(t)} for t in acc.Tags()["scalars"]}


@KERAS_NP_ARRAY
def test_the_default_layout_names_the_training_run_train_beside_eval_with_the_weights_histograms(
    tmp_path: Path,
) -> None:
    """Issue 38, item 1: TensorBoard lists the default layout's runs as ``train`` and ``eval`` (no
    run "." at the logdir's root); histogram_freq=N writes the offered variables' histograms at the
    first write at or past each N-th step."""
    fit_on_bus(TensorBoardSink(tmp_path, every_n_steps=4, histogram_freq=16), epochs=2)  # 8 steps an epoch
    assert sorted(str(p.parent.relative_to(tmp_path)) for p in tmp_path.rglob("events.out.*")) == ["eval", "train"]
    train = event_accumulator.EventAccumulator(str(tmp_path / "train"), {event_accumulator.HISTOGRAMS: 0})
    train.Reload()
    assert sorted(e.step for e in train.Scalars("loss")) == [4, 8, 12, 16]
    assert sorted(e.step for e in train.Histograms("sequential/dense/kernel/histogram")) == [4, 16]
    assert sorted(_scalars(tmp_path / "eval")["loss"]) == [8, 16]


def test_a_logdir_written_in_the_old_layout_goes_on_at_its_root(tmp_path: Path) -> None:
    """A run hookbus wrote before the training run had its directory (its ``.hookbus`` event files
    at the logdir's root) is resumed where it is: the new session's steps join the same run, and
    nothing goes to train/."""
    from tensorboard.compat.proto.event_pb2 import Event as EventProto
    from tensorboard.compat.proto.summary_pb2 import Summary
    from tensorboard.summary.writer.event_file_writer import EventFileWriter

    tf = pytest.importorskip("tensorflow")
    old = EventFileWriter(str(tmp_path), filename_suffix=".hookbus")  # as hookbus named its files
    for step in (1, 2):
        old.add_event(EventProto(step=step, summary=Summary(value=[Summary.Value(tag="loss", simple_value=1.0)])))
    old.close()
    bus = hookbus.EventBus()
    bus.attach(TensorBoardSink(tmp_path, every_n_steps=1))
    counter = tf.Variable(2, dtype=tf.int64)  # the old run's last step: this session resumes from it
    with bus, hookbus.LoopPublisher(bus, ["loss"], step_counter=counter) as loop:
        for _ in range(2):
            counter.assign_add(1)
            loop.step({"loss": float(counter.numpy())})
    assert not (tmp_path / "train").exists()
    assert _scalars(tmp_path)["loss"] == {1: 1.0, 2: 1.0, 3: 3.0, 4: 4.0}


@pytest.mark.parametrize("made", ["before", "after"])
def test_a_users_own_summary_writer_at_the_logdir_leaves_the_training_run_in_train(tmp_path: Path, made: str) -> None:
    """Issue 47: a ``tf.summary`` writer the user makes at the logdir, before ``with bus:`` or
    after it, writes its own run at the root; hookbus's training run stays ``train`` (before, a
    writer made first moved it to the root, as if the logdir were hookbus's old layout)."""
    tf = pytest.importorskip("tensorflow")
    bus = hookbus.EventBus()
    bus.attach(TensorBoardSink(tmp_path, every_n_steps=1))
    counter = tf.Variable(0, dtype=tf.int64)
    writer = tf.summary.create_file_writer(str(tmp_path)) if made == "before" else None
    with bus, hookbus.LoopPublisher(bus, ["loss"], step_counter=counter) as loop:
        if writer is None:
            writer = tf.summary.create_file_writer(str(tmp_path))
        for _ in range(3):
            counter.assign_add(1)
            loop.step({"loss": float(counter.numpy())})
            with writer.as_default():
                tf.summary.scalar("user/metric", 2.0, step=counter)
    writer.close()
    assert _scalars(tmp_path / "train")["loss"] == {1: 1.0, 2: 2.0, 3: 3.0}
    assert sorted(read_run(tmp_path)) == ["user/metric"]  # the user's run, alone at the root
    assert sorted(read_run(tmp_path)["user/metric"]) == [1, 2, 3]
