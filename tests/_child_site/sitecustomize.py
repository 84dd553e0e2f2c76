"""Run at the start of the Python processes the tests start (``tests/conftest.py`` puts this folder
on their ``PYTHONPATH``): Keras's scikit-learn wrappers are not loaded there.

``import tensorflow`` imports Keras, and Keras imports scikit-learn for its wrappers whenever it is
installed (MLflow brings it). That is a second or more of CPU in each of the hundreds of processes
the suite starts, for a module hookbus never uses. Marked absent, Keras skips it as it does where
scikit-learn is not installed. Nothing else changes: a test process itself, and any child started
with another ``PYTHONPATH``, loads it as usual.
"""

import sys

sys.modules.setdefault("sklearn", None)  # type: ignore[arg-type]
