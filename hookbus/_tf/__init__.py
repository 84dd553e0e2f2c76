"""The TensorFlow backends all publishers share: the one lazy import, checkpoints, learning rates,
weights, the profiler and collectives.
"""
