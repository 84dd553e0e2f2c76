"""One evaluation per training step: the rule every sink and early stopping see alike.

It concerns evaluations of training (an eval publisher's, fit's validation); a test evaluation
(``mode="test"``: Keras's ``model.evaluate`` outside ``fit``) is published every time.

A loop whose step does not advance evaluates one step several times: under mixed precision a
``LossScaleOptimizer`` skips non-finite steps without advancing ``iterations``, so a loop that
evaluates on ``step % n == 0`` evaluates step 0 once per skipped step. Published, each would be
one more evaluation for early stopping and one more TensorBoard point, while the CSV keeps one
row. The rule, applied where evaluations are published (``PublisherCore.publish_eval``): the
first evaluation of a step counts; a later one of the same step, by the same eval publisher,
since the resume point before it, is published to no subscriber, and a warning says so once
per run. A resume point at S (a session restored or re-created at S) makes evaluations of
steps after S count again: they are regenerated, as every output drops what came after S.
"""

from __future__ import annotations

import logging

__all__ = ["EvaluatedSteps"]

logger = logging.getLogger("hookbus")


class EvaluatedSteps:
    """The training steps each eval publisher (by its keys) has published an evaluation of, in one run."""

    def __init__(self) -> None:
        self._steps: dict[frozenset[str], set[int]] = {}
        self._warned = False

    def first(self, keys: frozenset[str], step: int) -> bool:
        """Whether an evaluation of ``keys`` at ``step`` counts (the first one); warns once if not."""
        steps = self._steps.setdefault(keys, set())
        if step not in steps:
            steps.add(step)
            return True
        if not self._warned:
            self._warned = True
            logger.warning(
                "an evaluation of %s at step %d repeats one already published at that step; the first "
                "evaluation of a step counts (every sink and early stopping see it once) and later ones "
                "are not published. The same training step was evaluated twice: the step did not advance "
                "between the two (training steps that do not count, e.g. a LossScaleOptimizer skipping "
                "non-finite steps, leave it where it was), or the same step was evaluated again. (Keras's "
                "model.evaluate outside fit is a test evaluation, test/ keys, which this rule does not "
                "concern.) Further repeats in this run are not reported",
                ", ".join(sorted(keys)),
                step,
            )
        return False

    def resume(self, step: int) -> None:
        """Training resumes at ``step``: evaluations of later steps are made again, and count."""
        for steps in self._steps.values():
            steps.difference_update([s for s in steps if s > step])
