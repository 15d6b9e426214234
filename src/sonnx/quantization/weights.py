"""``quantize_weights``: weight-only quantization of MatMul's constant weights to 4 or 8 bits,
written as ``com.microsoft`` ``MatMulNBits``, as onnxruntime's ``MatMulNBitsQuantizer``
(default algorithm, ``QuantFormat.QOperator``) writes it: the same packed codes, scales, zero
points, attributes, node and initializer names and placement (:mod:`.blockwise` computes the
numbers as onnxruntime's C++ kernel does). Activations stay in float; onnxruntime and sonnx
both run the result.

Each MatMul whose second input is a float32, float16 or bfloat16 initializer of shape
``[K, N]``, or ``[1, ..., 1, K, N]`` (then, where the input's rank may be lower, the product
is reshaped as onnxruntime reshapes it: :mod:`.nbits_shape`), is replaced. Where it departs
from onnxruntime (the model is otherwise the same, byte for byte):

- the given model is not modified (onnxruntime's quantizer rewrites the ModelProto it is
  handed);
- nodes holding subgraphs (``If``, ``Loop``, ``Scan``) keep their domain and attribute order
  (onnxruntime rebuilds them, sorting the attributes, and drops a custom domain);
- a name in ``nodes_to_exclude`` that no node has is an error (onnxruntime ignores it).
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
from sonnx.quantization.nbits_shape import output_reshape, static_rank
from sonnx.quantization.rewrite import MS_DOMAIN
from sonnx.quantization.static import _float_model

__all__ = ["quantize_weights", "rewrite_matmuls"]

_BITS = (4, 8)
#: the block sizes onnxruntime's quantization kernel (``MlasQuantizeBlockwise``) accepts.
_BLOCK_SIZES = (16, 32, 64, 128, 256)
_FLOAT_TYPES = {onnx.TensorProto.FLOAT, onnx.TensorProto.FLOAT16, onnx.TensorProto.BFLOAT16}


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
        input is a float initializer of shape [1, ..., 1, K, N] (nothing to quantize).
    """
    _check_options(bits, block_size, accuracy_level)
    proto = _float_model(model, "quantize_weights")
    excluded = _excluded(nodes_to_exclude, proto)
    options = (int(bits), int(block_size), bool(symmetric), int(accuracy_level or 0))
    if not rewrite_matmuls(proto, numpy_helper.to_array, *options, excluded):
        raise BadModelError(
            "quantize_weights: the model has nothing to quantize: no MatMul (outside "
            "nodes_to_exclude) reads a float initializer of shape [K, N] or [1, ..., 1, K, N] "
            "as its second input; "
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
    """Replace, in place, each MatMul of ``model`` (and its subgraphs) that reads a float
    initializer by MatMulNBits, as :func:`quantize_weights` does, reading each weight through
    ``value_of`` (so a model whose initializers are headers without bytes, such as
    :func:`sonnx.lora.export` writes, is quantized one weight at a time). The options are not
    checked here.

    :param model: the model to rewrite.
    :param value_of: a weight's float array (float32, float16 or bfloat16) from its
        initializer.
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


def _is_int(value: Any) -> bool:
    return isinstance(value, (int, np.integer)) and not isinstance(value, bool)


def _check_options(bits: Any, block_size: Any, accuracy_level: Any) -> None:
    """Typed errors for options MatMulNBits or onnxruntime's kernel cannot take."""
    if not _is_int(bits) or bits not in _BITS:
        raise BadInputError(f"quantize_weights: bits must be 4 or 8, received {bits!r}")
    if not _is_int(block_size) or block_size not in _BLOCK_SIZES:
        raise BadInputError(
            "quantize_weights: block_size must be one of "
            f"{', '.join(map(str, _BLOCK_SIZES))} (a power of two from 16, as MatMulNBits "
            f"needs), received {block_size!r}"
        )
    if accuracy_level is not None and (
        not _is_int(accuracy_level) or accuracy_level not in range(5)
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
                replaced = self._matmul(node, stack)
                if replaced is not None:
                    nodes.extend(replaced)
                    continue
            nodes.append(node)
        graph.ClearField("node")
        graph.node.extend(nodes)

    def _matmul(
        self, node: onnx.NodeProto, stack: list[onnx.GraphProto]
    ) -> list[onnx.NodeProto] | None:
        """The MatMulNBits node (and, for a weight with leading 1s that ``A`` may not
        broadcast to, the reshape of its output) replacing ``node``; None when its weight is
        no float initializer of shape ``[1, ..., 1, K, N]``."""
        found = _initializer(node.input[1], stack)
        if found is None:
            return None
        tensor, owner = found
        dims = tuple(tensor.dims)
        if len(dims) < 2 or any(d != 1 for d in dims[:-2]):
            return None
        if tensor.data_type not in _FLOAT_TYPES:
            return None
        weight = np.asarray(self.value_of(tensor)).reshape(dims[-2:])
        names = self._write(tensor, owner, weight)
        attributes = {"K": dims[-2], "N": dims[-1], "bits": self.bits}
        attributes["block_size"] = self.block_size
        if self.accuracy_level:
            attributes["accuracy_level"] = self.accuracy_level
        rank = static_rank(node.input[0], stack)
        reshaped = len(dims) > 2 and (rank is None or rank < len(dims))
        output = f"{node.output[0]}_pre_reshape" if reshaped else node.output[0]
        name = f"{node.name}_Q{self.bits}" if node.name else ""
        nodes = [
            onnx.helper.make_node(
                "MatMulNBits",
                [node.input[0], *names],
                [output],
                name=name,
                domain=MS_DOMAIN,
                **attributes,
            )
        ]
        if reshaped:
            prefix = name or f"{tensor.name}_Q{self.bits}"
            nodes += output_reshape(node.input[0], dims, owner, prefix, output, node.output[0])
        self.quantized += 1
        return nodes

    def _write(
        self, tensor: onnx.TensorProto, owner: onnx.GraphProto, weight: np.ndarray
    ) -> list[str]:
        """Quantize ``weight`` and put its codes, scales (and zero points) in ``owner`` in
        place of the float weight's graph input; returns their names. A weight read again
        has its tensors moved to the end of ``owner``'s initializers, where onnxruntime's
        quantizer leaves them (it writes them once per reader and keeps the last copy)."""
        names = [f"{tensor.name}_Q{self.bits}", f"{tensor.name}_scales"]
        if not self.symmetric:
            names.append(f"{tensor.name}_zero_points")
        if (id(owner), tensor.name) in self._written:
            moved = [t for t in owner.initializer if t.name in names]
            for t in moved:
                owner.initializer.remove(t)
            owner.initializer.extend(moved)
            return names
        self._written.add((id(owner), tensor.name))
        bfloat16 = tensor.data_type == onnx.TensorProto.BFLOAT16
        # onnxruntime quantizes a bfloat16 weight in float32 and writes bfloat16 scales
        result = quantize_blockwise(
            weight.astype(np.float32) if bfloat16 else weight,
            self.bits,
            self.block_size,
            self.symmetric,
        )
        if bfloat16:
            scales = result.scales.astype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type))
        else:
            scales = result.scales
        arrays = [result.packed, scales]
        if result.zero_points is not None:
            arrays.append(result.zero_points)
        for graph_input in owner.input:
            if graph_input.name == tensor.name:
                owner.input.remove(graph_input)
                break
        owner.initializer.extend(
            numpy_helper.from_array(np.ascontiguousarray(a), n)
            for a, n in zip(arrays, names, strict=True)
        )
        return names


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
