"""Sequence and optional operators (ONNX ``seq(tensor)`` and ``optional(...)`` values)."""

from __future__ import annotations

from typing import Any

import torch

from sonnx import dtypes
from sonnx.device import as_device
from sonnx.engine.operator import host_ints
from sonnx.errors import BadInputError
from sonnx.onnx.registry import NodeInfo, converter
from sonnx.onnx.subgraphs import BoundSubgraph
from sonnx.onnx.values import OptionalValue, TensorSequence
from sonnx.operators.shape.layout import squeeze, unsqueeze
from sonnx.operators.shape.slicing import concat, split
from sonnx.tensor import Tensor


def _host_scalar_device(value: Any) -> torch.device:
    """Where a scalar computed from a sequence or optional goes: its first tensor's device,
    else the default device (a graph being executed makes that the graph's device)."""
    if isinstance(value, OptionalValue):
        value = value.value
    if isinstance(value, Tensor):
        return value.data.device
    first = next((t for t in value or () if isinstance(t, Tensor)), None)
    return as_device(None if first is None else first.device).torch_device


def _position(node: NodeInfo, seq: TensorSequence, pos: Tensor | None, insert: bool) -> int:
    n = len(seq)
    if pos is None:
        return n if insert else n - 1
    p = int(pos.data.reshape(-1)[0].item())
    low, high = -n, (n if insert else n - 1)
    if not low <= p <= high:
        raise BadInputError(
            f"{node.op_type} {node.name!r}: position must be in [{low}, {high}] for a sequence "
            f"of length {n}, received {p}"
        )
    return p + n if p < 0 else p


@converter("SequenceConstruct", 11)
def SequenceConstruct(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> TensorSequence:
    return TensorSequence(list(inputs))


@converter("SequenceEmpty", 11)
def SequenceEmpty(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> TensorSequence:
    code = attrs.get("dtype")
    return TensorSequence([], dtypes.onnx_to_torch(code) if code else torch.float32)


@converter("SequenceInsert", 11)
def SequenceInsert(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> TensorSequence:
    seq, tensor = inputs[0], inputs[1]
    items = list(seq)
    items.insert(_position(node, seq, inputs[2] if len(inputs) > 2 else None, True), tensor)
    return TensorSequence(items, seq.dtype)


@converter("SequenceAt", 11)
def SequenceAt(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> Tensor:
    return inputs[0][_position(node, inputs[0], inputs[1], False)]


@converter("SequenceErase", 11)
def SequenceErase(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> TensorSequence:
    seq = inputs[0]
    items = list(seq)
    del items[_position(node, seq, inputs[1] if len(inputs) > 1 else None, False)]
    return TensorSequence(items, seq.dtype)


@converter("SequenceLength", 11)
def SequenceLength(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> Tensor:
    device = _host_scalar_device(inputs[0])
    data = torch.tensor(len(inputs[0]), dtype=torch.int64, device=device)
    return Tensor(data=data, requires_grad=False)


@converter("ConcatFromSequence", 11)
def ConcatFromSequence(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> Tensor:
    seq, axis = inputs[0], attrs["axis"]
    if attrs.get("new_axis", 0):
        rank = seq[0].ndim() + 1
        axis = axis % rank
        return concat([unsqueeze(t, axis) for t in seq], axis)
    return concat(list(seq), axis)


@converter("SplitToSequence", 11, 24)
def SplitToSequence(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> TensorSequence:
    x, sizes = inputs[0], inputs[1] if len(inputs) > 1 else None
    axis = attrs["axis"] % x.ndim()
    if sizes is None:
        parts = split(x, axis, [1] * x.shape[axis])
        if not attrs.get("keepdims", 1):
            parts = [squeeze(p, [axis]) for p in parts]
        return TensorSequence(list(parts), x.dtype)
    values = host_ints(sizes.data)
    if sizes.ndim() == 0:
        chunk = values[0]
        full, rest = divmod(x.shape[axis], chunk)
        values = [chunk] * full + ([rest] if rest else [])
    return TensorSequence(list(split(x, axis, values)), x.dtype)


@converter("SequenceMap", 17)
def SequenceMap(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> list[TensorSequence]:
    body: BoundSubgraph = attrs["body"]
    lengths = {len(v) for v in inputs if isinstance(v, TensorSequence)}
    if len(lengths) != 1:
        raise BadInputError(
            f"SequenceMap {node.name!r}: input sequences differ in length {sorted(lengths)}"
        )
    n = lengths.pop()
    results: list[list[Tensor]] = [[] for _ in range(body.num_outputs)]
    for i in range(n):
        args = [v[i] if isinstance(v, TensorSequence) else v for v in inputs]
        for k, t in enumerate(body.run(args)):
            results[k].append(t)
    return [TensorSequence(items) for items in results]


@converter("Optional", 15, 28)
def Optional(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> OptionalValue:
    return OptionalValue(inputs[0] if inputs else None)


@converter("OptionalHasElement", 15, 18, 28)
def OptionalHasElement(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> Tensor:
    value = inputs[0] if inputs else None
    present = value.has_element if isinstance(value, OptionalValue) else value is not None
    return Tensor(
        data=torch.tensor(present, device=_host_scalar_device(value)), requires_grad=False
    )


@converter("OptionalGetElement", 15, 18, 28)
def OptionalGetElement(node: NodeInfo, inputs: list, attrs: dict[str, Any]) -> Any:
    value = inputs[0]
    if not isinstance(value, OptionalValue):
        return value
    if value.value is None:
        raise BadInputError(f"OptionalGetElement {node.name!r}: the optional is empty")
    return value.value
