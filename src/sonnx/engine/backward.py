"""``backward(loss)``: gradients of every parameter that ``loss`` depends on.

The gradients themselves come from torch autograd; this module only finds which sonnx tensors
are parameters (``stores_grad``) by walking the recorded creator graph from ``loss`` back to
its leaves, then asks torch for their gradients in one call.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

import torch

from sonnx.errors import BadInputError
from sonnx.precision import outside_autocast
from sonnx.tensor import Tensor

if TYPE_CHECKING:
    from sonnx.engine.operator import Operator


def trainable_tensors(y: Tensor) -> list[Tensor]:
    """The tensors with ``stores_grad`` and ``requires_grad`` that ``y`` was computed from.

    Order: first reached in a depth-first walk from ``y``; each tensor once.

    :param y: a tensor computed by recorded operations (a loss, for one).
    :returns: the trainable tensors, each once.
    """
    found: list[Tensor] = []
    seen_tensors: set[int] = set()
    seen_ops: set[int] = set()
    stack = [y]
    while stack:
        t = stack.pop()
        if id(t) in seen_tensors:
            continue
        seen_tensors.add(id(t))
        if t.is_param and t.data.requires_grad:
            found.append(t)
        op = t.creator
        if op is None or id(op) in seen_ops:
            continue
        seen_ops.add(id(op))
        stack.extend(x for x in reversed(op.inputs) if x is not None and x.requires_grad)
    return found


def _creators(y: Tensor) -> Iterator[Operator]:
    """Every operator ``y`` was computed with, each once."""
    seen: set[int] = set()
    stack = [y]
    while stack:
        op = stack.pop().creator
        if op is None or id(op) in seen:
            continue
        seen.add(id(op))
        yield op
        stack.extend(x for x in op.inputs if x is not None)


def inference_only_operators(y: Tensor) -> list[str]:
    """The inference-only operators (the ai.onnx.ml ones) ``y`` was computed with (inside
    imported runs too), named."""
    found: list[str] = []
    for op in _creators(y):
        nodes = getattr(op, "node_descriptions", None)
        if nodes is not None:
            found += nodes(domain="ai.onnx.ml")
        elif op.inference_only:
            found.append(op.op_type)
    return found


def untrained_models(y: Tensor) -> list[str]:
    """Why the imported models ``y`` was computed with train nothing, one line each: those
    that hold no trainable weight, or whose weights are all frozen.

    :param y: a tensor computed by recorded operations (a loss).
    :returns: the reasons, each once; empty when some imported run trains a weight, or when
        ``y`` was computed by no imported run.
    """
    found: list[str] = []
    for op in _creators(y):
        untrained = getattr(op, "untrained_reason", None)
        if untrained is None:
            continue
        reason = untrained()
        if reason is None:
            return []
        if reason not in found:
            found.append(reason)
    return found


def parameter_gradients(
    y: Tensor, dy: Tensor | torch.Tensor | None = None
) -> tuple[list[Tensor], list[torch.Tensor]]:
    """The trainable tensors ``y`` depends on and their gradients as torch tensors (unused
    parameters left out): what an optimizer needs, without wrapping each gradient."""
    if not y.data.requires_grad:
        blocking = inference_only_operators(y)
        if blocking:
            raise BadInputError(
                "backward: the loss is computed by inference-only operators, which carry no "
                f"gradient and have no trainable weights: {', '.join(blocking[:5])}; "
                "classical ML models (ai.onnx.ml) run and export, but do not train"
            )
        untrained = untrained_models(y)
        if untrained:
            raise BadInputError(
                "backward: the loss depends on no trainable parameter, so a training step "
                f"would change nothing: {'; '.join(untrained[:3])}"
            )
        raise BadInputError(
            "backward: the loss carries no gradient graph; set sonnx.autograd.training = True "
            "(or call model.train()) before the forward pass, and check that some parameter "
            "has requires_grad and stores_grad"
        )
    params = trainable_tensors(y)
    if not params:
        return [], []
    if dy is None:
        grad_out = torch.ones_like(y.data)
    else:
        grad_out = dy.data if isinstance(dy, Tensor) else dy
        if tuple(grad_out.shape) != y.shape:
            raise BadInputError(
                f"backward: dy must have the loss shape {y.shape}, received {tuple(grad_out.shape)}"
            )
    with outside_autocast():
        grads = torch.autograd.grad(
            y.data, [p.data for p in params], grad_outputs=grad_out, allow_unused=True
        )
    used = [k for k, g in enumerate(grads) if g is not None]
    return [params[k] for k in used], [grads[k] for k in used]


def gradients(y: Tensor, dy: Tensor | torch.Tensor | None = None) -> list[tuple[Tensor, Tensor]]:
    """``[(param, grad), …]`` for every trainable tensor ``y`` depends on (a list, as
    :func:`backward` yields them).

    :param y: the loss (or any output computed in training mode).
    :param dy: the gradient with respect to ``y``, of ``y``'s shape (None: ones).
    :returns: the ``(parameter, gradient)`` pairs; parameters ``y`` does not use are left out.
    :raises BadInputError: ``y`` carries no gradient graph (computed in inference mode, or by
        inference-only operators), or ``dy`` has another shape.
    """
    params, grads = parameter_gradients(y, dy)
    return [(p, Tensor(data=g, requires_grad=False)) for p, g in zip(params, grads, strict=True)]


def backward(y: Tensor, dy: Tensor | torch.Tensor | None = None) -> Iterator[tuple[Tensor, Tensor]]:
    """Yield ``(param, grad)`` for every parameter with ``stores_grad`` that ``y`` depends on.

    ``dy`` is the gradient of the final objective with respect to ``y`` (ones by default).

    :param y: the loss (or any output computed in training mode).
    :param dy: the gradient with respect to ``y``, of ``y``'s shape (None: ones).
    :returns: an iterator of ``(parameter, gradient)`` pairs; parameters ``y`` does not use are
        left out.
    :raises BadInputError: ``y`` carries no gradient graph (computed in inference mode, by
        inference-only operators, or from no trainable parameter), or ``dy`` has another shape.
    """
    yield from gradients(y, dy)
