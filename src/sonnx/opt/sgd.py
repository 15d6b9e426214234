"""Stochastic gradient descent with optional momentum, dampening, Nesterov and weight decay."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from sonnx.errors import BadInputError
from sonnx.opt.checks import in_unit_interval, non_negative
from sonnx.opt.optimizer import Optimizer, State
from sonnx.opt.schedules import DecayScheduler

__all__ = ["SGD"]


class SGD(Optimizer):
    """``p -= lr * d`` where ``d`` is the (momentum-filtered) gradient.

    Follows ``torch.optim.SGD`` (and SINGA 3): ``g = grad + weight_decay * p``; the momentum
    buffer starts as ``g`` and then becomes ``momentum * buf + (1 - dampening) * g``; the step
    direction is ``buf``, or ``g + momentum * buf`` with Nesterov.

    :param lr: the learning rate, a number >= 0 or a schedule.
    :param momentum: the momentum, in [0, 1).
    :param dampening: the dampening of the momentum, in [0, 1].
    :param weight_decay: the L2 penalty, >= 0.
    :param nesterov: use Nesterov momentum (needs ``momentum > 0`` and ``dampening = 0``).
    :raises BadInputError: a value outside its range, or ``nesterov`` not a bool or without
        momentum.
    """

    def __init__(
        self,
        lr: float | DecayScheduler = 0.1,
        momentum: float = 0.0,
        dampening: float = 0.0,
        weight_decay: float = 0.0,
        nesterov: bool = False,
    ) -> None:
        super().__init__(
            lr,
            momentum=momentum,
            dampening=dampening,
            weight_decay=weight_decay,
            nesterov=nesterov,
        )

    def validate(self, hp: dict[str, Any]) -> None:
        """Check the ranges of the class's parameters and Nesterov's needs.

        :param hp: every hyper-parameter by name (see :meth:`Optimizer.validate`).
        :raises BadInputError: a value outside its range, or ``nesterov`` not a bool or
            without momentum.
        """
        name = type(self).__name__
        in_unit_interval(name, "momentum", hp["momentum"])
        in_unit_interval(name, "dampening", hp["dampening"], closed=True)
        non_negative(name, "weight_decay", hp["weight_decay"])
        if not isinstance(hp["nesterov"], bool):
            raise BadInputError(f"{name}: nesterov must be a bool, received {hp['nesterov']!r}")
        if hp["nesterov"] and (hp["momentum"] <= 0 or hp["dampening"] != 0):
            raise BadInputError(
                f"{name}: nesterov=True requires momentum > 0 and dampening = 0, received "
                f"momentum={hp['momentum']!r}, dampening={hp['dampening']!r}"
            )

    def update_tensor(
        self, p: torch.Tensor, g: torch.Tensor, state: State, lr: float, hp: Mapping[str, Any]
    ) -> None:
        """One SGD step on ``p`` (see the class); ``state`` holds ``momentum_buffer`` once
        ``momentum`` is used.

        :param p: the parameter's torch tensor, updated in place.
        :param g: its gradient.
        :param state: its state, updated in place.
        :param lr: the learning rate of this step.
        :param hp: the hyper-parameters in force for it.
        """
        if hp["weight_decay"] != 0:
            g = g.add(p, alpha=hp["weight_decay"])
        momentum = hp["momentum"]
        if momentum != 0:
            buf = state.get("momentum_buffer")
            if buf is None:
                buf = state["momentum_buffer"] = g.clone()
            else:
                buf.mul_(momentum).add_(g, alpha=1 - hp["dampening"])
            g = g.add(buf, alpha=momentum) if hp["nesterov"] else buf
        p.add_(g, alpha=-lr)

    def update_tensors(
        self,
        ps: list[torch.Tensor],
        gs: list[torch.Tensor],
        states: list[State],
        lr: float,
        hp: Mapping[str, Any],
    ) -> None:
        """The same rule with torch's multi-tensor kernels: a few calls instead of a few per
        parameter (what ``torch.optim.SGD(foreach=True)`` does).

        :param ps: the parameters' torch tensors, updated in place.
        :param gs: their gradients, in the same order.
        :param states: their states, in the same order, updated in place.
        :param lr: the learning rate of this step.
        :param hp: the hyper-parameters they share.
        """
        if hp["weight_decay"] != 0:
            gs = torch._foreach_add(gs, ps, alpha=hp["weight_decay"])
        momentum = hp["momentum"]
        if momentum != 0:
            bufs = [state.get("momentum_buffer") for state in states]
            running = [k for k, buf in enumerate(bufs) if buf is not None]
            if running:
                kept = [bufs[k] for k in running]
                torch._foreach_mul_(kept, momentum)
                torch._foreach_add_(kept, [gs[k] for k in running], alpha=1 - hp["dampening"])
            for k, buf in enumerate(bufs):
                if buf is None:
                    bufs[k] = states[k]["momentum_buffer"] = gs[k].clone()
            gs = torch._foreach_add(gs, bufs, alpha=momentum) if hp["nesterov"] else bufs
        torch._foreach_add_(ps, gs, alpha=-lr)
