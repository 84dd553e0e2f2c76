"""Keys are names: line breaks and control characters are refused before step 1; every other
character works in every sink — CSV (also on resume), TensorBoard tags, the dashboard, early
stopping and checkpoint ranking."""

from __future__ import annotations

import csv
import io
import math
import re
from pathlib import Path
from typing import Any

import pytest
from rich.console import Console

import hookbus
from hookbus import EventBus, LoopPublisher
from hookbus.sinks import (
    CheckpointSink,
    ConsoleSink,
    CSVSink,
    EarlyStoppingSink,
    NanGuardSink,
    StopAtStepSink,
    TensorBoardSink,
)
from hookbus.testing import ScriptedPublisher

#: Every character str.splitlines splits on, and a sample of the other C0 and C1 controls.
LINE_BREAKS = ["\n", "\r", "\r\n", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029"]
CONTROLS = ["\x00", "\t", "\x1b", "\x1f", "\x7f", "\x80", "\x9b", "\x9f"]
#: Names as users write them: spaces, commas, quotes, brackets, unicode, '=', '/', emoji.
ODD = [
    "loss (train)",
    "a,b",
    'say "hi"',
    "x[0]",
    "[bold]y",
    "ünïcödé",
    "📉 loss",
    "k=v",
    "a/b",
    " padded ",
    "semi;colon",
    "'single'",
    "back\\slash",
    "nbsp\u00a0here",
]
MONITORED, RANKED = "loss (train)", "a,b"


# -- refused before step 1, naming the key ----------------------------------------------------


def _bad_keys() -> list[str]:
    return [f"loss{c}x" for c in LINE_BREAKS + CONTROLS]


def _expected(key: str) -> str:
    return rf"{re.escape(repr(key))}.*keys are names"


@pytest.mark.parametrize("key", _bad_keys(), ids=ascii)
@pytest.mark.parametrize(
    "declare",
    [
        pytest.param(lambda bus, k: ScriptedPublisher(bus, ["loss", k]), id="publisher keys"),
        pytest.param(lambda bus, k: LoopPublisher(bus, keys=["loss", k]), id="loop keys"),
        pytest.param(lambda bus, k: LoopPublisher(bus, keys="loss", eval_keys=[k]), id="loop eval keys"),
        pytest.param(lambda bus, k: bus.on("after_run", print, keys=[k]), id="bus.on keys"),
        pytest.param(lambda bus, k: CSVSink("unused.csv", keys=k), id="sink keys"),
        pytest.param(lambda bus, k: NanGuardSink(k), id="nan guard keys"),
        pytest.param(lambda bus, k: EarlyStoppingSink(k, mode="min"), id="early stopping monitor"),
        pytest.param(lambda bus, k: CheckpointSink("unused", keep_best=1, monitor=k), id="checkpoint monitor"),
        pytest.param(lambda bus, k: ConsoleSink(goals={k: "min"}), id="dashboard goals"),
    ],
)
def test_line_breaks_and_control_characters_are_refused_at_construction(key: str, declare: Any) -> None:
    bus = EventBus()
    with pytest.raises(ValueError, match=_expected(key)):
        declare(bus, key)


def test_the_message_names_the_key_the_character_and_what_is_expected() -> None:
    with pytest.raises(ValueError, match="keys are names") as error:
        ScriptedPublisher(EventBus(), ["loss", "acc\nval"])
    assert str(error.value) == (
        "fetch key 'acc\\nval' contains a line break ('\\n', U+000A); keys are names: any character but "
        "line breaks and control characters (U+0000-U+001F, U+007F-U+009F, U+2028, U+2029)"
    )


def test_a_tf1_hook_refuses_a_fetch_key_with_a_line_break_before_step_1(tf_graph: Any) -> None:
    from hookbus._cli._demo import build_linear_regression

    model = build_linear_regression()
    with pytest.raises(ValueError, match=_expected("loss\r")):
        hookbus.EventBusHook(EventBus(), {"loss\r": model.loss}, train_op=model.train_op)


def test_a_keras_metric_name_with_a_line_break_fails_at_the_first_step_naming_it(tmp_path: Path) -> None:
    """Keras's log names arrive with the first batch; a metric named with a line break (written to
    the epoch CSV and TensorBoard as it comes) fails there, before a second step runs."""
    tf = pytest.importorskip("tensorflow")
    keras = tf.keras
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse", metrics=[keras.metrics.MeanAbsoluteError(name="mae\nbad")])
    bus = EventBus()
    steps: list[int] = []
    bus.on("after_run", lambda e: steps.append(e.step))
    callback = hookbus.EventBusCallback(bus, keys=["loss"])
    x = tf.zeros((8, 2))
    with pytest.raises(ValueError, match=_expected("mae\nbad")), bus:
        model.fit(x, tf.zeros((8, 1)), batch_size=2, epochs=1, callbacks=[callback], verbose=0)
    assert int(model.optimizer.iterations.numpy()) <= 1
    assert steps in ([], [1])


# -- every other character works in every sink, through a real run and a resume ------------------


class _Crash(Exception):
    pass


def _train(tmp_path: Path, last_step: int, crash_after: int | None) -> dict[str, Any]:
    """One process's run of the seed model publishing ODD keys, with every sink attached."""
    tf = pytest.importorskip("tensorflow")
    from hookbus._cli._demo import build_linear_regression

    with tf.Graph().as_default():
        model = build_linear_regression()
        fetches = {key: model.loss * (i + 1) for i, key in enumerate(ODD)}
        bus = EventBus()
        console = Console(file=io.StringIO(), width=400, color_system=None)
        early = EarlyStoppingSink(MONITORED, mode="min", patience=1000)
        sinks = [
            CSVSink(tmp_path / "m.csv", every_n_steps=1),
            TensorBoardSink(tmp_path / "tb", every_n_steps=1),
            ConsoleSink(console, live=False, every_n_steps=1, plain_every_n_secs=0),
            early,
            CheckpointSink(tmp_path / "ckpt", every_n_steps=5, keep_best=1, monitor=RANKED, mode="min"),
            NanGuardSink(ODD),
            StopAtStepSink(last_step=last_step),
        ]
        for sink in sinks:
            bus.attach(sink)
        train = hookbus.EventBusHook(bus, fetches, train_op=model.train_op)
        evaluate = hookbus.EventBusHook(bus, {key: model.eval_loss for key in ODD[:3]}, mode="eval")
        with bus:
            with hookbus.monitored_training_session(hooks=[train], checkpoint_dir=str(tmp_path / "ckpt")) as s:
                while not s.should_stop():
                    s.run(model.train_op)
                    if crash_after is not None and bus.step == crash_after:
                        raise _Crash  # after the checkpoint at 10: rows 11..13 must be rewritten
            with hookbus.monitored_training_session(hooks=[evaluate], checkpoint_dir=str(tmp_path / "ckpt")) as s:
                s.run(model.eval_loss)
        return {"console": console.file.getvalue(), "early": early}  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def odd_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    tmp_path = tmp_path_factory.mktemp("names")
    with pytest.raises(_Crash):
        _train(tmp_path, 20, crash_after=13)
    return tmp_path, _train(tmp_path, 15, crash_after=None)


def _read_csv(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


def test_csv_header_and_rows_survive_a_resume_with_odd_names(odd_run: Any) -> None:
    tmp_path, _ = odd_run
    header, rows = _read_csv(tmp_path / "m.csv")
    assert header == ["step", "wall_time", *sorted(ODD)]  # the columns are the sorted keys
    assert [int(r["step"]) for r in rows] == list(range(1, 16))  # 11..13 dropped at the resume, written once
    for row in rows:
        base = float(row[ODD[0]])
        assert all(math.isclose(float(row[k]), base * (i + 1), rel_tol=1e-6) for i, k in enumerate(ODD))
    eval_header, eval_rows = _read_csv(tmp_path / "m.eval.csv")
    assert eval_header == ["step", "wall_time", *sorted(ODD[:3])]
    assert [int(r["step"]) for r in eval_rows] == [15]


def test_tensorboard_tags_are_the_names_read_back_by_event_accumulator(odd_run: Any) -> None:
    from tensorboard.backend.event_processing import event_accumulator

    tmp_path, _ = odd_run
    size = {"scalars": 0}
    train = event_accumulator.EventAccumulator(str(tmp_path / "tb" / "train"), size_guidance=size).Reload()
    assert set(ODD) <= set(train.Tags()["scalars"])
    _, rows = _read_csv(tmp_path / "m.csv")
    for key in ODD:
        got = {e.step: e.value for e in train.Scalars(key)}
        assert sorted(got) == list(range(1, 16)), key
        assert all(math.isclose(got[int(r["step"])], float(r[key]), rel_tol=1e-6) for r in rows), key
    evals = event_accumulator.EventAccumulator(str(tmp_path / "tb" / "eval"), size_guidance=size).Reload()
    assert set(ODD[:3]) <= set(evals.Tags()["scalars"])


def test_the_dashboard_shows_every_name_literally(odd_run: Any) -> None:
    _, result = odd_run
    out = result["console"]
    line = next(ln for ln in out.splitlines() if ln.startswith("step 15"))
    for key in ODD:
        assert f"| {key} " in line, key
        assert f"  {key}: last " in out, key


def test_early_stopping_and_checkpoint_ranking_use_odd_monitor_names(odd_run: Any) -> None:
    tmp_path, result = odd_run
    _, rows = _read_csv(tmp_path / "m.csv")
    assert result["early"].state.best == min(float(r[MONITORED]) for r in rows)
    best = [p.name for p in (tmp_path / "ckpt").iterdir() if p.name.endswith(".index")]
    assert best  # checkpoints were saved and ranked by "a,b"
