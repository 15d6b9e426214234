"""Optimizer update operators of the ``ai.onnx.preview.training`` domain: Adagrad, Adam, Momentum.

Each node updates several tensors at once. Its inputs are the learning rate ``R`` (a float
scalar), the update count ``T`` (an int64 scalar) and then, group by group, every optimized
tensor, every gradient and every optimizer state (``X1..Xn, G1..Gn, H1..Hn``); its outputs are
the new values in the same grouped order. The updates have no gradient of their own, so they are
computed outside torch autograd.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch

from sonnx import dtypes
from sonnx.device import as_device
from sonnx.engine.operator import Operator, OutputShape
from sonnx.errors import BadInputError
from sonnx.tensor import Tensor

__all__ = ["Adagrad", "Adam", "Momentum", "adagrad", "adam", "momentum"]

TRAINING_DOMAIN = "ai.onnx.preview.training"


class _Update(Operator):
    """Splits the variadic inputs into groups and applies :meth:`update` tensor by tensor."""

    domain = TRAINING_DOMAIN
    output_shape = OutputShape.FROM_SHAPES
    # The learning rate and the update count.
    parameterising_inputs = frozenset({0, 1})
    #: The names of the per-tensor groups after X and G, e.g. ("V", "H") for Adam.
    states: ClassVar[tuple[str, ...]] = ()

    def forward(self, r, t, *tensors) -> tuple[torch.Tensor, ...]:  # type: ignore[override]
        op = self.op_type
        groups = 2 + len(self.states)
        if not tensors or len(tensors) % groups or any(x is None for x in tensors):
            raise BadInputError(
                f"{op}: after R and T, the inputs must be {groups} equally long groups "
                f"(X, G, {', '.join(self.states)}) of tensors, received {len(tensors)} inputs"
            )
        if r is None or r.numel() != 1 or t is None or t.numel() != 1:
            raise BadInputError(f"{op}: inputs R and T must be scalars")
        n = len(tensors) // groups
        parts = [tensors[k * n : (k + 1) * n] for k in range(groups)]
        rate, count = float(r.reshape(-1)[0]), int(t.reshape(-1)[0])
        results = []
        with torch.no_grad():
            for i in range(n):
                values = [group[i] for group in parts]
                for name, v in zip(("X", "G", *self.states), values, strict=True):
                    if not dtypes.is_float(v.dtype) or v.shape != values[0].shape:
                        raise BadInputError(
                            f"{op}: input {name}{i + 1} must be a float tensor of X{i + 1}'s "
                            f"shape {tuple(values[0].shape)}, received "
                            f"{dtypes.dtype_name(v.dtype)} of shape {tuple(v.shape)}"
                        )
                results.append(self.update(rate, count, *values))
        return tuple(out[k] for k in range(groups - 1) for out in results)

    def update(self, r: float, t: int, x, g, *states) -> tuple[torch.Tensor, ...]:
        """The new X and new states of one tensor."""
        raise NotImplementedError


class Adagrad(_Update):
    """``r = R / (1 + T * decay_factor)``; ``H += G^2``; ``X -= r * G / (sqrt(H) + epsilon)``,
    with ``G`` including the L2 term ``norm_coefficient * X``."""

    op_type = "Adagrad"
    since_versions = (1,)
    states = ("H",)

    def update(self, r, t, x, g, h):
        rate = r / (1 + t * float(self.attr("decay_factor")))
        g = float(self.attr("norm_coefficient")) * x + g
        h_new = h + g * g
        x_new = x - rate * g / (torch.sqrt(h_new) + float(self.attr("epsilon")))
        return x_new, h_new


class Adam(_Update):
    """Adam with bias correction from ``T > 0`` on, L2 regularization (``norm_coefficient``)
    before the step and weight shrinking (``norm_coefficient_post``) after it."""

    op_type = "Adam"
    since_versions = (1,)
    states = ("V", "H")

    def update(self, r, t, x, g, v, h):
        alpha, beta = float(self.attr("alpha")), float(self.attr("beta"))
        g = float(self.attr("norm_coefficient")) * x + g
        v_new = alpha * v + (1 - alpha) * g
        h_new = beta * h + (1 - beta) * g * g
        rate = r * math.sqrt(1 - beta**t) / (1 - alpha**t) if t > 0 else r
        x_new = x - rate * v_new / (torch.sqrt(h_new) + float(self.attr("epsilon")))
        return (1 - float(self.attr("norm_coefficient_post"))) * x_new, v_new, h_new


class Momentum(_Update):
    """SGD with momentum, ``mode`` "standard" or "nesterov"; the gradient's coefficient
    ``beta`` is 1 on the first update (``T == 0``)."""

    op_type = "Momentum"
    since_versions = (1,)
    states = ("V",)

    def update(self, r, t, x, g, v):
        missing = [k for k in ("alpha", "beta", "mode", "norm_coefficient") if self.attr(k) is None]
        if missing:
            raise BadInputError(f"Momentum: required attributes are missing: {missing}")
        mode = self.attr("mode")
        if mode not in ("standard", "nesterov"):
            raise BadInputError(
                f"Momentum: attribute mode must be 'standard' or 'nesterov', received {mode!r}"
            )
        alpha = float(self.attr("alpha"))
        g = float(self.attr("norm_coefficient")) * x + g
        v_new = alpha * v + (float(self.attr("beta")) if t > 0 else 1.0) * g
        step = v_new if mode == "standard" else g + alpha * v_new
        return x - r * step, v_new


def _run(op: _Update, r: float, t: int, groups: Sequence[Sequence[Tensor]]) -> list[Tensor]:
    sizes = {len(g) for g in groups}
    if len(sizes) != 1:
        raise BadInputError(
            f"{op.op_type}: the tensor, gradient and state lists must have equal lengths, "
            f"received {[len(g) for g in groups]}"
        )
    dtype = groups[0][0].dtype if groups[0] else torch.float32
    # R and T go where the tensors are: an operator's inputs must share one device.
    device = groups[0][0].data.device if groups[0] else as_device(None).torch_device
    rate = Tensor(data=torch.tensor(float(r), dtype=dtype, device=device), requires_grad=False)
    count = Tensor(data=torch.tensor(int(t), dtype=torch.int64, device=device), requires_grad=False)
    out = op(rate, count, *(x for g in groups for x in g))
    return [out] if isinstance(out, Tensor) else list(out)


def adagrad(
    r: float,
    t: int,
    xs: Sequence[Tensor],
    gs: Sequence[Tensor],
    hs: Sequence[Tensor],
    decay_factor: float = 0.0,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
) -> list[Tensor]:
    """One Adagrad step (ai.onnx.preview.training Adagrad) on several tensors at once.

    :param r: the initial learning rate.
    :param t: the number of updates done so far.
    :param xs: the tensors to update.
    :param gs: their gradients, one per tensor.
    :param hs: their accumulated squared gradients, one per tensor.
    :param decay_factor: the rate decays as ``r / (1 + t * decay_factor)``.
    :param epsilon: added to the root of the accumulator, against division by zero.
    :param norm_coefficient: the L2 regularisation coefficient.
    :returns: the new tensors followed by the new accumulators.
    :raises BadInputError: the three lists differ in length.
    """
    attrs: dict[str, Any] = {
        "decay_factor": float(decay_factor),
        "epsilon": float(epsilon),
        "norm_coefficient": float(norm_coefficient),
    }
    return _run(Adagrad(**attrs), r, t, [xs, gs, hs])


def adam(
    r: float,
    t: int,
    xs: Sequence[Tensor],
    gs: Sequence[Tensor],
    vs: Sequence[Tensor],
    hs: Sequence[Tensor],
    alpha: float = 0.9,
    beta: float = 0.999,
    epsilon: float = 1e-6,
    norm_coefficient: float = 0.0,
    norm_coefficient_post: float = 0.0,
) -> list[Tensor]:
    """One Adam step (ai.onnx.preview.training Adam) on several tensors at once.

    :param r: the learning rate.
    :param t: the number of updates done so far (bias correction applies from 1 on).
    :param xs: the tensors to update.
    :param gs: their gradients, one per tensor.
    :param vs: their first moments, one per tensor.
    :param hs: their second moments, one per tensor.
    :param alpha: the decay of the first moment.
    :param beta: the decay of the second moment.
    :param epsilon: added to the root of the second moment, against division by zero.
    :param norm_coefficient: the L2 regularisation coefficient (applied before the step).
    :param norm_coefficient_post: the weight shrinking applied after the step.
    :returns: the new tensors, then the new first and second moments.
    :raises BadInputError: the four lists differ in length.
    """
    attrs: dict[str, Any] = {
        "alpha": float(alpha),
        "beta": float(beta),
        "epsilon": float(epsilon),
        "norm_coefficient": float(norm_coefficient),
        "norm_coefficient_post": float(norm_coefficient_post),
    }
    return _run(Adam(**attrs), r, t, [xs, gs, vs, hs])


def momentum(
    r: float,
    t: int,
    xs: Sequence[Tensor],
    gs: Sequence[Tensor],
    vs: Sequence[Tensor],
    alpha: float = 0.9,
    beta: float = 1.0,
    mode: str = "standard",
    norm_coefficient: float = 0.0,
) -> list[Tensor]:
    """One momentum-SGD step (ai.onnx.preview.training Momentum) on several tensors at once.

    :param r: the learning rate.
    :param t: the number of updates done so far (the first, 0, takes the gradient as it is).
    :param xs: the tensors to update.
    :param gs: their gradients, one per tensor.
    :param vs: their velocities, one per tensor.
    :param alpha: the decay of the velocity.
    :param beta: the gradient's coefficient (1 on the first update).
    :param mode: ``"standard"`` or ``"nesterov"``.
    :param norm_coefficient: the L2 regularisation coefficient.
    :returns: the new tensors followed by the new velocities.
    :raises BadInputError: the three lists differ in length.
    """
    attrs: dict[str, Any] = {
        "alpha": float(alpha),
        "beta": float(beta),
        "mode": mode,
        "norm_coefficient": float(norm_coefficient),
    }
    return _run(Momentum(**attrs), r, t, [xs, gs, vs])
