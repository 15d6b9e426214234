"""Gradient (``ai.onnx.preview.training``): dY/dX by recomputing Y with gradients recorded.

At prepare time each Gradient node receives its forward graph, the nodes between ``xs + zs``
and ``y`` (see ``sonnx.onnx.gradient_graph``). Here that graph is re-run on fresh leaf copies of
the xs values, so the derivatives are partial ones at exactly the values the node was given,
and torch autograd yields dY/dX for each X (the sum over Y's elements for a non-scalar Y; zeros
for an X that Y does not depend on). The results are plain tensors: gradients of gradients
are not taken.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from sonnx import dtypes
from sonnx.engine.subgraphs import BoundSubgraph
from sonnx.errors import BadInputError
from sonnx.onnx.gradient_graph import FORWARD_GRAPH
from sonnx.onnx.registry import NodeInfo, converter
from sonnx.operators.training.updates import TRAINING_DOMAIN
from sonnx.run_state import TRAINING
from sonnx.tensor import Tensor


@contextmanager
def _recording() -> Iterator[None]:
    """Record gradients even in inference: operators record while ``sonnx.autograd.training``
    is True, so it is set for the recomputation and then restored."""
    token = TRAINING.set(True)
    try:
        with torch.enable_grad():
            yield
    finally:
        TRAINING.reset(token)


@converter("Gradient", 1, domain=TRAINING_DOMAIN)
def Gradient(node: NodeInfo, inputs: list[Tensor | None], attrs: dict[str, Any]) -> list[Tensor]:
    forward: BoundSubgraph = attrs[FORWARD_GRAPH]
    xs: list[str] = attrs["xs"]
    leaves = []
    for name, x in zip(xs, inputs[: len(xs)], strict=True):
        if not isinstance(x, Tensor) or not dtypes.is_float(x.dtype):
            received = x.dtype if isinstance(x, Tensor) else type(x).__name__
            raise BadInputError(
                f"Gradient node {node.name!r}: x {name!r} must be a float tensor, "
                f"received {received}"
            )
        leaves.append(Tensor(data=x.data.detach(), requires_grad=True, stores_grad=True))
    with _recording():
        (y,) = forward.run([*leaves, *inputs[len(xs) :]])
        if not isinstance(y, Tensor):
            raise BadInputError(
                f"Gradient node {node.name!r}: y {attrs['y']!r} must be a tensor, "
                f"received {type(y).__name__}"
            )
        grads: tuple[torch.Tensor | None, ...] = (None,) * len(leaves)
        if y.data.requires_grad:
            grads = torch.autograd.grad(
                y.data,
                [leaf.data for leaf in leaves],
                grad_outputs=torch.ones_like(y.data),
                allow_unused=True,
            )
    return [
        Tensor(data=torch.zeros_like(leaf.data) if g is None else g, requires_grad=False)
        for leaf, g in zip(leaves, grads, strict=True)
    ]
