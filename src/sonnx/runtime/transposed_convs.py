"""Constant operations after a transposed convolution, folded into its weight and bias before
inductor sees the graph.

When it freezes a graph, inductor's *binary folding* folds an ``add``, ``sub``, ``mul`` or
``div`` of a per-channel constant after a convolution into the convolution's bias and weight.
It takes the output channels to be the weight's first dimension, which holds for a convolution
([C_out, C_in / group, kH, kW]) but not for a transposed one, whose weight is
[C_in, C_out / group, kH, kW]. So, after a transposed convolution:

- an ``Add`` of a one-channel bias (paddle2onnx writes ``ConvTranspose`` without its bias,
  then an ``Add`` of it: a DB text detector's last layer, 24 channels in and one out) becomes a
  bias of C_in values, and the graph fails to compile ("expected bias to be 1-dimensional with
  1 elements, but got bias of size [24]");
- a ``Mul`` by a per-channel constant, with as many channels out as in, scales the weight's
  input channels instead of its output channels, and the compiled graph computes wrong values;
- so does an inference ``BatchNormalization``, which inductor decomposes into a ``sub``, two
  ``mul`` and an ``add`` of per-channel constants before it folds: a DB text detector's head
  (``ConvTranspose`` 24 to 24 channels, ``Add`` of its bias, ``BatchNormalization``, ``Relu``)
  had its batch-norm scale applied to the wrong channels, and graph mode's probability map was
  off by up to 1 where eager and onnxruntime agree (issue #48; it went unseen while the tests'
  stand-ins kept BatchNorm's initial statistics, one scale for every channel).

This pass does the folding itself, along the right dimension, so that no such pattern is left
for inductor to fold. It runs on the traced graph with the weights frozen in as attributes.
"""

from __future__ import annotations

import operator
from typing import Any

import torch
from torch.fx import GraphModule, Node
from torch.fx.node import map_arg

from sonnx.runtime.conv_prepack import erase_unused_constants

_aten = torch.ops.aten
_CONVOLUTION = _aten.convolution.default
_PAD = _aten.constant_pad_nd.default  # what ConvTranspose's crop to its pads traces to
#: BatchNormalization in inference form: (input, weight, bias, mean, var, momentum, eps), whose
#: result is the first of three outputs (the others are empty).
_BATCH_NORM = _aten._native_batch_norm_legit_no_training.default
#: The binary operations folded, and whether the convolution may be their second operand.
_FOLDED = {
    _aten.add.Tensor: True,
    _aten.sub.Tensor: False,
    _aten.mul.Tensor: True,
    _aten.div.Tensor: False,
}


def fold_into_transposed_convolutions(module: GraphModule) -> None:
    """Fold every per-output-channel constant ``add``/``sub``/``mul``/``div``, and every
    inference batch normalization with constant parameters, that is the only reader of a
    transposed convolution with a constant weight into that convolution."""
    graph = module.graph
    if not any(_transposed(node) for node in graph.nodes):
        return
    for node in list(graph.nodes):  # inductor drops these before it folds, and so do we
        if node.target is _PAD and _transposed(node.args[0]) and not any(node.args[1]):
            node.replace_all_uses_with(node.args[0])
            graph.erase_node(node)
    changed = True
    while changed:  # a convolution followed by an Add, then a BatchNormalization, folds twice
        changed = False
        constants = _Constants(module)
        for node in list(graph.nodes):
            if _transposed(node) and _fold_reader(module, node, constants):
                changed = True
                constants = _Constants(module)
    erase_unused_constants(graph)
    graph.lint()
    module.recompile()


def _transposed(node: Any) -> bool:
    return (
        isinstance(node, Node)
        and node.op == "call_function"
        and node.target is _CONVOLUTION
        and bool(node.args[6])
    )


def _fold_reader(module: GraphModule, conv: Node, constants: _Constants) -> bool:
    """Fold the one reader of ``conv`` into it, if it is a foldable operation of constants."""
    if len(conv.users) != 1:
        return False
    (reader,) = conv.users
    if reader.op != "call_function":
        return False
    weight, bias = constants.value(conv.args[1]), constants.value(conv.args[2])
    if not isinstance(weight, torch.Tensor) or (conv.args[2] is not None and bias is None):
        return False
    groups = int(conv.args[8])
    if reader.target is _BATCH_NORM:
        folded = _batch_norm_folded(reader, weight, bias, groups, constants)
        result = _batch_norm_result(reader)
    else:
        folded = _binary_folded(reader, conv, weight, bias, groups, constants)
        result = reader
    if folded is None or result is None:
        return False
    weight, bias = folded
    with module.graph.inserting_before(conv):
        args = list(conv.args)
        args[1] = _attribute(module, conv, f"_{reader.name}_weight", weight)
        args[2] = None if bias is None else _attribute(module, conv, f"_{reader.name}_bias", bias)
    conv.args = tuple(args)
    result.replace_all_uses_with(conv)
    for node in [*reader.users, reader]:  # a batch normalization's outputs, then itself
        module.graph.erase_node(node)
    return True


def _binary_folded(
    binary: Node,
    conv: Node,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    groups: int,
    constants: _Constants,
) -> tuple[torch.Tensor, torch.Tensor | None] | None:
    """The weight and bias of ``conv`` with ``binary`` (an ``add``/``sub``/``mul``/``div`` of
    it and a per-channel constant) folded in; None for any other operation."""
    if binary.target not in _FOLDED or binary.kwargs:
        return None
    first, second = binary.args[:2]
    if first is conv and second is not conv:
        other = second
    elif second is conv and first is not conv and _FOLDED[binary.target]:
        other = first
    else:
        return None
    per_channel = _per_channel(constants.value(other), weight, groups)
    if per_channel is None:
        return None
    return _folded(binary.target, weight, bias, per_channel, groups)


def _batch_norm_folded(
    norm: Node,
    weight: torch.Tensor,
    bias: torch.Tensor | None,
    groups: int,
    constants: _Constants,
) -> tuple[torch.Tensor, torch.Tensor] | None:
    """The weight and bias of the convolution with inference batch normalization ``norm`` of
    its output folded in (in float64, as the eager Conv fusions fold theirs); None unless
    its parameters are constants of one value per output channel, of the weight's dtype."""
    scale, shift, mean, var = (constants.value(a) for a in norm.args[1:5])
    eps = norm.args[6]
    channels = weight.shape[1] * groups
    like = {"dtype": weight.dtype, "device": weight.device}
    scale = torch.ones(channels, **like) if norm.args[1] is None else scale
    shift = torch.zeros(channels, **like) if norm.args[2] is None else shift
    parameters = (scale, shift, mean, var)
    if not isinstance(eps, float) or not all(
        isinstance(p, torch.Tensor)
        and p.shape == (channels,)
        and p.dtype == weight.dtype
        and p.device == weight.device
        for p in parameters
    ):
        return None
    scale, shift, mean, var = (p.double() for p in parameters)
    factor = scale * torch.rsqrt(var + eps)
    base = torch.zeros_like(mean) if bias is None else bias.double()
    folded = _scaled(weight.double(), factor, groups).to(weight.dtype)
    return folded, ((base - mean) * factor + shift).to(weight.dtype)


def _batch_norm_result(norm: Node) -> Node | None:
    """The node reading a batch normalization's result (its first output), if nothing reads
    its other two (the empty saved statistics of the inference form)."""
    found = None
    for user in norm.users:
        if user.target is not operator.getitem:
            return None
        if user.args[1] == 0:
            found = user
        elif user.users:
            return None
    return found


class _Constants:
    """The values of a graph's nodes computed from the module's attributes and literals only
    (a frozen weight, a captured initializer, a view of one), evaluated when asked for."""

    def __init__(self, module: GraphModule) -> None:
        self.module = module
        self.nodes: set[Node] = set()
        for node in module.graph.nodes:  # in order: a node's inputs come before it
            if node.op == "get_attr" or (
                node.op == "call_function"
                and torch.Tag.nondeterministic_seeded not in getattr(node.target, "tags", ())
                and all(n in self.nodes for n in node.all_input_nodes)
            ):
                self.nodes.add(node)
        self._values: dict[Node, Any] = {}

    def value(self, arg: Any) -> Any:
        """``arg``'s value: a literal's own, a constant node's computed; None for others."""
        if not isinstance(arg, Node):
            return arg
        if arg not in self.nodes:
            return None
        if arg not in self._values:
            if arg.op == "get_attr":
                found = getattr(self.module, str(arg.target), None)
            else:
                args, kwargs = map_arg((arg.args, arg.kwargs), self.value)
                found = arg.target(*args, **kwargs)
            self._values[arg] = found
        return self._values[arg]


def _per_channel(value: Any, weight: torch.Tensor, groups: int) -> torch.Tensor | None:
    """``value`` as one number per output channel, if it broadcasts against the convolution's
    output that way (a scalar, or ones but for the channel dimension) and keeps its dtype."""
    channels = weight.shape[1] * groups
    if isinstance(value, (int, float)):
        value = torch.tensor(float(value), dtype=weight.dtype)
    if (
        not isinstance(value, torch.Tensor)
        or value.dtype != weight.dtype
        or value.device != weight.device
        or value.dim() > weight.dim()
    ):
        return None
    shape = [1] * (weight.dim() - value.dim()) + list(value.shape)
    if any(size != 1 for i, size in enumerate(shape) if i != 1) or shape[1] not in (1, channels):
        return None
    return value.reshape(-1).expand(channels)


def _folded(
    target: Any, weight: torch.Tensor, bias: torch.Tensor | None, per: torch.Tensor, groups: int
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The weight and bias of the convolution followed by ``target`` with ``per``."""
    if target in (_aten.add.Tensor, _aten.sub.Tensor):
        if bias is None:
            bias = torch.zeros_like(per)
        return weight, bias + per if target is _aten.add.Tensor else bias - per
    scale = per if target is _aten.mul.Tensor else 1 / per
    return _scaled(weight, scale, groups), None if bias is None else bias * scale


def _scaled(weight: torch.Tensor, scale: torch.Tensor, groups: int) -> torch.Tensor:
    """A transposed convolution's weight with each output channel's columns times its
    ``scale``."""
    # [C_in, C_out / group, k...]: the output channel of column j in group g is g * C_out/g + j
    grouped = weight.reshape(groups, weight.shape[0] // groups, *weight.shape[1:])
    shape = [groups, 1, weight.shape[1]] + [1] * (weight.dim() - 2)
    return (grouped * scale.reshape(shape)).reshape(weight.shape)


def _attribute(module: GraphModule, conv: Node, name: str, value: torch.Tensor) -> Node:
    """A new constant of the module holding ``value``, with an example like the graph's."""
    module.register_buffer(name, value.contiguous())
    node = module.graph.get_attr(name)
    example = conv.meta.get("val")
    mode = getattr(example, "fake_mode", None)
    if mode is not None:
        node.meta["val"] = mode.from_tensor(getattr(module, name), static_shapes=True)
    return node
