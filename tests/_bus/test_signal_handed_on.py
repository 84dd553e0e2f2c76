"""A stop signal ends the process once the run it stopped is saved (issue 45 item 4).

CI's lowest-TensorFlow tier once failed a Keras test whose ``fit`` stopped after its first epoch,
with no error. A SIGTERM sent to the whole process group (a CI run stopped from outside) reached
pytest inside that test's ``with bus:``, which turned it into a graceful stop, as it should, and
then swallowed it: the fit returned early, the test failed on its numbers, and pytest went on to
the next test. Here the same in a real pytest process, without TensorFlow: the first test trains
until a SIGTERM comes, the second would train after it. The SIGTERM now ends the run saved and
then the process, as it asks; the second test never starts. A program's own SIGTERM handler,
installed before ``with bus:``, gets the signal instead once the run has ended.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

SUITE = textwrap.dedent(
    """
    import os, signal, time
    from pathlib import Path
    import hookbus
    from hookbus.sinks import CSVSink
    from hookbus.testing import ScriptedPublisher

    OUT = Path(os.environ["HOOKBUS_TEST_OUT"])

    def train(name, steps):
        bus = hookbus.EventBus()
        bus.attach(CSVSink(OUT / f"{name}.csv", every_n_steps=1))
        publisher = ScriptedPublisher(bus, keys=["loss"])
        with bus:
            publisher.begin()
            publisher.session(0)
            for step in range(1, steps + 1):
                if step == 5:
                    (OUT / f"{name}.training").touch()  # the test sends SIGTERM now
                time.sleep(0.01)
                if publisher.advance({"loss": 1.0}):
                    break
            publisher.end()
        return bus.step

    def test_a_long_training():
        assert train("first", 3000) == 3000

    def test_the_next_training():
        assert train("second", 20) == 20
    """
)


def _steps(path: Path) -> list[int]:
    return [int(line.split(",")[0]) for line in path.read_text().splitlines()[1:]]


def test_a_sigterm_inside_a_tests_with_bus_ends_the_test_process_once_the_run_is_saved(tmp_path: Path) -> None:
    (tmp_path / "test_suite.py").write_text(SUITE)
    env = {**os.environ, "HOOKBUS_TEST_OUT": str(tmp_path)}
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_suite.py"]
    child = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        until = time.monotonic() + 120
        while not (tmp_path / "first.training").exists():
            assert child.poll() is None, child.communicate()[0]
            assert time.monotonic() < until
            time.sleep(0.02)
        child.send_signal(signal.SIGTERM)
        out, _ = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    # Before: "1 failed, 1 passed" and exit status 1, the second training run after the SIGTERM.
    assert child.returncode == -signal.SIGTERM, out
    assert not (tmp_path / "second.csv").exists(), out
    steps = _steps(tmp_path / "first.csv")  # the stopped run: every step up to the stop, written
    assert steps == list(range(1, len(steps) + 1))
    assert 5 <= len(steps) < 3000


def test_a_programs_own_sigterm_handler_gets_the_signal_once_the_run_has_ended(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import signal, sys, time
        import hookbus
        from hookbus.testing import ScriptedPublisher

        calls = []
        signal.signal(signal.SIGTERM, lambda signum, frame: calls.append((signum, bus.should_stop)))
        bus = hookbus.EventBus()
        bus.on("end", lambda event: print("calls at the end", calls, flush=True))
        publisher = ScriptedPublisher(bus, keys=["loss"])
        with bus:
            publisher.begin()
            publisher.session(0)
            for step in range(1, 3000):
                if step == 5:
                    print("training", flush=True)
                time.sleep(0.01)
                if publisher.advance({"loss": 1.0}):
                    break
            publisher.end()
        print("after the run", bus.step, bus.stop_reason, calls, flush=True)
        """
    )
    child = subprocess.Popen(
        [sys.executable, "-c", script], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        assert child.stdout is not None
        assert child.stdout.readline() == "training\n"
        child.send_signal(signal.SIGTERM)
        out, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == 0, err
    assert "calls at the end []" in out  # during the run the bus holds it: a graceful stop
    (after,) = [line for line in out.splitlines() if line.startswith("after the run")]
    assert after.endswith(f"received SIGTERM [({int(signal.SIGTERM)}, True)]"), after  # then the program's
