"""Which nodes of an imported graph take a LoRA adapter, and what each adapter is called.

A target is an op type (``"MatMulNBits"``: every such node with a constant weight) or a regular
expression searched in node names (``"q_proj"``, ``r"layers\\.[01]/.*proj"``). A selected node
must multiply an activation by a constant weight; its adapter is named by the module path its
name spells (``/model/layers.0/attn/q_proj/MatMul`` -> ``model.layers.0.attn.q_proj``), which
is also how the PEFT tensor names are formed (see :func:`peft_module`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import onnx

from sonnx.errors import BadInputError

#: The products an adapter can sit beside.
ADAPTABLE_OPS = ("MatMul", "Gemm", "MatMulNBits", "FusedMatMul")


class LoraTargetError(BadInputError):
    """A ``targets`` selection matched no node, or selected a node that cannot take an adapter."""


@dataclass(frozen=True)
class Target:
    """One selected node: its input and output, and the weight's in/out features."""

    node: str
    op_type: str
    module: str
    x: str
    y: str
    in_features: int
    out_features: int


def _module_name(node: onnx.NodeProto) -> str:
    """The module path a builder's node name spells, without the op's own last part."""
    parts = [p for p in node.name.split("/") if p]
    if len(parts) > 1:
        parts = parts[:-1]
    if not parts:
        parts = [re.sub(r"[^0-9A-Za-z_.]+", "_", node.output[0]).strip("_")]
    return ".".join(parts)


def peft_module(module: str) -> str:
    """PEFT's name for ``module``: ``base_model.model.`` plus the transformers path, whose
    attention block is ``self_attn`` where onnxruntime-genai's builder writes ``attn``."""
    return "base_model.model." + re.sub(r"(^|\.)attn\.", r"\1self_attn.", module)


def _int_attr(node: onnx.NodeProto, name: str, default: int = 0) -> int:
    for a in node.attribute:
        if a.name == name:
            return int(a.i)
    return default


def _weight_shape(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> tuple[int, int]:
    """(in_features, out_features) of a node's constant weight, or a typed error."""
    if node.op_type == "MatMulNBits":
        return _int_attr(node, "K"), _int_attr(node, "N")
    where = f"{node.op_type} node {node.name!r}"
    if _int_attr(node, "transA"):
        raise LoraTargetError(f"{where}: an adapter needs transA=0, received transA=1")
    shape = shapes.get(node.input[1]) if len(node.input) > 1 else None
    if shape is None or len(shape) != 2:
        raise LoraTargetError(
            f"{where}: an adapter needs a constant 2-D weight as input 1, received "
            f"{'a computed value' if shape is None else f'shape {shape}'}"
        )
    k, n = shape
    return (n, k) if _int_attr(node, "transB") else (k, n)


def _target(node: onnx.NodeProto, shapes: dict[str, tuple[int, ...]]) -> Target:
    k, n = _weight_shape(node, shapes)
    return Target(node.name, node.op_type, _module_name(node), node.input[0], node.output[0], k, n)


def candidates(graph: onnx.GraphProto) -> list[Target]:
    """Every node that can take an adapter (a product of an activation and a constant weight)."""
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    found = []
    for node in graph.node:
        if node.op_type not in ADAPTABLE_OPS or not node.name:
            continue
        try:
            found.append(_target(node, shapes))
        except LoraTargetError:
            continue
    return found


def _matches(node: onnx.NodeProto, target: str) -> bool:
    if target in ADAPTABLE_OPS:
        return node.op_type == target
    try:
        return re.search(target, node.name) is not None
    except re.error as e:
        raise LoraTargetError(f"targets: {target!r} is not a valid regular expression: {e}") from e


def select(graph: onnx.GraphProto, targets: str | Sequence[str]) -> list[Target]:
    """The nodes ``targets`` select, in graph order; every target must select one or more."""
    wanted = [targets] if isinstance(targets, str) else list(targets)
    if not wanted or not all(isinstance(t, str) and t for t in wanted):
        raise LoraTargetError(
            f"targets must be op types from {list(ADAPTABLE_OPS)} or name patterns (non-empty "
            f"strings), received {targets!r}"
        )
    shapes = {i.name: tuple(i.dims) for i in graph.initializer}
    products = [n for n in graph.node if n.op_type in ADAPTABLE_OPS]
    chosen: list[Target] = []
    for target in wanted:
        hits = [n for n in products if _matches(n, target)]
        computed = []
        if target in ADAPTABLE_OPS:
            # An op type means the weight products among them, not activation products.
            computed = [
                n.name for n in hits if n.op_type != "MatMulNBits" and n.input[1] not in shapes
            ]
            hits = [n for n in hits if n.op_type == "MatMulNBits" or n.input[1] in shapes]
        if not hits and computed:
            raise LoraTargetError(
                f"targets: {target!r} selects no node with a weight initializer: the "
                f"{target} nodes {computed[:6]} take a computed weight (a DequantizeLinear's "
                "output, in a QDQ or QAT model: an adapter needs the float weight itself)"
            )
        if not hits:
            raise LoraTargetError(
                f"targets: {target!r} matches no {'/'.join(ADAPTABLE_OPS)} node; such nodes "
                f"are e.g. {[n.name for n in products[:6]]}"
            )
        for node in hits:
            if any(t.node == node.name for t in chosen):
                continue
            chosen.append(_target(node, shapes))
    _check_unique(chosen)
    return chosen


def _check_unique(chosen: Iterable[Target]) -> None:
    seen: dict[str, str] = {}
    for t in chosen:
        if not t.node:
            raise LoraTargetError(
                f"targets: a {t.op_type} node producing {t.y!r} has no name; adapters are "
                "named after their node"
            )
        if t.module in seen:
            raise LoraTargetError(
                f"targets: nodes {seen[t.module]!r} and {t.node!r} would share the adapter name "
                f"{t.module!r}"
            )
        seen[t.module] = t.node
