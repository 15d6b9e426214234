"""The family base and input checks of the com.microsoft normalizations and activations
(:mod:`~sonnx.operators.contrib` holds what every com.microsoft operator shares).
Export writes the node back as it came: only the attributes the node set, domain
``com.microsoft``.
"""

from __future__ import annotations

import torch

from sonnx.engine.operator import OutputShape
from sonnx.errors import BadInputError
from sonnx.operators.contrib import ContribOperator
from sonnx.operators.normalization.common import check_float

__all__: list[str] = []


class ContribNormOperator(ContribOperator):
    """The normalizations and activations: each output is shaped by the inputs' shapes."""

    output_shape = OutputShape.FROM_SHAPES


def check_vector(op: str, name: str, t: torch.Tensor, size: int) -> None:
    """Raise unless ``t`` is a floating 1-D tensor of ``size`` elements (a gamma, a bias)."""
    check_float(op, name, t)
    if tuple(t.shape) != (size,):
        raise BadInputError(
            f"{op}: input {name} must have shape ({size},), received shape {tuple(t.shape)}"
        )
