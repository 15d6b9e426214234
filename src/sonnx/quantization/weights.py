"""``quantize_weights``: weight-only quantization of MatMul's constant weights to 4 or 8 bits,
written as ``com.microsoft`` ``MatMulNBits``, as onnxruntime's ``MatMulNBitsQuantizer``
(default algorithm, ``QuantFormat.QOperator``) writes it: the same packed codes, scales, zero
points, attributes, node and initializer names and placement (:mod:`.blockwise` computes the
numbers as onnxruntime's C++ kernel does). Activations stay in float; onnxruntime and sonnx
both run the result.

Where it departs from onnxruntime (the model is otherwise the same, byte for byte):

- the given model is not modified (onnxruntime's quantizer rewrites the ModelProto it is
  handed);
- a weight read by several MatMuls is written once (onnxruntime writes its quantized tensors
  once per reader, under the same name);
- nodes holding subgraphs (``If``, ``Loop``, ``Scan``) keep their domain and attribute order
  (onnxruntime rebuilds them, sorting the attributes);
- a MatMul whose weight has more than two dims (onnxruntime squeezes leading 1s and adds a
  reshape chain) or is not float32/float16 stays in float.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from os import PathLike
from typing import Any

import numpy as np
import onnx
from onnx import numpy_helper

from sonnx.errors import BadInputError, BadModelError
from sonnx.quantization.blockwise import quantize_blockwise
from sonnx.quantization.rewrite import MS_DOMAIN
from sonnx.quantization.static import _float_model

__all__ = ["quantize_weights", "rewrite_matmuls"]

_BITS = (4, 8)
#: the block sizes onnxruntime's quantization kernel (``MlasQuantizeBlockwise``) accepts.
_BLOCK_SIZES = (16, 32, 64, 128, 256)
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16}


def quantize_weights(
    model: str | PathLike | onnx.ModelProto | Any,
    bits: int = 4,
    block_size: int = 32,
    symmetric: bool = True,
    accuracy_level: int | None = 4,
    nodes_to_exclude: Iterable[str] | None = None,
) -> onnx.ModelProto:
    """Quantize the constant weights of ``model``'s MatMul nodes block-wise to ``bits`` bits,
    replacing each such MatMul by a ``com.microsoft`` ``MatMulNBits`` node.

    The result equals what onnxruntime's
    ``MatMulNBitsQuantizer(model, bits, block_size, is_symmetric, accuracy_level,
    nodes_to_exclude)`` writes (its default algorithm); the defaults here are the usual
    choice for LLMs (onnxruntime-genai's builder writes int4, block 32, symmetric, level 4).

    :param model: the float model: a path, an ``onnx.ModelProto`` (not modified) or a
        :class:`~sonnx.SingaRep` (its current, perhaps trained, weights).
    :param bits: 4 or 8.
    :param block_size: weights per block along the MatMul's inner dimension, each block with
        its own scale: 16, 32, 64, 128 or 256.
    :param symmetric: one scale per block around the middle code; False adds a zero point per
        block (onnxruntime's ``is_symmetric``).
    :param accuracy_level: MatMulNBits's ``accuracy_level`` (0-4; 4 lets onnxruntime's CPU
        kernel quantize the input to int8 blocks and multiply in integers); 0 or None writes
        no attribute.
    :param nodes_to_exclude: names of MatMul nodes left in float.
    :returns: the quantized model (a new ``onnx.ModelProto``).
    :raises BadInputError: bits, block_size or accuracy_level out of range, a name in
        ``nodes_to_exclude`` that no node has, or a model argument of another type.
    :raises BadModelError: an unreadable model file, or a model with no MatMul whose second
        input is a 2-D float32/float16 initializer (nothing to quantize).
    """
    _check_options(bits, block_size, accuracy_level)
    proto = _float_model(model, "quantize_weights")
    excluded = _excluded(nodes_to_exclude, proto)
    options = (bits, block_size, bool(symmetric), accuracy_level or 0)
    if not rewrite_matmuls(proto, numpy_helper.to_array, *options, excluded):
        raise BadModelError(
            "quantize_weights: the model has nothing to quantize: no MatMul (outside "
            "nodes_to_exclude) reads a 2-D float32 or float16 initializer as its second input; "
            f"received nodes of types {sorted(_op_types(proto.graph))}"
        )
    return proto


def rewrite_matmuls(
    model: onnx.ModelProto,
    value_of: Callable[[onnx.TensorProto], np.ndarray],
    bits: int,
    block_size: int,
    symmetric: bool,
    accuracy_level: int,
    excluded: Iterable[str] = (),
) -> int:
    """Replace, in place, each MatMul of ``model`` (and its subgraphs) that reads a 2-D float
    initializer by MatMulNBits, as :func:`quantize_weights` does, reading each weight through
    ``value_of`` (so a model whose initializers are headers without bytes, such as
    :func:`sonnx.lora.export` writes, is quantized one weight at a time). The options are not
    checked here.

    :param model: the model to rewrite.
    :param value_of: a weight's float32/float16 array from its initializer.
    :param bits: 4 or 8.
    :param block_size: weights per block.
    :param symmetric: no zero points.
    :param accuracy_level: MatMulNBits's accuracy_level (0: none written).
    :param excluded: names of MatMul nodes to leave in float.
    :returns: how many MatMul nodes were replaced (0: the model is left as it was).
    """
    rewriter = _Rewriter(bits, block_size, symmetric, accuracy_level, frozenset(excluded), value_of)
    rewriter.graph([model.graph])
    if rewriter.quantized:
        _set_opset(model, MS_DOMAIN, 1)
        _drop_unused_initializers(model.graph)
    return rewriter.quantized


def _check_options(bits: Any, block_size: Any, accuracy_level: Any) -> None:
    """Typed errors for options MatMulNBits or onnxruntime's kernel cannot take."""
    if isinstance(bits, bool) or bits not in _BITS:
        raise BadInputError(f"quantize_weights: bits must be 4 or 8, received {bits!r}")
    if isinstance(block_size, bool) or block_size not in _BLOCK_SIZES:
        raise BadInputError(
            "quantize_weights: block_size must be one of "
            f"{', '.join(map(str, _BLOCK_SIZES))} (a power of two from 16, as MatMulNBits "
            f"needs), received {block_size!r}"
        )
    if accuracy_level is not None and (
        isinstance(accuracy_level, bool) or accuracy_level not in range(5)
    ):
        raise BadInputError(
            "quantize_weights: accuracy_level must be None or 0-4 (MatMulNBits's levels), "
            f"received {accuracy_level!r}"
        )


def _subgraphs(node: onnx.NodeProto) -> list[onnx.GraphProto]:
    """The graphs a node holds (If branches, Loop and Scan bodies)."""
    graphs: list[onnx.GraphProto] = []
    for attribute in node.attribute:
        if attribute.type == onnx.AttributeProto.GRAPH:
            graphs.append(attribute.g)
        elif attribute.type == onnx.AttributeProto.GRAPHS:
            graphs.extend(attribute.graphs)
    return graphs


def _nodes(graph: onnx.GraphProto) -> Iterable[onnx.NodeProto]:
    """Every node of ``graph`` and of its subgraphs."""
    for node in graph.node:
        yield node
        for subgraph in _subgraphs(node):
            yield from _nodes(subgraph)


def _op_types(graph: onnx.GraphProto) -> set[str]:
    return {node.op_type for node in _nodes(graph)}


def _excluded(names: Iterable[str] | None, model: onnx.ModelProto) -> frozenset[str]:
    """``nodes_to_exclude`` as a set, each name checked against the model's nodes."""
    if names is None:
        return frozenset()
    if isinstance(names, str):
        names = [names]
    excluded = frozenset(names)
    known = {node.name for node in _nodes(model.graph)}
    unknown = sorted(excluded - known)
    if unknown:
        matmuls = sorted(n.name for n in _nodes(model.graph) if n.op_type == "MatMul")
        raise BadInputError(
            f"quantize_weights: nodes_to_exclude names nodes the model does not have: {unknown}; "
            f"its MatMul nodes are {matmuls[:20]}{' ...' if len(matmuls) > 20 else ''}"
        )
    return excluded


class _Rewriter:
    """Walks a graph and its subgraphs, replacing each quantizable MatMul in place."""

    def __init__(
        self,
        bits: int,
        block_size: int,
        symmetric: bool,
        accuracy_level: int,
        excluded: frozenset[str],
        value_of: Callable[[onnx.TensorProto], np.ndarray],
    ) -> None:
        self.bits, self.block_size, self.symmetric = bits, block_size, symmetric
        self.accuracy_level, self.excluded = accuracy_level, excluded
        self.value_of = value_of
        self.quantized = 0
        self._written: set[tuple[int, str]] = set()

    def graph(self, stack: list[onnx.GraphProto]) -> None:
        """Rewrite ``stack[-1]``'s nodes; ``stack`` holds the enclosing graphs, whose
        initializers the nodes may read."""
        graph = stack[-1]
        nodes = []
        for node in graph.node:
            for subgraph in _subgraphs(node):
                self.graph([*stack, subgraph])
            quantizable = node.op_type == "MatMul" and node.domain in ("", "ai.onnx")
            if quantizable and node.name not in self.excluded:
                node = self._matmul(node, stack) or node
            nodes.append(node)
        graph.ClearField("node")
        graph.node.extend(nodes)

    def _matmul(self, node: onnx.NodeProto, stack: list[onnx.GraphProto]) -> onnx.NodeProto | None:
        """The MatMulNBits replacing ``node``, or None when its weight is not a 2-D float
        initializer."""
        found = _initializer(node.input[1], stack)
        if found is None:
            return None
        tensor, owner = found
        if len(tensor.dims) != 2 or tensor.data_type not in _FLOAT_TYPES:
            return None
        weight = self.value_of(tensor)
        result = quantize_blockwise(weight, self.bits, self.block_size, self.symmetric)
        names = [f"{tensor.name}_Q{self.bits}", f"{tensor.name}_scales"]
        arrays = [result.packed, result.scales]
        if result.zero_points is not None:
            names.append(f"{tensor.name}_zero_points")
            arrays.append(result.zero_points)
        key = (id(owner), tensor.name)
        if key not in self._written:
            self._written.add(key)
            for graph_input in owner.input:
                if graph_input.name == tensor.name:
                    owner.input.remove(graph_input)
                    break
            owner.initializer.extend(
                numpy_helper.from_array(np.ascontiguousarray(a), n)
                for a, n in zip(arrays, names, strict=True)
            )
        attributes = {"K": weight.shape[0], "N": weight.shape[1], "bits": self.bits}
        attributes["block_size"] = self.block_size
        if self.accuracy_level:
            attributes["accuracy_level"] = self.accuracy_level
        self.quantized += 1
        return onnx.helper.make_node(
            "MatMulNBits",
            [node.input[0], *names],
            [node.output[0]],
            name=f"{node.name}_Q{self.bits}" if node.name else "",
            domain=MS_DOMAIN,
            **attributes,
        )


def _initializer(
    name: str, stack: list[onnx.GraphProto]
) -> tuple[onnx.TensorProto, onnx.GraphProto] | None:
    """The initializer ``name`` in the innermost graph of ``stack`` that has it, and that
    graph."""
    for graph in reversed(stack):
        for tensor in graph.initializer:
            if tensor.name == name:
                return tensor, graph
    return None


def _set_opset(model: onnx.ModelProto, domain: str, version: int) -> None:
    for opset in model.opset_import:
        if opset.domain == domain:
            opset.version = version
            return
    model.opset_import.append(onnx.helper.make_opsetid(domain, version))


def _drop_unused_initializers(graph: onnx.GraphProto) -> set[str]:
    """Remove the initializers (and their graph inputs) nothing reads, in ``graph`` and its
    subgraphs, as onnxruntime's ``ONNXModel.clean_initializers`` does. Returns the names
    the graph reads from outside itself."""
    wanted = {name for node in graph.node for name in node.input if name}
    wanted |= {output.name for output in graph.output if output.name}
    for node in graph.node:
        for subgraph in _subgraphs(node):
            wanted |= _drop_unused_initializers(subgraph)
    wanted -= {name for node in graph.node for name in node.output}
    unused = [tensor for tensor in graph.initializer if tensor.name not in wanted]
    unused_names = {tensor.name for tensor in unused}
    for tensor in unused:
        graph.initializer.remove(tensor)
    kept_inputs = [i for i in graph.input if i.name not in unused_names]
    if len(kept_inputs) != len(graph.input):
        graph.ClearField("input")
        graph.input.extend(kept_inputs)
    wanted -= {tensor.name for tensor in graph.initializer}
    return wanted - {graph_input.name for graph_input in graph.input}
