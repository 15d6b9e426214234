"""The base of the control-flow, sequence and optional operators, and what they share.

These operators run on graph values (tensors, sequences, optionals, bound subgraphs) rather
than on torch tensors: an ``If`` runs the operators of its taken branch, a
``ConcatFromSequence`` runs ``Unsqueeze`` and ``Concat``. What they run is recorded as usual,
so gradients reach the taken branch and every loop iteration, and an export of such a run
writes the computation as it ran (a Loop unrolled). They record no node of their own.
"""

from __future__ import annotations

from typing import Any, ClassVar

import torch

from sonnx.device import as_device
from sonnx.engine.operator import Operator, OutputShape
from sonnx.engine.subgraphs import BoundSubgraph
from sonnx.engine.values import OptionalValue
from sonnx.errors import BadInputError
from sonnx.operators.shape.layout import identity, unsqueeze
from sonnx.operators.shape.slicing import concat
from sonnx.tensor import Tensor

__all__ = ["GraphValueOperator"]


class GraphValueOperator(Operator):
    """An operator that runs on graph values by calling other operators (see the module).

    Calling an instance runs :meth:`run` on the values given; the importer builds one per run
    of its node with the node's attributes, graph attributes bound to the enclosing scope
    (:class:`~sonnx.engine.subgraphs.BoundSubgraph`).
    """

    #: Outputs are sequences, optionals or what a subgraph computed: nothing computed from
    #: their shapes is reused from one run to the next.
    output_shape: ClassVar[OutputShape] = OutputShape.VALUE_SIZED
    #: Strings reach the operators they run, which decide what to do with them; what these
    #: operators return is not followed as moved strings (graph mode runs them eagerly).
    moves_elements_only: ClassVar[bool] = False
    #: A position or count is part of each call's data; no float input parameterises them.
    parameterising_inputs: ClassVar[frozenset[int]] = frozenset()

    def __call__(self, *inputs: Any) -> Any:
        """Run on graph values; the operators run inside are recorded, this one is not.

        :param inputs: the node's inputs (None for absent optional ones).
        :returns: one graph value, or a list of them for several outputs.
        """
        return self.run(list(inputs))

    def run(self, inputs: list[Any]) -> Any:
        """The node's outputs for ``inputs``; each operator of the family writes it.

        :param inputs: the node's inputs (None for absent optional ones).
        :returns: one graph value, or a list of them for several outputs.
        """
        raise NotImplementedError(f"{type(self).__name__} does not define run()")

    def subgraph(self, name: str) -> BoundSubgraph:
        """Graph attribute ``name``, bound for this run.

        :param name: the attribute's ONNX name (``then_branch``, ``body``).
        :returns: the bound subgraph.
        """
        return self.attrs[name]

    def where(self) -> str:
        """How errors name this node: its op type and name, ``If 'cond_1'``."""
        return f"{self.op_type} {self.name!r}"


def host_bool(t: Tensor | None, default: bool, what: str) -> bool:
    """A one-element condition read on the host (``default`` when the input is absent).

    :param t: the condition tensor, or None.
    :param default: the value of an absent condition.
    :param what: how an error names the condition.
    :returns: the condition's truth.
    """
    if t is None:
        return default
    if t.size() != 1:
        raise BadInputError(f"{what} must hold one value, received shape {t.shape}")
    return bool(t.data.reshape(-1)[0].item())


def scalar(value: int | bool, dtype: torch.dtype, like: Tensor | None) -> Tensor:
    """A 0-d constant on ``like``'s device, or (no tensor input) on the default device, which a
    graph being executed makes the graph's device.

    :param value: the number.
    :param dtype: its element type.
    :param like: a tensor whose device to use, or None.
    :returns: the constant.
    """
    device = as_device(None if like is None else like.device).torch_device
    return Tensor(data=torch.tensor(value, dtype=dtype, device=device), requires_grad=False)


def own(value: Any) -> Any:
    """A fresh tensor for a subgraph result (Identity), so naming it in the outer scope never
    renames a tensor of the subgraph's scope; sequences and optionals pass through.

    :param value: a subgraph's output.
    :returns: a new tensor of the same value, or the value itself when not a tensor.
    """
    return identity(value) if isinstance(value, Tensor) else value


def stack(items: list[Tensor], axis: int) -> Tensor:
    """``items`` stacked along a new ``axis`` (Unsqueeze then Concat, recorded).

    :param items: tensors of one shape.
    :param axis: where the new axis goes.
    :returns: the stacked tensor.
    """
    return concat([unsqueeze(t, axis) for t in items], axis)


def host_scalar_device(value: Any) -> torch.device:
    """Where a scalar computed from a sequence or optional goes: its first tensor's device,
    else the default device (a graph being executed makes that the graph's device).

    :param value: a tensor, a sequence or an optional.
    :returns: the device for the scalar.
    """
    if isinstance(value, OptionalValue):
        value = value.value
    if isinstance(value, Tensor):
        return value.data.device
    first = next((t for t in value or () if isinstance(t, Tensor)), None)
    return as_device(None if first is None else first.device).torch_device
