"""Reading and validating an ONNX model before anything runs.

Everything here raises :class:`~sonnx.errors.BadModelError` (malformed model) or
:class:`~sonnx.errors.UnsupportedOperatorError` (all unsupported nodes at once), never a
protobuf or KeyError traceback.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import onnx
from google.protobuf.message import DecodeError

from sonnx.errors import BadModelError, UnsupportedOperatorError
from sonnx.onnx.registry import REGISTRY, Converter, _domain_key

ModelSource = onnx.ModelProto | str | os.PathLike | bytes


def load_model(source: ModelSource) -> onnx.ModelProto:
    """A ModelProto from a ModelProto, a file path or serialized bytes."""
    if isinstance(source, onnx.ModelProto):
        return source
    if isinstance(source, (bytes, bytearray)):
        return _parse(bytes(source), "the given bytes")
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        if not path.is_file():
            raise BadModelError(f"ONNX model file not found: {path}")
        model = _parse(path.read_bytes(), str(path))
        if any(t.data_location == onnx.TensorProto.EXTERNAL for t in model.graph.initializer):
            onnx.load_external_data_for_model(model, str(path.parent))
        return model
    raise BadModelError(
        f"expected an onnx.ModelProto, a path or bytes, received {type(source).__name__}"
    )


def _parse(data: bytes, where: str) -> onnx.ModelProto:
    model = onnx.ModelProto()
    try:
        model.ParseFromString(data)
    except (DecodeError, RuntimeError, ValueError) as e:
        raise BadModelError(
            f"{where} is not a valid ONNX model (protobuf decode failed: {e})"
        ) from None
    if not model.HasField("graph"):
        raise BadModelError(f"{where} is not an ONNX model: it has no graph")
    return model


def opset_versions(model: onnx.ModelProto) -> dict[str, int]:
    """Domain ('' for the default ONNX domain) → imported opset version."""
    versions = {_domain_key(o.domain): o.version for o in model.opset_import}
    if "" not in versions:
        if model.ir_version >= 3 or model.opset_import:
            versions.setdefault("", 1)
        else:
            versions[""] = 1
    return versions


@dataclass(frozen=True)
class ResolvedNode:
    """One graph node with the converter that will run it."""

    node: onnx.NodeProto
    index: int
    since_version: int
    opset: int
    convert: Converter


def resolve_nodes(graph: onnx.GraphProto, versions: dict[str, int]) -> list[ResolvedNode]:
    """Find a converter for every node, or report every node that has none in one error."""
    resolved: list[ResolvedNode] = []
    missing: list[str] = []
    for i, node in enumerate(graph.node):
        domain = _domain_key(node.domain)
        if domain not in versions:
            missing.append(
                f"{node.op_type} (node {node.name or i!r}, domain {node.domain!r} not imported "
                "by the model's opset_import)"
            )
            continue
        opset = versions[domain]
        found = REGISTRY.lookup(domain, node.op_type, opset)
        if found is None:
            known = REGISTRY.versions(node.op_type, domain)
            why = f"registered since-versions {known}" if known else "no converter"
            missing.append(
                f"{node.op_type} (node {node.name or i!r}, domain {node.domain or 'ai.onnx'!r}, "
                f"opset {opset}: {why})"
            )
            continue
        resolved.append(ResolvedNode(node, i, found[0], opset, found[1]))
    if missing:
        raise UnsupportedOperatorError(
            f"{len(missing)} node(s) of this model are not supported by sonnx:\n  "
            + "\n  ".join(missing)
        )
    return resolved


def check_graph_order(graph: onnx.GraphProto, known: set[str]) -> list[int]:
    """Node indices in an order where every input is defined first.

    ONNX requires nodes to be topologically sorted; an unsorted graph is sorted here, while an
    undefined input name or a cycle is reported with the node involved.
    """
    producers: dict[str, int] = {}
    for i, node in enumerate(graph.node):
        for out in node.output:
            if out:
                producers[out] = i
    order: list[int] = []
    state = [0] * len(graph.node)  # 0 unvisited, 1 on the stack, 2 done
    for start in range(len(graph.node)):
        if state[start]:
            continue
        stack = [(start, iter(needed_inputs(graph.node[start])))]
        state[start] = 1
        while stack:
            i, pending = stack[-1]
            name = next(pending, None)
            if name is None:
                stack.pop()
                state[i] = 2
                order.append(i)
                continue
            if name in known:
                continue
            if name not in producers:
                node = graph.node[i]
                raise BadModelError(
                    f"node {node.name or i!r} ({node.op_type}) reads tensor {name!r}, which no "
                    "graph input, initializer or earlier node defines"
                )
            j = producers[name]
            if state[j] == 1:
                raise BadModelError(
                    f"the graph has a cycle: node {graph.node[j].name or j!r} "
                    f"({graph.node[j].op_type}) depends on its own output {name!r}"
                )
            if state[j] == 0:
                state[j] = 1
                stack.append((j, iter(needed_inputs(graph.node[j]))))
    return order


def needed_inputs(node: onnx.NodeProto) -> list[str]:
    """Input names of a node, including the outer-scope names its subgraphs read."""
    names = [n for n in node.input if n]
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for sub in graphs:
            names.extend(_outer_names(sub))
    return names


def _outer_names(graph: onnx.GraphProto) -> list[str]:
    local = {i.name for i in graph.input} | {t.name for t in graph.initializer}
    local |= {o for n in graph.node for o in n.output}
    outer = []
    for node in graph.node:
        outer.extend(n for n in needed_inputs(node) if n not in local)
    return outer
