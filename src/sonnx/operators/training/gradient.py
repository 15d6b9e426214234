"""Gradient (``ai.onnx.preview.training``): dY/dX by recomputing Y with gradients recorded.

At prepare time each Gradient node receives its forward graph, the nodes between ``xs + zs``
and ``y``, as the graph attribute :data:`FORWARD_GRAPH` (see ``sonnx.onnx.gradient_graph``).
Here that graph is re-run on fresh leaf copies of the xs values, so the derivatives are partial
ones at exactly the values the node was given, and torch autograd yields dY/dX for each X (the
sum over Y's elements for a non-scalar Y; zeros for an X that Y does not depend on). The
results are plain tensors: gradients of gradients are not taken.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch

from sonnx import dtypes
from sonnx.errors import BadInputError
from sonnx.operators.control.common import GraphValueOperator
from sonnx.operators.training.updates import TRAINING_DOMAIN
from sonnx.run_state import TRAINING
from sonnx.tensor import Tensor

__all__ = ["FORWARD_GRAPH", "Gradient"]

#: The graph attribute the importer gives each Gradient node: its forward graph.
FORWARD_GRAPH = "sonnx_forward_graph"


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


class Gradient(GraphValueOperator):
    """dY/dX for each X of ``xs``, Y recomputed by the node's forward graph from its inputs
    (``xs`` then ``zs``); see the module."""

    op_type = "Gradient"
    domain = TRAINING_DOMAIN
    since_versions: ClassVar[tuple[int, ...]] = (1,)

    def run(self, inputs: list[Any]) -> list[Tensor]:
        """The gradients, one per X.

        :param inputs: the values of ``xs`` then of ``zs``.
        :returns: dY/dX for each X, zeros where Y does not depend on X.
        """
        xs: list[str] = self.attrs["xs"]
        leaves = []
        for name, x in zip(xs, inputs[: len(xs)], strict=True):
            if not isinstance(x, Tensor) or not dtypes.is_float(x.dtype):
                received = x.dtype if isinstance(x, Tensor) else type(x).__name__
                raise BadInputError(
                    f"{self.where()}: x {name!r} must be a float tensor, received {received}"
                )
            leaves.append(Tensor(data=x.data.detach(), requires_grad=True, stores_grad=True))
        with _recording():
            (y,) = self.subgraph(FORWARD_GRAPH).run([*leaves, *inputs[len(xs) :]])
            if not isinstance(y, Tensor):
                raise BadInputError(
                    f"{self.where()}: y {self.attrs['y']!r} must be a tensor, "
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
