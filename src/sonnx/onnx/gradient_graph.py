"""The forward graph of each ``Gradient`` node, cut out of its graph at prepare time.

A ``Gradient`` node (domain ``ai.onnx.preview.training``) names the differentiated
computation only through its attributes: ``y`` is computed from ``xs`` and ``zs`` by other
nodes of the graph, and nothing in the node's inputs gives ``y``'s value. So that the operator
(:class:`~sonnx.operators.training.gradient.Gradient`) can recompute ``y`` with gradients
recorded, each Gradient node gets a copy carrying a graph attribute ``FORWARD_GRAPH``: the
nodes between ``xs + zs`` (its inputs) and ``y`` (its output). Tensors that subgraph reads from
elsewhere (initializers, other graph inputs) come from the enclosing scope like any
subgraph's.
"""

from __future__ import annotations

import dataclasses

import onnx
from onnx import helper

from sonnx.errors import BadModelError, UnsupportedOperatorError
from sonnx.onnx.model_loading import ResolvedNode, needed_inputs, node_producers
from sonnx.operators.training.gradient import FORWARD_GRAPH
from sonnx.operators.training.updates import TRAINING_DOMAIN
from sonnx.proto.attributes import decode_attribute


def with_forward_graphs(
    graph: onnx.GraphProto, resolved: list[ResolvedNode], known: set[str]
) -> list[ResolvedNode]:
    """``resolved`` with every Gradient node replaced by a copy that has its forward graph.

    ``known`` holds the names defined outside ``graph``'s nodes (inputs, initializers and, in a
    subgraph, outer-scope names); the graph itself is left untouched.
    """
    if not any(_is_gradient(r.node) for r in resolved):
        return resolved
    producers = node_producers(graph.node)
    defined = known | set(producers)
    return [
        dataclasses.replace(r, node=_with_forward_graph(graph, r, producers, defined))
        if _is_gradient(r.node)
        else r
        for r in resolved
    ]


def _is_gradient(node: onnx.NodeProto) -> bool:
    return node.op_type == "Gradient" and node.domain == TRAINING_DOMAIN


def _with_forward_graph(
    graph: onnx.GraphProto, r: ResolvedNode, producers: dict[str, int], defined: set[str]
) -> onnx.NodeProto:
    node = r.node
    where = f"Gradient node {node.name or r.index!r}"
    attrs = {a.name: decode_attribute(a) for a in node.attribute}
    xs: list[str] = attrs.get("xs", [])
    zs: list[str] = attrs.get("zs", [])
    y: str = attrs.get("y", "")
    if not xs or not y:
        raise BadModelError(f"{where}: attributes xs and y are required, received {attrs}")
    if len(node.input) != len(xs) + len(zs):
        raise BadModelError(
            f"{where}: expected one input per name in xs and zs ({len(xs)} + {len(zs)}), "
            f"received {len(node.input)}"
        )
    if len(node.output) > len(xs):
        raise BadModelError(
            f"{where}: at most one output per name in xs ({len(xs)}), received {len(node.output)}"
        )
    cut = xs + zs
    if len(set(cut)) != len(cut):
        raise BadModelError(f"{where}: xs {xs} and zs {zs} must name distinct tensors")
    for attr, names in (("xs", xs), ("zs", zs)):
        for name in names:
            if name not in defined:
                raise BadModelError(
                    f"{where}: {attr} names tensor {name!r}, which no graph input, initializer "
                    "or node defines"
                )
    if y not in producers and y not in xs:
        raise BadModelError(
            f"{where}: y names tensor {y!r}, which no node of the graph computes from xs {xs}"
        )
    forward = helper.make_graph(
        [graph.node[i] for i in _ancestors(graph, y, set(cut), producers, where)],
        f"{node.name or r.index}.forward",
        [onnx.ValueInfoProto(name=n) for n in cut],
        [onnx.ValueInfoProto(name=y)],
    )
    copy = onnx.NodeProto()
    copy.CopyFrom(node)
    copy.attribute.append(helper.make_attribute(FORWARD_GRAPH, forward))
    return copy


def _ancestors(
    graph: onnx.GraphProto, y: str, cut: set[str], producers: dict[str, int], where: str
) -> list[int]:
    """Indices of the nodes ``y`` depends on, stopping at ``cut`` and at names no node
    produces (those are read from the enclosing scope)."""
    found: set[int] = set()
    pending = [y]
    while pending:
        name = pending.pop()
        i = producers.get(name) if name not in cut else None
        if i is None or i in found:
            continue
        _check_recomputable(graph.node[i], y, where)
        found.add(i)
        pending.extend(needed_inputs(graph.node[i]))
    return sorted(found)


def _check_recomputable(node: onnx.NodeProto, y: str, where: str) -> None:
    """Reject nodes that cannot be re-run with gradients recorded and give the same ``y``.

    The recomputation runs with ``sonnx.autograd.training`` on (the only way operators record
    gradients), where a Dropout without a ``training_mode`` input draws a mask and an
    inference-form BatchNormalization uses batch statistics and updates its running ones.
    """
    what = f"{node.op_type} node {node.name or node.output[0]!r}"
    if _is_gradient(node):
        raise UnsupportedOperatorError(
            f"{where}: y {y!r} depends on {what}: gradients of gradients are not supported"
        )
    if node.domain in ("", "ai.onnx") and (
        (node.op_type == "Dropout" and (len(node.input) < 3 or not node.input[2]))
        or (node.op_type == "BatchNormalization" and len(node.output) == 1)
    ):
        raise UnsupportedOperatorError(
            f"{where}: y {y!r} depends on {what}, whose result follows "
            "sonnx.autograd.training, so recomputing it with gradients would change it"
        )
    for attr in node.attribute:
        for sub in [attr.g] if attr.type == onnx.AttributeProto.GRAPH else attr.graphs:
            for inner in sub.node:
                _check_recomputable(inner, y, where)
