"""``python -m hookbus`` is the ``hookbus`` command (issue 46): the same help, the same exit statuses."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

#: The console script pip installs beside this Python (``pyproject.toml``'s ``[project.scripts]``).
SCRIPT = Path(sys.executable).parent / "hookbus"


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize(("arguments", "status"), [(["--help"], 0), (["--version"], 0), ([], 2)])
def test_python_m_hookbus_is_the_console_script(arguments: list[str], status: int) -> None:
    assert SCRIPT.is_file(), f"{SCRIPT}: the console script is installed with the package (pip install -e .)"
    as_module = _run(sys.executable, "-m", "hookbus", *arguments)
    as_script = _run(str(SCRIPT), *arguments)
    assert (as_module.returncode, as_module.stdout, as_module.stderr) == (status, as_script.stdout, as_script.stderr)
    assert as_script.returncode == status
    if arguments != ["--version"]:
        assert (as_module.stdout + as_module.stderr).startswith("usage: hookbus ")
