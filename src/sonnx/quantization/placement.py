"""Where the QuantizeLinear/DequantizeLinear pairs go: onnxruntime's QDQ quantizer's first
pass (``QDQQuantizer.quantize_model`` and the ``operators/*`` rules), which walks the nodes
in graph order and marks the tensors each operator wants quantized.

- Conv, ConvTranspose, Gemm: the input and output as activations, the weight (per channel
  on axis 0, ConvTranspose 1, Gemm 0 with ``transB`` else 1) and the bias to int32 with
  scale ``input_scale * weight_scale`` (Gemm's ``beta`` folded in, then reset to 1);
- MatMul: every input and output, constant ones as weights (per channel on axis 1);
- Relu, Clip: removed, the producer writing their output instead, when activations are
  asymmetric and the producer's output has no other reader; else marked like any operator;
- Reshape, Transpose, Squeeze, Unsqueeze, Flatten, AveragePool, MaxPool, Slice, Resize,
  TopK, Split: the output shares its input's scale, when the input is quantized already;
- Gather: a constant table or a quantized input, the output sharing its scale;
- LayerNormalization, InstanceNormalization, BatchNormalization: the input, the scale as a
  weight, the bias to int32, the output;
- Pad: every input, the output sharing the input's scale when it pads with input values
  or 0;
- Where: the output, when both values are quantized;
- every other operator asked for (Add, Mul, Concat, Softmax, Sigmoid, GlobalAveragePool,
  ...): every float input and output as activations.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import numpy_helper

from sonnx.onnx.model_loading import opset_versions
from sonnx.quantization.options import QuantizeOptions

__all__ = ["Bias", "Mark", "Placement", "place"]

_FLOATS = (onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16)


@dataclass
class Mark:
    """A tensor to quantize: an activation or a weight (``axis`` when per channel), or an
    output sharing the scale of ``shared_from`` (an input of node ``shared_node``)."""

    weight: bool = False
    axis: int | None = None
    shared_from: str | None = None
    shared_node: str | None = None


@dataclass(frozen=True)
class Bias:
    """A bias quantized to int32 with scale ``scale(input) * scale(weight) * beta``."""

    node: str
    input: str
    weight: str
    beta: float = 1.0


@dataclass
class Placement:
    """The outcome of the marking pass over a (rewritten) working copy of the model."""

    model: onnx.ModelProto
    ranges: dict[str, tuple[np.ndarray, np.ndarray]]
    tensors: dict[str, Mark] = field(default_factory=dict)
    biases: dict[str, Bias] = field(default_factory=dict)
    removed: list[onnx.NodeProto] = field(default_factory=list)


class _Marker:
    """The state of onnxruntime's marking pass, with its ``quantize_*`` verbs."""

    def __init__(self, placement: Placement, options: QuantizeOptions) -> None:
        self.p = placement
        self.options = options
        graph = placement.model.graph
        self.initializers = {t.name: t for t in graph.initializer}
        infos = {v.name: v for v in [*graph.value_info, *graph.output, *graph.input]}
        self.types = {
            n: v.type.tensor_type.elem_type
            for n, v in infos.items()
            if v.type.HasField("tensor_type")
        }
        self.graph_inputs = {v.name for v in graph.input}
        self.graph_outputs = {v.name for v in graph.output}
        self.opset = opset_versions(placement.model)[""]

    def quantizable(self, name: str) -> bool:
        init = self.initializers.get(name)
        if init is not None:
            return init.data_type in _FLOATS
        return self.types.get(name) in _FLOATS

    def is_quantized(self, name: str) -> bool:
        return name in self.p.tensors or name in self.p.biases

    def activation(self, name: str) -> None:
        if self.quantizable(name) and name not in self.p.tensors:
            self.p.tensors[name] = Mark()

    def weight(self, name: str, default_axis: int, op_type: str | None = None) -> None:
        """A weight per channel (when asked and constant) or per tensor."""
        init = self.initializers.get(name)
        if self.options.per_channel and init is not None:
            axis = (
                self.options.per_channel_axis.get(op_type, default_axis)
                if op_type
                else default_axis
            )
            rank = len(init.dims)
            if -rank <= axis < rank:
                if init.data_type in _FLOATS:
                    self.p.tensors[name] = Mark(weight=True, axis=axis % rank)
                return
        if self.quantizable(name) and name not in self.p.tensors:
            self.p.tensors[name] = Mark(weight=True)

    def same_as_input(self, output: str, source: str, node: onnx.NodeProto) -> None:
        if self.quantizable(output):
            self.p.tensors[output] = Mark(shared_from=source, shared_node=node.name)

    def bias(self, node: onnx.NodeProto, name: str, x: str, w: str, beta: float = 1.0) -> None:
        init = self.initializers.get(name)
        if init is None or init.data_type not in _FLOATS:
            return
        if name in self.p.biases:
            # a bias read by two nodes gets one copy per node: its scale depends on each node
            copy = onnx.TensorProto()
            copy.CopyFrom(init)
            copy.name = f"{name}{_largest_suffix(self.initializers, name) + 1}"
            self.p.model.graph.initializer.append(copy)
            self.initializers[copy.name] = copy
            node.input[list(node.input).index(name)] = copy.name
            name = copy.name
        self.p.biases[name] = Bias(node.name, x, w, beta)

    def constant(self, name: str) -> np.ndarray | None:
        """The value of a Constant node's output or of an initializer; None otherwise."""
        for node in self.p.model.graph.node:
            if node.op_type == "Constant" and node.output[0] == name:
                value = next((a.t for a in node.attribute if a.name == "value"), None)
                return None if value is None else numpy_helper.to_array(value)
        init = self.initializers.get(name)
        return None if init is None else numpy_helper.to_array(init)

    def outputs(self, node: onnx.NodeProto) -> list[str]:
        return [] if node.op_type in self.options.exclude_output_ops else list(node.output)

    def replace_upstream(self, upstream: str, output: str) -> bool:
        """Let the producer of ``upstream`` write ``output`` (a removed Relu's), when both
        have ranges and ``upstream`` has no other reader and is no graph input or output."""
        readers = sum(name == upstream for n in self.p.model.graph.node for name in n.input)
        if (
            output in self.p.ranges
            and upstream in self.p.ranges
            and readers == 1
            and upstream not in self.graph_outputs
            and upstream not in self.graph_inputs
        ):
            for n in self.p.model.graph.node:
                for i, name in enumerate(n.output):
                    if name == upstream:
                        n.output[i] = output
            self.p.tensors.pop(upstream, None)
            return True
        return False


def _largest_suffix(initializers: dict[str, onnx.TensorProto], name: str) -> int:
    suffixes = [
        int(k[len(name) :]) for k in initializers if k[len(name) :].isdigit() and k.startswith(name)
    ]
    return max(suffixes, default=-1)


def _attr(node: onnx.NodeProto, name: str, default: object) -> object:
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _conv(m: _Marker, node: onnx.NodeProto) -> None:
    m.activation(node.input[0])
    for out in m.outputs(node)[:1]:
        m.activation(out)
    m.weight(node.input[1], 0 if node.op_type == "Conv" else 1)
    if len(node.input) == 3:
        m.bias(node, node.input[2], node.input[0], node.input[1])


def _gemm(m: _Marker, node: onnx.NodeProto) -> None:
    m.activation(node.input[0])
    for out in m.outputs(node)[:1]:
        m.activation(out)
    m.weight(node.input[1], 0 if _attr(node, "transB", 0) else 1)
    if len(node.input) == 3 and node.input[2] in m.initializers:
        m.bias(node, node.input[2], node.input[0], node.input[1], float(_attr(node, "beta", 1.0)))
        for a in node.attribute:
            if a.name == "beta":
                a.f = 1.0


def _matmul(m: _Marker, node: onnx.NodeProto) -> None:
    for name in [*node.input, *m.outputs(node)]:
        if name in m.initializers:
            m.weight(name, 1, node.op_type)
        else:
            m.activation(name)


def _removable(m: _Marker, node: onnx.NodeProto) -> None:
    if not m.is_quantized(node.input[0]):
        return
    if (
        not m.options.activation_symmetric
        and not m.options.keep_removable_activations
        and m.replace_upstream(node.input[0], node.output[0])
    ):
        m.p.removed.append(node)
    else:
        m.activation(node.input[0])
    for out in m.outputs(node):
        m.activation(out)


def _direct(m: _Marker, node: onnx.NodeProto) -> None:
    if m.options.force_quantize_no_input_check:
        m.activation(node.input[0])
        for out in m.outputs(node)[:1]:
            m.same_as_input(out, node.input[0], node)
    elif m.is_quantized(node.input[0]):
        for out in m.outputs(node)[:1]:
            m.same_as_input(out, node.input[0], node)


def _pool(m: _Marker, node: onnx.NodeProto) -> None:
    if m.opset >= (12 if node.op_type == "MaxPool" else 11):
        _direct(m, node)


def _split(m: _Marker, node: onnx.NodeProto) -> None:
    if not m.is_quantized(node.input[0]):
        m.activation(node.input[0])
    for out in m.outputs(node):
        m.same_as_input(out, node.input[0], node)


def _gather(m: _Marker, node: onnx.NodeProto) -> None:
    table = m.initializers.get(node.input[0])
    if (
        table is not None and table.data_type in _FLOATS
    ) or m.options.force_quantize_no_input_check:
        m.activation(node.input[0])
        m.same_as_input(node.output[0], node.input[0], node)
    elif m.is_quantized(node.input[0]):
        m.same_as_input(node.output[0], node.input[0], node)


def _norm(m: _Marker, node: onnx.NodeProto) -> None:
    m.activation(node.input[0])
    if node.input[1] in m.initializers:
        m.weight(node.input[1], 1, node.op_type)
    else:
        m.activation(node.input[1])
    if len(node.input) > 2 and node.input[2]:
        m.bias(node, node.input[2], node.input[0], node.input[1])
    for out in m.outputs(node):
        m.activation(out)


def _pad(m: _Marker, node: onnx.NodeProto) -> None:
    """Every input; the output shares the input's scale when padding only repeats input
    values or pads with 0 (which every range holds)."""
    for name in node.input:
        if name:
            m.activation(name)
    for out in m.outputs(node)[:1]:
        if _pads_with_input_values(m, node):
            m.same_as_input(out, node.input[0], node)
        else:
            m.activation(out)


def _pads_with_input_values(m: _Marker, node: onnx.NodeProto) -> bool:
    mode = _attr(node, "mode", b"constant")
    if mode in (b"reflect", b"edge", b"wrap"):
        return True
    if mode != b"constant" or m.types.get(node.input[0]) is None:
        return False
    if m.opset < 11:
        value: np.ndarray | None = np.array(_attr(node, "value", 0.0), dtype=np.float32)
    elif len(node.input) >= 3 and node.input[2]:
        value = m.constant(node.input[2])
    else:
        value = np.array(0, dtype=onnx.helper.tensor_dtype_to_np_dtype(m.types[node.input[0]]))
    return (
        value is not None and value.dtype in (np.float32, np.float16) and float(value.item()) == 0
    )


def _where(m: _Marker, node: onnx.NodeProto) -> None:
    if m.options.force_quantize_no_input_check:
        for name in node.input[1:]:
            m.activation(name)
    elif not (m.is_quantized(node.input[1]) and m.is_quantized(node.input[2])):
        return
    for out in m.outputs(node):
        m.activation(out)


def _generic(m: _Marker, node: onnx.NodeProto) -> None:
    for name in [*node.input, *m.outputs(node)]:
        m.activation(name)


_RULES: dict[str, Callable[[_Marker, onnx.NodeProto], None]] = {
    "Conv": _conv,
    "ConvTranspose": _conv,
    "Gemm": _gemm,
    "MatMul": _matmul,
    "Relu": _removable,
    "Clip": _removable,
    "Reshape": _direct,
    "Transpose": _direct,
    "Squeeze": _direct,
    "Unsqueeze": _direct,
    "Flatten": _direct,
    "AveragePool": _direct,
    "Slice": _direct,
    "TopK": _direct,
    "MaxPool": _pool,
    "Resize": _pool,
    "Split": _split,
    "Gather": _gather,
    "GatherElements": _gather,
    "LayerNormalization": _norm,
    "InstanceNormalization": _norm,
    "BatchNormalization": _norm,
    "Where": _where,
    "Pad": _pad,
}

#: The operator types quantized by default: those with a rule above, and those onnxruntime
#: quantizes with its generic rule (QOperator-only types, quantized in QDQ form).
DEFAULT_OP_TYPES = frozenset(
    [
        *_RULES,
        "Add", "Mul", "Concat", "Softmax", "Sigmoid", "LeakyRelu", "GlobalAveragePool",
        "ArgMax", "CumSum",
    ]
)  # fmt: skip


def place(
    model: onnx.ModelProto,
    ranges: dict[str, tuple[np.ndarray, np.ndarray]],
    options: QuantizeOptions,
) -> Placement:
    """Mark what to quantize in ``model`` (a working copy: a removed Relu's producer is
    rewired in it, a shared bias copied, a Gemm's ``beta`` reset), node by node in graph
    order, onnxruntime's way."""
    placement = Placement(model, _adjusted(model, ranges, options))
    marker = _Marker(placement, options)
    for node in list(model.graph.node):
        if options.quantizes(node):
            _RULES.get(node.op_type, _generic)(marker, node)
    return placement


def _adjusted(
    model: onnx.ModelProto,
    ranges: dict[str, tuple[np.ndarray, np.ndarray]],
    options: QuantizeOptions,
) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """onnxruntime's ``adjust_tensor_ranges``: a Relu's or Clip's sole-read input takes the
    output's range (so that the activation can be dropped), a Softmax output is [0, 1]."""
    ranges = dict(ranges)
    readers: dict[str, int] = {}
    for node in model.graph.node:
        for name in node.input:
            readers[name] = readers.get(name, 0) + 1
    for node in model.graph.node:
        if not options.quantizes(node):
            continue
        if node.op_type in ("Clip", "Relu"):
            x, y = node.input[0], node.output[0]
            if readers.get(x) == 1 and x in ranges and y in ranges:
                ranges[x] = ranges[y]
        elif node.op_type == "Softmax":
            ranges[node.output[0]] = (np.float32(0.0), np.float32(1.0))
    return ranges
