"""Checkpoint storage, free of TensorFlow: where checkpoints and the sink states beside them live, and
the backend a publisher saves through.
"""
