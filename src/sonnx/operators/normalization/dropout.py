"""Dropout: zero each element with probability ``ratio`` and scale the rest by 1 / (1 - ratio).

It is active only in training: when the node has a ``training_mode`` input (version 12 on), that
input decides; otherwise ``sonnx.autograd.training`` does (and versions 1/6's ``is_test=1``
turns it off, recorded as a constant ``training_mode`` input). Inactive, it is the identity
and the mask is all ones.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from sonnx.engine.operator import Operator, OutputShape, Randomness, TorchOutputs, is_training
from sonnx.errors import BadInputError
from sonnx.operators.normalization.common import check_float
from sonnx.proto.graph_builder import GraphBuilder
from sonnx.tensor import Tensor

__all__ = ["Dropout", "dropout"]


class Dropout(Operator):
    """ONNX Dropout in its version-12+ form (older versions are converted to it on import);
    output ``mask`` when the node asks for two outputs.

    With a ``seed`` attribute the mask is reproducible: it is drawn from NumPy's MT19937 seeded
    with it (``uniform(0, 1) >= ratio``), exactly as ONNX's reference does; without one it comes
    from torch's generator on the input's device.
    """

    op_type = "Dropout"
    since_versions = (12, 13, 22)
    output_shape = OutputShape.FROM_SHAPES
    # The ratio and the training mode.
    parameterising_inputs = frozenset({1, 2})
    random = Randomness.WHILE_TRAINING

    def forward(self, x, ratio=None, training_mode=None) -> TorchOutputs:  # type: ignore[override]
        op = self.op_type
        check_float(op, "data", x)
        r = 0.5 if ratio is None else float(ratio.reshape(-1)[0])
        active = is_training() if training_mode is None else bool(training_mode.reshape(-1)[0])
        if not 0 <= r < 1:
            raise BadInputError(f"{op}: input ratio must be in [0, 1), received {r}")
        if active and r > 0:
            mask = self._keep(x, r)
            y = x * mask.to(x.dtype) * (1.0 / (1.0 - r))
        else:
            y = x.view_as(x)
            mask = torch.ones(x.shape, dtype=torch.bool, device=x.device)
        return y if (self.requested_outputs or 1) == 1 else (y, mask)

    def _keep(self, x: torch.Tensor, r: float) -> torch.Tensor:
        seed = self.attr("seed")
        if seed is None:
            return torch.rand(x.shape, device=x.device) >= r
        draws = np.random.RandomState(int(seed) % 2**32).uniform(0.0, 1.0, tuple(x.shape))
        return torch.from_numpy(draws >= r).to(x.device)

    def _ratio_value(self) -> float:
        given = self.inputs[1] if len(self.inputs) > 1 else None
        return 0.5 if given is None else float(given.data.reshape(-1)[0])

    def export(self, g: GraphBuilder, inputs: list[str], outputs: list[str]) -> None:
        """Version 12 on: ratio (and training_mode, if recorded) as inputs; before: attributes.

        A training_mode input cannot be written before opset 12, where runtimes treat Dropout
        as the identity anyway, so it is dropped there.
        """
        attrs: dict[str, Any] = {}
        if g.opset >= 12:
            if self.attr("seed") is not None:
                attrs["seed"] = int(self.attr("seed"))
            g.add_node(self.op_type, inputs, outputs, **attrs)
            return
        attrs["ratio"] = self._ratio_value()
        if g.opset < 7:
            attrs["is_test"] = 1
        g.add_node(self.op_type, inputs[:1], outputs, **attrs)


def dropout(x: Tensor, ratio: float = 0.5, seed: int | None = None) -> Tensor:
    """Dropout active only while ``sonnx.autograd.training`` is True (ONNX Dropout).

    ``seed`` makes the mask reproducible (the same mask on every call).

    :param x: the tensor to drop elements of.
    :param ratio: the probability of dropping an element, in [0, 1); kept ones are scaled by
        ``1 / (1 - ratio)``.
    :param seed: a seed for the mask; None draws a new mask each call.
    :returns: a tensor of ``x``'s shape and dtype (``x``'s values when not training).
    :raises BadInputError: ``ratio`` is outside [0, 1).
    """
    attrs = {} if seed is None else {"seed": int(seed)}
    return Dropout(**attrs)(x, float(ratio))
