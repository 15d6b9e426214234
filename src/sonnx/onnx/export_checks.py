"""The checks ``to_onnx`` holds a graph to while and after writing it: every output computed
from the inputs, every node an operator of the target opset that takes the inputs' types, and
the whole model accepted by the ONNX checker (which does not know a few operators sonnx writes
in the default domain, and cannot read a model past protobuf's 2 GiB).
"""

from __future__ import annotations

from collections.abc import Sequence

import onnx
import onnx.defs
from onnx import helper

from sonnx import dtypes
from sonnx.engine.operator import Operator
from sonnx.errors import ExportError, OpsetTooOldError
from sonnx.onnx.registry import REGISTRY
from sonnx.proto.graph_builder import GraphBuilder, first_opset
from sonnx.tensor import Tensor

#: Below 2 GiB protobuf can hold the whole model; above it, weights go to external data.
PROTOBUF_LIMIT = 2**31 - 1


def check_with_onnx(model: onnx.ModelProto) -> None:
    """Hold ``model`` to the ONNX checker (without its weights past :data:`PROTOBUF_LIMIT`).

    :param model: the written model.
    :raises ExportError: the checker rejects it (its message says why).
    """
    try:
        light = model if model.ByteSize() < PROTOBUF_LIMIT else _stub(model)
        onnx.checker.check_model(_checkable(light))
    except onnx.checker.ValidationError as e:
        raise ExportError(f"to_onnx produced a model the ONNX checker rejects: {e}") from e


def check_connected(outputs: Sequence[Tensor], inputs: Sequence[Tensor]) -> None:
    """Each output computed by an operator must depend on at least one graph input.

    :raises ExportError: an output (named, with its shape) that is not connected to them.
    """
    wanted = {id(t) for t in inputs}
    for i, out in enumerate(outputs):
        if out.creator is None:
            if id(out) not in wanted:
                raise ExportError(
                    f"to_onnx: outputs[{i}] ({out.name or 'unnamed'}, shape {out.shape}) is not "
                    "connected to the inputs: it is a leaf tensor, not computed from them"
                )
            continue
        if not inputs:
            continue
        stack, seen, hit = [out], set(), False
        while stack and not hit:
            t = stack.pop()
            if id(t) in seen:
                continue
            seen.add(id(t))
            hit = id(t) in wanted
            if t.creator is not None:
                stack.extend(x for x in t.creator.inputs if x is not None)
        if not hit:
            raise ExportError(
                f"to_onnx: outputs[{i}] ({out.name or out.creator.op_type}, shape {out.shape}) is "
                "not connected to any of the given inputs"
            )


#: Where :func:`_checkable` puts the default-domain operators that onnx does not know.
_UNCHECKED_DOMAIN = "sonnx.unchecked"


def outside_onnx(op_type: str) -> bool:
    """An operator sonnx runs in the default domain that onnx has no schema for (onnxruntime's
    SimplifiedLayerNormalization): written as it came, not held to a schema."""
    return not onnx.defs.has(op_type) and bool(REGISTRY.versions(op_type))


def check_nodes_exist(g: GraphBuilder, first: int, op: Operator) -> None:
    """The nodes ``op`` wrote into ``g`` (from node ``first`` on) exist at ``g``'s opset.

    :raises OpsetTooOldError: a node, or its string inputs, needs a newer opset (named).
    :raises ExportError: a node is deprecated at that opset, or reads strings that no opset
        lets it take.
    """
    for node in g.nodes[first:]:
        if node.domain not in ("", "ai.onnx"):
            continue
        if outside_onnx(node.op_type):
            continue
        try:
            schema = onnx.defs.get_schema(node.op_type, g.opset, "")
        except onnx.defs.SchemaError:
            raise OpsetTooOldError(
                f"to_onnx: {op.op_type} exports as ONNX {node.op_type}, which does not exist at "
                f"opset {g.opset}; choose a newer opset",
                first_opset(node.op_type),
            ) from None
        if schema.deprecated:
            raise ExportError(
                f"to_onnx: {op.op_type} exports as ONNX {node.op_type}, deprecated at opset "
                f"{g.opset}"
            )
        if node.op_type == op.op_type and not _takes_strings(schema, op.inputs):
            needed = _first_opset_taking_strings(op.op_type, g.opset, op.inputs)
            if needed is None:
                raise ExportError(
                    f"to_onnx: {op.op_type} reads strings, which its ONNX schema allows at no "
                    f"opset up to {onnx.defs.onnx_opset_version()}"
                )
            raise OpsetTooOldError(
                f"to_onnx: {op.op_type} reads strings, which its ONNX schema allows only from "
                "a newer opset",
                needed,
            )


def _takes_strings(schema: onnx.defs.OpSchema, inputs: Sequence[Tensor | None]) -> bool:
    """False when a string input sits where ``schema``'s type constraints allow no strings
    (Equal takes strings from opset 19 only)."""
    strings = [i for i, t in enumerate(inputs) if t is not None and t.dtype is dtypes.STRING]
    formal = schema.inputs
    if not strings or not formal:  # the common case: nothing to look up
        return True
    allowed = {c.type_param_str: set(c.allowed_type_strs) for c in schema.type_constraints}
    for i in strings:
        type_str = formal[min(i, len(formal) - 1)].type_str
        if "tensor(string)" not in allowed.get(type_str, {type_str}):
            return False
    return True


def _first_opset_taking_strings(
    op_type: str, opset: int, inputs: Sequence[Tensor | None]
) -> int | None:
    """The first opset after ``opset`` whose schema of ``op_type`` takes these string inputs
    (None: none up to the newest onnx knows)."""
    for version in range(opset + 1, onnx.defs.onnx_opset_version() + 1):
        if _takes_strings(onnx.defs.get_schema(op_type, version, ""), inputs):
            return version
    return None


def _checkable(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model as the ONNX checker can read it: the operators :func:`outside_onnx` moved to
    a domain of their own that the checker does not hold to schemas."""
    unknown = [
        i
        for i, node in enumerate(model.graph.node)
        if node.domain in ("", "ai.onnx") and outside_onnx(node.op_type)
    ]
    if not unknown:
        return model
    checked = onnx.ModelProto()
    checked.CopyFrom(model)
    for i in unknown:
        checked.graph.node[i].domain = _UNCHECKED_DOMAIN
    checked.opset_import.append(helper.make_opsetid(_UNCHECKED_DOMAIN, 1))
    return checked


def _stub(model: onnx.ModelProto) -> onnx.ModelProto:
    """The model without initializer data, for checking a model too large for protobuf.

    The checker holds a tensor's data to its dims (a tensor of elements with no data is
    rejected), so each emptied initializer gets the one shape that needs none, ``[0]``; it keeps
    its name and element type, which is what the checker reads of it without shape inference.
    """
    light = onnx.ModelProto()
    light.CopyFrom(model)
    for init in light.graph.initializer:
        if init.HasField("raw_data"):
            init.ClearField("raw_data")
            init.ClearField("dims")
            init.dims.append(0)
    return light
