"""``hookbus replay DIR`` over a directory of runs (issue 49 item 4), without a tracker: one CSV
file with a ``run`` column holding every run's rows as each run's own replay writes them, one
TensorBoard subdirectory per run, and a directory that holds no runs or a file that is not a log
refused before anything is written. The MLflow upload is in tests/_sinks/mlflow/test_mlflow_replay_runs.py."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
from _sweep_runs import RUNS, chief_log, points, sweep

from hookbus._cli._cli import main


def rows(path: Path) -> tuple[list[str], list[dict[str, str]]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader.fieldnames or []), list(reader)


def test_a_directory_of_runs_is_one_csv_file_with_a_run_column_each_step_once(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = sweep(tmp_path)
    expected: dict[str, list[dict[str, str]]] = {"": [], ".eval": []}
    for name in sorted(RUNS):  # each run alone, as `hookbus replay LOG --csv` writes it
        alone = tmp_path / "alone" / name / "m.csv"
        assert main(["replay", str(chief_log(runs, name)), "--csv", str(alone), "--csv-every-n-steps", "5"]) == 0
        for kind, found in expected.items():
            columns, read = rows(alone.with_name(f"m{kind}.csv"))
            assert read, (name, kind)
            found.extend({"run": name, **row} for row in read)
    capsys.readouterr()
    out = tmp_path / "out" / "all.csv"
    for attempt in (1, 2):  # a second replay writes the same files: each run's steps once
        assert main(["replay", str(runs), "--csv", str(out), "--csv-every-n-steps", "5"]) == 0, attempt
        printed = capsys.readouterr().out
        assert f"replayed {len(RUNS)} runs of {runs}" in printed
        for kind, want in expected.items():
            columns, read = rows(out.with_name(f"all{kind}.csv"))
            assert columns[0] == "run", columns
            assert read == want, (attempt, kind)
    train = rows(out)[1]
    assert [row["step"] for row in train if row["run"] == "lr-0.3"] == [str(s) for s in range(5, 31, 5)]
    # A cluster's run is its chief's log (worker 0's loss, not worker 1's).
    chief = dict(points(runs / "cluster" / "events.worker-0.jsonl")["loss"])
    assert [float(row["loss"]) for row in train if row["run"] == "cluster"] == [chief[s] for s in range(5, 31, 5)]
    assert sorted(p.name for p in out.parent.iterdir()) == ["all.csv", "all.eval.csv"]  # no temporary left


def test_a_directory_of_runs_is_one_tensorboard_subdirectory_per_run(tmp_path: Path) -> None:
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing import event_accumulator

    def scalars(logdir: Path) -> dict[str, list[tuple[int, float, float]]]:
        acc = event_accumulator.EventAccumulator(str(logdir), size_guidance={"scalars": 0}).Reload()
        return {tag: [(e.step, e.value, e.wall_time) for e in acc.Scalars(tag)] for tag in acc.Tags()["scalars"]}

    runs = sweep(tmp_path)
    every = ["--tensorboard-every-n-steps", "10"]
    assert main(["replay", str(runs), "--tensorboard", str(tmp_path / "tb"), *every]) == 0
    assert sorted(p.name for p in (tmp_path / "tb").iterdir()) == sorted(RUNS)
    for name in RUNS:
        alone = tmp_path / "alone" / name
        assert main(["replay", str(chief_log(runs, name)), "--tensorboard", str(alone), *every]) == 0
        for mode in ("train", "eval"):
            shown = scalars(tmp_path / "tb" / name / mode)
            assert shown, (name, mode)
            assert shown == scalars(alone / mode), (name, mode)
        assert [s for s, _, _ in scalars(tmp_path / "tb" / name / "train")["loss"]] == [10, 20, 30]


def test_a_directory_without_runs_fails_before_any_work(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    empty = tmp_path / "empty"
    (empty / "run-a").mkdir(parents=True)
    (empty / "run-a" / "notes.txt").write_text("no log here\n")
    assert main(["replay", str(empty), "--csv", str(tmp_path / "all.csv")]) == 2
    out, err = capsys.readouterr()
    assert out == ""
    assert f"hookbus replay: {empty} holds no runs: no event log (*.jsonl) in it or in its subdirectories" in err
    assert not (tmp_path / "all.csv").exists()


def test_a_file_that_is_not_a_log_fails_before_any_run_is_replayed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = sweep(tmp_path)
    stray = runs / "lr-0.3" / "notes.jsonl"  # sorted after lr-0.1 and cluster: found before any work
    stray.write_text("lr=0.3 looked good\n")
    out = tmp_path / "out"
    assert main(["replay", str(runs), "--csv", str(out / "all.csv"), "--tensorboard", str(out / "tb")]) == 2
    printed, err = capsys.readouterr()
    assert printed == ""
    assert f"hookbus replay: {stray} line 1 is not an event log record" in err, err
    assert not out.exists()


def test_a_directory_of_runs_refuses_one_run_name_and_says_what_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = sweep(tmp_path)
    argv = ["replay", str(runs), "--mlflow", "sqlite:///x.db", "--mlflow-run-name", "best"]
    assert main(argv) == 2
    printed, err = capsys.readouterr()
    assert printed == ""
    assert "--mlflow-run-name 'best' names one run; a directory of runs names each MLflow run after" in err, err
    assert main(["replay", str(runs)]) == 2
    printed, err = capsys.readouterr()
    assert printed == ""
    assert f"nothing asked for; {runs} holds 3 runs (cluster, lr-0.1, lr-0.3)" in err, err
    assert "--mlflow URI" in err


def test_a_run_whose_log_holds_no_record_yet_is_skipped_saying_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = sweep(tmp_path)
    (runs / "starting").mkdir()
    (runs / "starting" / "events.jsonl").touch()  # a run whose writer has not flushed yet
    out = tmp_path / "out" / "all.csv"
    assert main(["replay", str(runs), "--csv", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"starting: skipped, {runs / 'starting' / 'events.jsonl'} holds no record yet" in printed, printed
    assert f"replayed {len(RUNS)} runs of {runs} (1 skipped)" in printed, printed
    assert sorted({row["run"] for row in rows(out)[1]}) == sorted(RUNS)


def test_a_stop_rule_tried_on_each_run_says_what_it_says_on_that_runs_log(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    runs = sweep(tmp_path)
    rule = ["--early-stopping", "monitor=loss,patience=2,min_delta=0.05"]
    alone = {}
    for name in RUNS:
        assert main(["replay", str(chief_log(runs, name)), *rule]) == 0
        alone[name] = capsys.readouterr().out.splitlines()[-1]
    assert main(["replay", str(runs), *rule]) == 0
    printed = capsys.readouterr().out.splitlines()
    for name, line in alone.items():
        assert f"{name}: {line}" in printed, (name, printed)
    assert any("would have stopped at step" in line for line in alone.values()), alone  # the rule bites somewhere


def test_a_key_named_run_is_refused_for_the_one_csv_file_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import hookbus
    from hookbus.sinks import EventLogSink
    from hookbus.testing import ScriptedPublisher

    runs = sweep(tmp_path)
    log = runs / "lr-0.5" / "events.jsonl"
    bus = hookbus.EventBus(handle_signals=False)
    bus.attach(EventLogSink(log))
    bus.on("after_run", lambda event: None)
    pub = ScriptedPublisher(bus, keys=["loss", "run"])  # "run": the merged file's first column
    with bus:
        pub.begin()
        pub.session(0)
        pub.advance({"loss": 1.0, "run": 3.0})
        pub.end()
    out = tmp_path / "out" / "all.csv"
    assert main(["replay", str(runs), "--csv", str(out)]) == 2
    printed, err = capsys.readouterr()
    assert printed == ""
    assert f"--csv: {log} has a key named 'run', the column that names each run in the one file" in err, err
    assert not out.parent.exists()


def test_a_directory_of_runs_with_system_is_one_system_csv_with_a_run_column(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Each run's bus sampled the machine (its last sample as it closed): with --system, each run's
    # <stem>.system.csv rows, as that run's own replay writes them, land in one file with the run first.
    runs = sweep(tmp_path)
    expected: list[dict[str, str]] = []
    for name in sorted(RUNS):
        alone = tmp_path / "alone" / name / "m.csv"
        assert main(["replay", str(chief_log(runs, name)), "--csv", str(alone), "--system"]) == 0
        read = rows(alone.with_name("m.system.csv"))[1]
        assert read, name
        expected.extend({"run": name, **row} for row in read)
    out = tmp_path / "out" / "all.csv"
    assert main(["replay", str(runs), "--csv", str(out), "--system"]) == 0
    capsys.readouterr()
    columns, read = rows(out.with_name("all.system.csv"))
    assert columns[0] == "run", columns
    assert read == expected
    assert {row["run"] for row in read} == set(RUNS)
