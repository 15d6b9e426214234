"""RMSProp: scale each step by a running root-mean-square of recent gradients."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from sonnx.opt.checks import in_unit_interval, non_negative
from sonnx.opt.optimizer import Optimizer, State
from sonnx.opt.schedules import DecayScheduler

__all__ = ["RMSProp"]


class RMSProp(Optimizer):
    """``v = rho * v + (1 - rho) * g²;  p -= lr * g / (sqrt(v) + epsilon)``.

    ``torch.optim.RMSprop`` with ``alpha=rho`` (no momentum, not centred); ``weight_decay``
    adds ``weight_decay * p`` to the gradient.

    :param lr: the learning rate, a number >= 0 or a schedule.
    :param rho: the decay of the squared-gradient average, in [0, 1).
    :param epsilon: added to the denominator, >= 0.
    :param weight_decay: the L2 penalty, >= 0.
    :raises BadInputError: a value outside its range.
    """

    def __init__(
        self,
        lr: float | DecayScheduler = 0.1,
        rho: float = 0.9,
        epsilon: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(lr, rho=rho, epsilon=epsilon, weight_decay=weight_decay)

    def validate(self, hp: dict[str, Any]) -> None:
        """Check the ranges of the class's parameters.

        :param hp: every hyper-parameter by name (see :meth:`Optimizer.validate`).
        :raises BadInputError: a value outside its range.
        """
        name = type(self).__name__
        in_unit_interval(name, "rho", hp["rho"])
        non_negative(name, "epsilon", hp["epsilon"])
        non_negative(name, "weight_decay", hp["weight_decay"])

    def update_tensor(
        self, p: torch.Tensor, g: torch.Tensor, state: State, lr: float, hp: Mapping[str, Any]
    ) -> None:
        """One RMSProp step on ``p`` (see the class); ``state`` holds ``square_avg``, the
        running average of squared gradients.

        :param p: the parameter's torch tensor, updated in place.
        :param g: its gradient.
        :param state: its state, updated in place.
        :param lr: the learning rate of this step.
        :param hp: the hyper-parameters in force for it.
        """
        if hp["weight_decay"] != 0:
            g = g.add(p, alpha=hp["weight_decay"])
        v = state.get("square_avg")
        if v is None:
            v = state["square_avg"] = torch.zeros_like(p)
        rho = hp["rho"]
        v.mul_(rho).addcmul_(g, g, value=1 - rho)
        p.addcdiv_(g, v.sqrt().add_(hp["epsilon"]), value=-lr)
