"""The publisher for hand-written eager and tf.function training loops, and per-replica values."""
