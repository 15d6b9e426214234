"""Importer registrations for normalization and dropout: see sonnx.operators.normalization.batch.

Dropout before version 12 held ``ratio`` (and, in versions 1 and 6, ``is_test``) as attributes
and, before version 10, returned a mask of the data's type; the adapter below records the
modern form, with the ratio (and ``is_test=1`` as ``training_mode=False``) as constant inputs.
"""

from __future__ import annotations

from typing import Any

import torch

from sonnx.engine.operator import is_training
from sonnx.errors import BadModelError
from sonnx.onnx.registry import NodeInfo, bind_node, converter
from sonnx.operators.normalization.batch import (
    BatchNormalization,
    Dropout,
    batch_norm,
)
from sonnx.tensor import Tensor


@converter("BatchNormalization", 1, 6, 7, 9, 14, 15, operator=BatchNormalization)
def convert_batch_normalization(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> Any:
    """BatchNormalization; an inference-form node (one output) follows the training flag.

    While ``sonnx.autograd.training`` is True such a node normalizes with the batch statistics
    and updates its running mean and variance in place, as a framework BatchNorm layer does,
    so an imported CNN fine-tunes the way it would in torch; otherwise it uses the stored
    statistics exactly as ONNX says. A node whose scale and bias are frozen parameters
    (``SONNXModel.freeze``, or ``requires_grad = False``) belongs to a frozen backbone and runs
    in inference mode, as a torch module after ``.eval()``. Nodes that ask for the training
    outputs run as written, and so do nodes whose statistics are computed (there is no buffer
    to update).
    """
    x, scale, bias, mean, var = inputs[:5]
    leaves = mean is not None and var is not None and mean.creator is None and var.creator is None
    follows = leaves and is_training() and not _frozen(scale, bias)
    if node.num_outputs == 1 and follows and attrs.get("spatial", 1) == 1:
        return batch_norm(
            x,
            scale,
            bias,
            mean,
            var,
            momentum=float(attrs["momentum"]),
            epsilon=float(attrs["epsilon"]),
        )
    return bind_node(BatchNormalization(version=node.since_version, **attrs), node)(*inputs)


def _frozen(*affine: Tensor | None) -> bool:
    """Whether the affine parameters of a BatchNormalization are all frozen: each one
    that is a parameter (``stores_grad``) trains no more, and there is at least one."""
    params = [t for t in affine if t is not None and t.stores_grad]
    return bool(params) and not any(t.requires_grad for t in params)


@converter("Dropout", 1, 6, 7, 10)
def convert_dropout_attribute_ratio(
    node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]
) -> Any:
    x = inputs[0]
    if x is None:
        raise BadModelError(f"Dropout node {node.name!r}: input data is missing")
    ratio = Tensor(
        data=torch.tensor(float(attrs["ratio"]), dtype=torch.float32),
        device=x.device,
        requires_grad=False,
    )
    training_mode = None
    if node.since_version < 7 and attrs.get("is_test"):
        training_mode = Tensor(data=torch.tensor(False), device=x.device, requires_grad=False)
    result = bind_node(Dropout(), node)(x, ratio, training_mode)
    if node.num_outputs < 2 or node.since_version >= 10:
        return result
    from sonnx.operators.elementwise.cast import cast

    y, mask = result
    return y, cast(mask, x.dtype)
