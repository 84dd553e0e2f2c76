"""The custom loop's pieces for the MultiWorkerMirroredStrategy test children (``_tf/_mwms_child.py``,
``_sinks/_profiler_child.py``): every worker reads every batch, and one step is a mean squared error's
gradient, all-reduced, with the loss summed over the replicas.
"""

from __future__ import annotations

from typing import Any

__all__ = ["mse_train_step", "unsharded_batches"]


def unsharded_batches(tf: Any, strategy: Any, data: Any) -> Any:
    """An iterator over ``data`` distributed by ``strategy`` without sharding (the same batches on
    every worker: the workers train the same steps)."""
    options = tf.data.Options()
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.OFF
    return iter(strategy.experimental_distribute_dataset(data.with_options(options)))


def mse_train_step(tf: Any, strategy: Any, model: Any, optimizer: Any) -> Any:
    """``train_step(iterator) -> {"loss": ...}``: one step of ``model`` on the next batch, as a
    ``tf.function`` (the loss divided by the replicas per replica, summed over them)."""

    @tf.function  # type: ignore[untyped-decorator]
    def train_step(iterator: Any) -> Any:
        def step(xb: Any, yb: Any) -> Any:
            with tf.GradientTape() as tape:
                loss = tf.reduce_mean((model(xb) - yb) ** 2) / strategy.num_replicas_in_sync
            grads = tape.gradient(loss, model.trainable_variables)
            optimizer.apply_gradients(zip(grads, model.trainable_variables, strict=True))
            return loss

        return {"loss": strategy.reduce("SUM", strategy.run(step, args=next(iterator)), axis=None)}

    return train_step
