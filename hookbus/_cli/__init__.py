"""The ``hookbus`` command: ``demo``, ``watch`` and ``replay``, and TensorFlow's start-up notices kept
off the screen.
"""
