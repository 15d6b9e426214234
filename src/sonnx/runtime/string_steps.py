"""Which values of an imported graph are strings, and which steps read or make them.

torch has no string dtype: a string tensor holds a :class:`~sonnx.strings.StringArray` on the
host, which a compiled graph can neither take in nor give out (its inputs and outputs are torch
tensors, chosen by their layouts). Graph mode therefore runs the steps that read or make
strings eagerly, by design, as it runs random draws (see
:func:`sonnx.runtime.segments.eager_by_design`), and compiles the steps between them: a text
front end's LabelEncoder runs in Python, the OneHot and MatMul after it are compiled. Nothing
is tried and warned about first, since which values are strings is known before any run.

:func:`typed_strings` asks ONNX type inference, which types every value from the graph's
declarations and its nodes (a LabelEncoder's output from its ``values_*`` attribute). It runs
only on graphs where strings can arise at all; a graph of numbers pays one walk over its nodes.
Where inference cannot type a value (an operator of a domain onnx does not know),
:func:`string_steps` still follows strings from the string constants through the operators
that only move elements (Reshape, Gather, Concat: their outputs are made of their inputs'
strings).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING

import onnx
from onnx import helper

from sonnx.dtypes import STRING
from sonnx.onnx.registry import operator_class

if TYPE_CHECKING:
    from sonnx.runtime.program import GraphProgram

__all__ = ["string_steps", "typed_strings"]

_STRING = onnx.TensorProto.STRING


def typed_strings(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> frozenset[str]:
    """The names of ``graph``'s values that ONNX types as string tensors: declared (inputs,
    outputs, ``value_info``, initializers) or inferred by ONNX type inference.

    :param graph: a main graph (its subgraphs are typed with it; their own values are not
        listed).
    :param opsets: the opset version by domain (``""`` for the default one).
    :returns: the names; none when no value can be a string, only the declared ones when
        inference rejects the graph.
    """
    if not _has_string_origin(graph):
        return frozenset()
    try:
        typed = onnx.shape_inference.infer_shapes(_types_only(graph, opsets)).graph
    except (onnx.shape_inference.InferenceError, onnx.checker.ValidationError):
        typed = graph  # string_steps follows the strings through the steps themselves
    values = [*typed.input, *typed.output, *typed.value_info]
    names = {v.name for v in values if v.type.tensor_type.elem_type == _STRING}
    names.update(t.name for t in graph.initializer if t.data_type == _STRING)
    return frozenset(names)


def string_steps(program: GraphProgram) -> dict[int, str]:
    """The steps of ``program`` that read strings (what their subgraphs read included) or make
    them, with why graph mode runs each eagerly.

    :param program: an imported graph's program; its strings are its ``string_values`` (see
        :func:`typed_strings`) and its string constants, followed through the steps that only
        move elements.
    :returns: why, by step index.
    """
    strings = set(program.string_values)
    strings.update(n for n, t in program.constants.items() if t.dtype == STRING)
    found: dict[int, str] = {}
    for index, step in enumerate(program.steps):
        reads = any(n in strings for n in step.reads())
        if reads and operator_class(step.info).moves_elements_only:
            strings.update(o for o in step.outputs if o)
        if reads:
            found[index] = "it reads strings, which stay on the host"
        elif any(o in strings for o in step.outputs):
            found[index] = "it makes strings, which stay on the host"
    return found


def _has_string_origin(graph: onnx.GraphProto) -> bool:
    """Whether a string can arise in ``graph`` (subgraphs included): a value declared a string,
    or a node that makes strings from numbers or holds string constants (a Cast to STRING, an
    ``ai.onnx.ml`` node, a string-valued tensor attribute). Every other operator that outputs
    strings reads strings, so a graph without such an origin holds none."""
    values = [*graph.input, *graph.output, *graph.value_info]
    if any(v.type.tensor_type.elem_type == _STRING for v in values):
        return True
    if any(t.data_type == _STRING for t in graph.initializer):
        return True
    return any(_node_makes_strings(node) for node in graph.node)


def _node_makes_strings(node: onnx.NodeProto) -> bool:
    if node.domain == "ai.onnx.ml":
        return True
    for attr in node.attribute:
        if node.op_type == "Cast" and attr.name == "to" and attr.i == _STRING:
            return True
        if attr.name in ("value_string", "value_strings") and node.op_type == "Constant":
            return True
        if attr.HasField("t") and attr.t.data_type == _STRING:
            return True
        subgraphs = [attr.g] if attr.HasField("g") else list(attr.graphs)
        if any(_has_string_origin(g) for g in subgraphs):
            return True
    return False


def _types_only(graph: onnx.GraphProto, opsets: Mapping[str, int]) -> onnx.ModelProto:
    """``graph`` as a model for ONNX type inference, each initializer declared as an input of
    its type and dims instead of holding its values (inference serializes the model: the
    weights' bytes would be copied)."""
    typed = onnx.GraphProto(name=graph.name)
    typed.node.extend(graph.node)
    typed.input.extend(graph.input)
    typed.output.extend(graph.output)
    typed.value_info.extend(graph.value_info)
    declared = {v.name for v in graph.input}
    typed.input.extend(
        helper.make_tensor_value_info(t.name, t.data_type, t.dims)
        for t in graph.initializer
        if t.name not in declared
    )
    typed.input.extend(
        helper.make_tensor_value_info(s.values.name, s.values.data_type, s.dims)
        for s in graph.sparse_initializer
        if s.values.name not in declared
    )
    opset_ids = [helper.make_opsetid(domain, version) for domain, version in opsets.items()]
    return helper.make_model(typed, opset_imports=opset_ids)
