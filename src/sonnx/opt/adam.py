"""Adam and AdamW (decoupled weight decay)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import torch

from sonnx.opt.checks import in_unit_interval, non_negative
from sonnx.opt.optimizer import Optimizer, State
from sonnx.opt.schedules import DecayScheduler

__all__ = ["Adam", "AdamW"]


class Adam(Optimizer):
    """Adam (Kingma & Ba) in ``torch.optim.Adam``'s form.

    ``m`` and ``v`` are exponential averages of ``g`` and ``g²``; with bias corrections
    ``c1 = 1 - beta_1^t`` and ``c2 = 1 - beta_2^t`` the step is
    ``p -= lr / c1 * m / (sqrt(v) / sqrt(c2) + epsilon)`` — epsilon is added after the square
    root and after correcting ``v``. ``weight_decay`` adds ``weight_decay * p`` to the gradient
    (L2 regularisation); :class:`AdamW` decays the weights directly instead.

    :param lr: the learning rate, a number >= 0 or a schedule.
    :param beta_1: the decay of the gradient average, in [0, 1).
    :param beta_2: the decay of the squared-gradient average, in [0, 1).
    :param epsilon: added to the denominator, >= 0.
    :param weight_decay: the L2 penalty added to the gradient, >= 0.
    :raises BadInputError: a value outside its range.
    """

    decoupled_weight_decay = False

    def __init__(
        self,
        lr: float | DecayScheduler = 1e-3,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        weight_decay: float = 0.0,
    ) -> None:
        super().__init__(
            lr, beta_1=beta_1, beta_2=beta_2, epsilon=epsilon, weight_decay=weight_decay
        )

    def validate(self, hp: dict[str, Any]) -> None:
        """Check the ranges of the class's parameters.

        :param hp: every hyper-parameter by name (see :meth:`Optimizer.validate`).
        :raises BadInputError: a value outside its range.
        """
        name = type(self).__name__
        in_unit_interval(name, "beta_1", hp["beta_1"])
        in_unit_interval(name, "beta_2", hp["beta_2"])
        non_negative(name, "epsilon", hp["epsilon"])
        non_negative(name, "weight_decay", hp["weight_decay"])

    def update_tensor(
        self, p: torch.Tensor, g: torch.Tensor, state: State, lr: float, hp: Mapping[str, Any]
    ) -> None:
        """One Adam (or AdamW) step on ``p`` (see the class); ``state`` holds ``step`` (this
        parameter's update count, for the bias corrections), ``m`` and ``v``.

        :param p: the parameter's torch tensor, updated in place.
        :param g: its gradient.
        :param state: its state, updated in place.
        :param lr: the learning rate of this step.
        :param hp: the hyper-parameters in force for it.
        """
        if not state:
            # host: read with .item() every update, which on the host costs no GPU sync
            state["step"] = torch.tensor(0, dtype=torch.int64)
            state["m"] = torch.zeros_like(p)
            state["v"] = torch.zeros_like(p)
        state["step"] += 1
        t = int(state["step"].item())
        beta_1, beta_2, wd = hp["beta_1"], hp["beta_2"], hp["weight_decay"]
        if wd != 0:
            if self.decoupled_weight_decay:
                p.mul_(1 - lr * wd)
            else:
                g = g.add(p, alpha=wd)
        m, v = state["m"], state["v"]
        m.lerp_(g, 1 - beta_1)
        v.mul_(beta_2).addcmul_(g, g, value=1 - beta_2)
        denom = (v.sqrt() / math.sqrt(1 - beta_2**t)).add_(hp["epsilon"])
        p.addcdiv_(m, denom, value=-lr / (1 - beta_1**t))


class AdamW(Adam):
    """Adam with decoupled weight decay (``torch.optim.AdamW``): ``p *= 1 - lr * weight_decay``
    before the Adam step, and the gradient is left alone.

    :param lr: the learning rate, a number >= 0 or a schedule.
    :param beta_1: the decay of the gradient average, in [0, 1).
    :param beta_2: the decay of the squared-gradient average, in [0, 1).
    :param epsilon: added to the denominator, >= 0.
    :param weight_decay: the decoupled weight decay, >= 0.
    :raises BadInputError: a value outside its range.
    """

    decoupled_weight_decay = True

    def __init__(
        self,
        lr: float | DecayScheduler = 1e-3,
        beta_1: float = 0.9,
        beta_2: float = 0.999,
        epsilon: float = 1e-8,
        weight_decay: float = 1e-2,
    ) -> None:
        super().__init__(lr, beta_1, beta_2, epsilon, weight_decay)
