"""``to_onnx(..., dtype="float16")``: rewrite an exported float32 model to compute in float16.

The rules follow onnxruntime's own converter (``onnxruntime.transformers.float16``, which is
``onnxconverter-common``'s ``convert_float_to_float16``): the operators of its default block
list stay float32 (:data:`ORT_BLOCK_LIST`), as does any input its schema types as float only
(Resize's ``scales``), and a ``Cast`` joins every float16 value to a float32 consumer and back.
Like ``keep_io_types=False``, the float inputs and outputs of the graph become float16 (an
output computed in float32 gets a final ``Cast``).

sonnx also keeps float32 what mixed-precision training keeps float32 under autocast
(:data:`PRECISION_SENSITIVE`): normalizations, whose variance of float16 values loses most of
its digits; Softmax, whose sum of exponentials does the same; reductions; and the recurrent
layers, whose state accumulates over every time step. onnxruntime's
transformer optimizer passes such operators in its ``op_block_list`` for the same reason.

Operators of other domains (ai.onnx.ml, com.microsoft) and those with a ``dtype`` attribute
(random generators, EyeLike) stay float32 too. What cannot be converted raises
:class:`~sonnx.errors.ExportError`: control flow (If, Loop, Scan: their subgraphs would need the
same rewrite), a value whose element type shape inference cannot tell, and a float32 constant
beyond float16's range.

onnxruntime 1.32 on the CPU crashes while optimizing some float16 models at its default level
(``ORT_ENABLE_ALL``; the CRNN stand-in, with an LSTM, for this converter's output and for
onnxruntime's own alike); ``ORT_ENABLE_EXTENDED`` runs them.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from sonnx.errors import ExportError
from sonnx.onnx.model_loading import opset_versions
from sonnx.onnx.registry import node_schema

__all__ = ["ORT_BLOCK_LIST", "PRECISION_SENSITIVE", "to_float16"]

#: the ai.onnx operators of onnxruntime's ``float16.DEFAULT_OP_BLOCK_LIST`` (its other entries
#: are ai.onnx.ml operators, which stay float32 here as a domain).
ORT_BLOCK_LIST = frozenset(
    {
        "CumSum",
        "Max",
        "Min",
        "NonMaxSuppression",
        "RandomUniformLike",
        "Range",
        "RoiAlign",
        "TopK",
        "Upsample",
    }
)
#: what sonnx keeps float32 beyond onnxruntime's defaults (see the module docstring).
PRECISION_SENSITIVE = frozenset(
    {
        "BatchNormalization",
        "GroupNormalization",
        "InstanceNormalization",
        "LayerNormalization",
        "LpNormalization",
        "MeanVarianceNormalization",
        "Softmax",
        "LogSoftmax",
        "ReduceL1",
        "ReduceL2",
        "ReduceLogSum",
        "ReduceLogSumExp",
        "ReduceMean",
        "ReduceProd",
        "ReduceSum",
        "ReduceSumSquare",
        "GRU",
        "LSTM",
        "RNN",
    }
)
_FP16_LIMIT = float(np.finfo(np.float16).max)
_FLOAT = TensorProto.FLOAT
_HALF = TensorProto.FLOAT16
_SUFFIX = {_FLOAT: "float32", _HALF: "float16"}


def to_float16(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` computing in float16 where onnxruntime's converter would."""
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    subgraph = (onnx.AttributeProto.GRAPH, onnx.AttributeProto.GRAPHS)
    for node in graph.node:
        if any(a.type in subgraph for a in node.attribute):
            raise ExportError(
                f"to_onnx(dtype='float16'): node {node.name or node.op_type!r} ({node.op_type}) "
                "has a subgraph; float16 export handles graphs without control flow only, "
                "export this model as float32"
            )
    types = _element_types(out)
    opset = opset_versions(out)[""]
    # Nodes are known by their index: protobuf hands out a new wrapper at every access.
    half_nodes = {k for k, n in enumerate(graph.node) if _computes_in_half(n, types, opset)}
    wanted = _wanted_types(graph, types, half_nodes, opset)
    storage = _storage_types(graph, types, half_nodes, wanted)
    _convert_constants(graph, storage, half_nodes)
    # Both keep the original nodes' indices valid: the first appends, the second comes last.
    _rename_float32_outputs(graph, storage)
    _insert_casts(graph, storage, wanted, half_nodes)
    for value in (*graph.input, *graph.output):
        if value.type.tensor_type.elem_type == _FLOAT:
            value.type.tensor_type.elem_type = _HALF
    del graph.value_info[:]
    try:
        onnx.shape_inference.infer_shapes(out, strict_mode=True)
    except onnx.shape_inference.InferenceError as e:
        raise ExportError(
            f"to_onnx(dtype='float16'): the converted model does not type check: {e}"
        ) from e
    return out


def _element_types(model: onnx.ModelProto) -> dict[str, int]:
    """Every value's element type, from the declared types and shape inference."""
    inferred = onnx.shape_inference.infer_shapes(model).graph
    types = {
        v.name: v.type.tensor_type.elem_type
        for v in (*inferred.input, *inferred.value_info, *inferred.output)
        if v.type.HasField("tensor_type")
    }
    types |= {t.name: t.data_type for t in model.graph.initializer}
    for node in model.graph.node:
        for name in (*node.input, *node.output):
            if name and not types.get(name):
                raise ExportError(
                    f"to_onnx(dtype='float16'): shape inference cannot tell the element type "
                    f"of {name!r} (at node {node.name or node.op_type!r}, {node.op_type}); "
                    "float16 export needs every value typed"
                )
    return types


def _slot_allows_half(schema: onnx.defs.OpSchema, index: int, is_input: bool) -> bool:
    formals = schema.inputs if is_input else schema.outputs
    if not formals:
        return False
    formal = formals[min(index, len(formals) - 1)]
    allowed = {c.type_param_str: c.allowed_type_strs for c in schema.type_constraints}
    return "tensor(float16)" in allowed.get(formal.type_str, [formal.type_str])


def _computes_in_half(node: onnx.NodeProto, types: dict[str, int], opset: int) -> bool:
    """Whether ``node`` runs in float16 (else it stays float32, fed through casts)."""
    if node.domain not in ("", "ai.onnx") or node.op_type in ORT_BLOCK_LIST | PRECISION_SENSITIVE:
        return False
    if any(a.name == "dtype" for a in node.attribute):
        return False
    schema = node_schema(node.op_type, opset, node.domain)
    if schema is None:
        return False
    return all(
        _slot_allows_half(schema, i, is_input=False)
        for i, name in enumerate(node.output)
        if name and types[name] == _FLOAT
    )


def _wanted_types(
    graph: onnx.GraphProto, types: dict[str, int], half_nodes: set[int], opset: int
) -> dict[tuple[int, int], int]:
    """``(node index, input index) -> element type`` each float input slot computes in."""
    wanted = {}
    for k, node in enumerate(graph.node):
        schema = node_schema(node.op_type, opset, node.domain) if k in half_nodes else None
        for i, name in enumerate(node.input):
            if name and types[name] == _FLOAT:
                half = schema is not None and _slot_allows_half(schema, i, is_input=True)
                wanted[(k, i)] = _HALF if half else _FLOAT
    return wanted


def _storage_types(
    graph: onnx.GraphProto,
    types: dict[str, int],
    half_nodes: set[int],
    wanted: dict[tuple[int, int], int],
) -> dict[str, int]:
    """Each float value's element type after conversion.

    A node's outputs take its precision; the graph inputs become float16; a constant
    (initializer or Constant node) stays float32 when some consumer computes in float32, so
    that it keeps its digits there, and becomes float16 otherwise.
    """
    storage = {v.name: _HALF for v in graph.input if types.get(v.name) == _FLOAT}
    wants: dict[str, set[int]] = {v.name: {_HALF} for v in graph.output}
    for k, node in enumerate(graph.node):
        for i, name in enumerate(node.input):
            if (k, i) in wanted:
                wants.setdefault(name, set()).add(wanted[(k, i)])
    for init in graph.initializer:
        if init.data_type == _FLOAT and init.name not in storage:
            storage[init.name] = _HALF if wants.get(init.name, {_HALF}) == {_HALF} else _FLOAT
    for k, node in enumerate(graph.node):
        for name in node.output:
            if name and types[name] == _FLOAT:
                if node.op_type == "Constant" and node.domain in ("", "ai.onnx"):
                    storage[name] = _HALF if wants.get(name, {_HALF}) == {_HALF} else _FLOAT
                else:
                    storage[name] = _HALF if k in half_nodes else _FLOAT
    return storage


def _rename_float32_outputs(graph: onnx.GraphProto, storage: dict[str, int]) -> None:
    """A graph output computed in float32 is renamed inside the graph and cast to float16
    under its own name by a final node."""
    produced = {name for node in graph.node for name in node.output}
    for output in graph.output:
        name = output.name
        if storage.get(name) != _FLOAT or name not in produced:
            continue
        inner = f"{name}_float32"
        for node in graph.node:
            for field in (node.input, node.output):
                for k, value in enumerate(field):
                    if value == name:
                        field[k] = inner
        storage[inner] = _FLOAT
        storage[name] = _HALF
        graph.node.append(helper.make_node("Cast", [inner], [name], to=_HALF, name=f"{name}_cast"))


def _insert_casts(
    graph: onnx.GraphProto,
    storage: dict[str, int],
    wanted: dict[tuple[int, int], int],
    half_nodes: set[int],
) -> None:
    """Route every float input whose stored type differs from the type it computes in
    through a Cast (one per value and target type), placed before its first consumer."""
    nodes: list[onnx.NodeProto] = []
    made: set[str] = set()
    for k, node in enumerate(graph.node):
        for i, name in enumerate(node.input):
            target = wanted.get((k, i))
            if target is None:  # not a float slot, or a node added by the renaming
                continue
            if storage[name] == target:
                continue
            cast = f"{name}_to_{_SUFFIX[target]}"
            if cast not in made:
                made.add(cast)
                nodes.append(helper.make_node("Cast", [name], [cast], to=target, name=cast))
            node.input[i] = cast
        if node.op_type == "Cast" and k in half_nodes:
            for attr in node.attribute:
                if attr.name == "to" and attr.i == _FLOAT:
                    attr.i = _HALF
        nodes.append(node)
    del graph.node[:]
    graph.node.extend(nodes)


def _convert_constants(
    graph: onnx.GraphProto, storage: dict[str, int], half_nodes: set[int]
) -> None:
    """Store float16 initializers, Constant values and ConstantOfShape fill values as such."""
    for init in graph.initializer:
        if init.data_type == _FLOAT and storage.get(init.name) == _HALF:
            init.CopyFrom(_halved(init, f"initializer {init.name!r}"))
    for k, node in enumerate(graph.node):
        if node.op_type == "Constant" and node.output and storage.get(node.output[0]) == _HALF:
            convert = True
        else:
            convert = node.op_type == "ConstantOfShape" and k in half_nodes
        for attr in node.attribute:
            if convert and attr.type == onnx.AttributeProto.TENSOR and attr.t.data_type == _FLOAT:
                attr.t.CopyFrom(_halved(attr.t, f"the value of node {node.name or node.op_type!r}"))


def _halved(tensor: onnx.TensorProto, what: str) -> onnx.TensorProto:
    values = numpy_helper.to_array(tensor)
    finite = values[np.isfinite(values)]
    if finite.size and float(np.abs(finite).max()) > _FP16_LIMIT:
        raise ExportError(
            f"to_onnx(dtype='float16'): {what} holds {float(np.abs(finite).max()):.6g}, beyond "
            f"float16's largest value {_FP16_LIMIT:g}; export this model as float32"
        )
    return numpy_helper.from_array(values.astype(np.float16), tensor.name)
