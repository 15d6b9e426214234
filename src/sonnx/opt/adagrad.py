"""AdaGrad: per-coordinate steps shrinking with the accumulated squared gradient."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from sonnx.opt.checks import non_negative
from sonnx.opt.optimizer import Optimizer, State
from sonnx.opt.schedules import DecayScheduler

__all__ = ["AdaGrad"]


class AdaGrad(Optimizer):
    """``h += g²;  p -= lr * g / (sqrt(h) + epsilon)`` (``torch.optim.Adagrad`` with no
    learning-rate decay and a zero initial accumulator); ``weight_decay`` adds
    ``weight_decay * p`` to the gradient.

    :param lr: the learning rate, a number >= 0 or a schedule.
    :param epsilon: added to the denominator, >= 0.
    :param weight_decay: the L2 penalty, >= 0.
    :raises BadInputError: a value outside its range.
    """

    def __init__(
        self,
        lr: float | DecayScheduler = 0.1,
        epsilon: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(lr, epsilon=epsilon, weight_decay=weight_decay)

    def validate(self, hp: dict[str, Any]) -> None:
        """Check the ranges of the class's parameters.

        :param hp: every hyper-parameter by name (see :meth:`Optimizer.validate`).
        :raises BadInputError: a value outside its range.
        """
        name = type(self).__name__
        non_negative(name, "epsilon", hp["epsilon"])
        non_negative(name, "weight_decay", hp["weight_decay"])

    def update_tensor(
        self, p: torch.Tensor, g: torch.Tensor, state: State, lr: float, hp: Mapping[str, Any]
    ) -> None:
        """One AdaGrad step on ``p`` (see the class); ``state`` holds ``sum``, the running sum
        of squared gradients.

        :param p: the parameter's torch tensor, updated in place.
        :param g: its gradient.
        :param state: its state, updated in place.
        :param lr: the learning rate of this step.
        :param hp: the hyper-parameters in force for it.
        """
        if hp["weight_decay"] != 0:
            g = g.add(p, alpha=hp["weight_decay"])
        h = state.get("sum")
        if h is None:
            h = state["sum"] = torch.zeros_like(p)
        h.addcmul_(g, g, value=1)
        p.addcdiv_(g, h.sqrt().add_(hp["epsilon"]), value=-lr)
