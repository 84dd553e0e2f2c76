"""The demo's filter for TensorFlow's start-up notices, on real file descriptors (no TensorFlow)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

from hookbus._cli._startup_notices import drop_info_records

BANNER = b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
ONEDNN = b"I0000 00:00:1796051360.572646    2442 port.cc:153] oneDNN custom operations are on.\n"
FEATURES = (
    b"I0000 00:00:1796051360.628465    2442 cpu_feature_guard.cc:227] This TensorFlow binary is optimized.\n"
    b"To enable the following instructions: AVX2 FMA, in other operations, rebuild TensorFlow.\n"
)
TSL_INFO = b"2026-11-30 15:00:00.123456: I tensorflow/core/platform/cpu_feature_guard.cc:210] optimized\n"
ABSL_WARNING = b"W0000 00:00:1796051361.000001    2442 gpu_device.cc:2344] Cannot dlopen some GPU libraries.\n"
TSL_ERROR = b"2026-11-30 15:00:00.223456: E tensorflow/core/framework/op_kernel.cc:1830] OP_REQUIRES failed\n"


def run_python(script: str) -> subprocess.CompletedProcess[bytes]:
    """``python -c script``, showing warnings the default way whatever PYTHONWARNINGS says here.

    An inherited PYTHONWARNINGS=ignore would hide the child's warning, =error would raise it.
    """
    env = {k: v for k, v in os.environ.items() if k != "PYTHONWARNINGS"}
    argv = [sys.executable, "-W", "default", "-c", script]
    return subprocess.run(argv, capture_output=True, env=env, timeout=60, check=False)


def test_info_records_and_the_banner_go_everything_else_stays() -> None:
    plain = b"a line from a library that is not a log record\n"
    data = plain + BANNER + ONEDNN + FEATURES + ABSL_WARNING + TSL_INFO + TSL_ERROR + BANNER + ONEDNN
    assert drop_info_records(data) == plain + ABSL_WARNING + TSL_ERROR
    # A warning's continuation lines stay with it; an unfinished last line is kept as written.
    tail = b"  more about the warning\n"
    assert drop_info_records(ABSL_WARNING + tail + b"partial") == ABSL_WARNING + tail + b"partial"
    assert drop_info_records(b"") == b""


def test_held_notices_leave_native_warnings_and_python_output_on_stderr() -> None:
    # A child writes like TensorFlow's C++ code does (straight to descriptor 2) inside the block,
    # and like Python code does (sys.stderr, warnings) beside it.
    script = textwrap.dedent(
        f"""
        import os, sys, warnings
        from hookbus._cli._startup_notices import held_startup_notices
        sys.stderr.write("before\\n")
        with held_startup_notices():
            os.write(2, {BANNER + ONEDNN + FEATURES + ABSL_WARNING!r})
            warnings.warn("the user's warning")
            print("python stderr inside", file=sys.stderr)
            os.write(2, {BANNER + ONEDNN!r})
        print("after", file=sys.stderr)
        """
    )
    result = run_python(script)
    assert result.returncode == 0, result.stderr
    err = result.stderr.decode()
    assert "oneDNN" not in err
    assert "absl::InitializeLog" not in err
    assert "cpu_feature_guard" not in err
    assert "To enable the following instructions" not in err
    lines = err.splitlines()
    # Python's output appears when written; the held native warning is replayed at the block's end.
    assert lines[0] == "before"
    assert "UserWarning: the user's warning" in lines[1]
    assert lines[2:] == ["python stderr inside", ABSL_WARNING.decode().rstrip("\n"), "after"]


def test_held_notices_are_replayed_when_the_block_raises() -> None:
    script = textwrap.dedent(
        f"""
        import os
        from hookbus._cli._startup_notices import held_startup_notices
        try:
            with held_startup_notices():
                os.write(2, {ONEDNN + ABSL_WARNING!r})
                raise ImportError("no tensorflow")
        except ImportError as error:
            print("caught", error)
        """
    )
    result = run_python(script)
    assert result.returncode == 0, result.stderr
    assert result.stdout.decode().strip() == "caught no tensorflow"
    assert result.stderr == ABSL_WARNING
