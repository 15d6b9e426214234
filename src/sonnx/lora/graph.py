"""Adapter nodes in an ONNX graph: attach them beside the selected products, find them, strip them.

An adapter on a node ``Y = X @ W`` (MatMul, Gemm, MatMulNBits, FusedMatMul) renames the node's
output and adds, under the node's own name prefix::

    X -> [Dropout] -> lora_A/MatMul (A: in x r) -> [lora/Mul scale] -> lora_B/MatMul (B: r x out)
      -> lora/Add (with the base output) -> Y

so every consumer of ``Y`` reads the adapted value and the base node is untouched (a 4-bit
MatMulNBits stays 4-bit). Three styles: ``train`` (dropout and the ``alpha / rank`` scale as
nodes, A and B trainable initializers), ``inputs`` (the scale folded into B, A and B graph inputs
whose initializers are their defaults: what onnxruntime's LoRA adapters override) and
``constants`` (scale folded, A and B plain initializers). What was attached is recorded as JSON
in the model's ``metadata_props`` under :data:`METADATA_KEY`, so a graph carries its adapters.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass

import numpy as np
import onnx
from onnx import helper, numpy_helper

from sonnx.errors import BadInputError
from sonnx.lora.targets import Target

METADATA_KEY = "sonnx.lora"
STYLES = ("train", "inputs", "constants")


@dataclass(frozen=True)
class Adapter(Target):
    """One attached adapter: its target's fields, its rank, scale and dropout, and the graph
    names it added."""

    rank: int
    scale: float
    dropout: float

    @property
    def prefix(self) -> str:
        """The node-name prefix of the adapter's nodes (the base node's module path)."""
        return self.node.rsplit("/", 1)[0] if "/" in self.node else self.node

    @property
    def a_name(self) -> str:
        return f"{self.module}.lora_A.MatMul.weight"

    @property
    def b_name(self) -> str:
        return f"{self.module}.lora_B.MatMul.weight"

    @property
    def base_output(self) -> str:
        return f"{self.y}/lora/base"

    @classmethod
    def of(cls, target: Target, rank: int, scale: float, dropout: float) -> Adapter:
        return cls(**asdict(target), rank=rank, scale=scale, dropout=dropout)


def adapters_of(model: onnx.ModelProto) -> list[Adapter]:
    """The adapters recorded in ``model`` (empty when none were attached)."""
    for prop in model.metadata_props:
        if prop.key == METADATA_KEY:
            return [Adapter(**a) for a in json.loads(prop.value)]
    return []


def _record(model: onnx.ModelProto, adapters: list[Adapter]) -> None:
    kept = [p for p in model.metadata_props if p.key != METADATA_KEY]
    del model.metadata_props[:]
    model.metadata_props.extend(kept)
    if adapters:
        entry = model.metadata_props.add()
        entry.key, entry.value = METADATA_KEY, json.dumps([asdict(a) for a in adapters])


def _adapter_nodes(a: Adapter, style: str, float_type: int) -> list[onnx.NodeProto]:
    p = a.prefix
    nodes: list[onnx.NodeProto] = []
    x = a.x
    if style == "train" and a.dropout > 0:
        ratio = f"{p}/lora/dropout_ratio"
        nodes.append(
            helper.make_node(
                "Constant",
                [],
                [ratio],
                name=ratio,
                value=helper.make_tensor(ratio, float_type, [], [a.dropout]),
            )
        )
        nodes.append(
            helper.make_node(
                "Dropout", [x, ratio], [f"{p}/lora/Dropout/output_0"], name=f"{p}/lora/Dropout"
            )
        )
        x = nodes[-1].output[0]
    nodes.append(
        helper.make_node(
            "MatMul", [x, a.a_name], [f"{p}/lora_A/MatMul/output_0"], name=f"{p}/lora_A/MatMul"
        )
    )
    if style == "train":
        # Scaling the rank-r product costs r, not out, multiplications per token.
        scale = f"{p}/lora/scale"
        nodes.append(
            helper.make_node(
                "Constant",
                [],
                [scale],
                name=scale,
                value=helper.make_tensor(scale, float_type, [], [a.scale]),
            )
        )
        nodes.append(
            helper.make_node(
                "Mul",
                [nodes[-2].output[0], scale],
                [f"{p}/lora/Mul/output_0"],
                name=f"{p}/lora/Mul",
            )
        )
    nodes.append(
        helper.make_node(
            "MatMul",
            [nodes[-1].output[0], a.b_name],
            [f"{p}/lora_B/MatMul/output_0"],
            name=f"{p}/lora_B/MatMul",
        )
    )
    nodes.append(
        helper.make_node("Add", [a.base_output, nodes[-1].output[0]], [a.y], name=f"{p}/lora/Add")
    )
    return nodes


def attach(
    model: onnx.ModelProto,
    adapters: list[Adapter],
    values: dict[str, tuple[np.ndarray, np.ndarray]],
    style: str,
) -> onnx.ModelProto:
    """A copy of ``model`` (which has no adapters) with ``adapters`` attached in ``style``.

    ``values`` maps each adapter's module to its (A [in, r], B [r, out]) as stored in the graph:
    unscaled for ``train``, B already multiplied by the scale for the other styles.
    """
    if style not in STYLES:
        raise BadInputError(f"attach: style must be one of {STYLES}, received {style!r}")
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    by_node = {a.node: a for a in adapters}
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        nodes.append(node)
        a = by_node.get(node.name)
        if a is None:
            continue
        node.output[0] = a.base_output
        a_value, b_value = values[a.module]
        float_type = helper.np_dtype_to_tensor_dtype(a_value.dtype)
        nodes.extend(_adapter_nodes(a, style, float_type))
        for name, value in ((a.a_name, a_value), (a.b_name, b_value)):
            graph.initializer.append(numpy_helper.from_array(value, name))
            if style == "inputs":
                # The rank is left free so adapters of any rank can be served on one base.
                rows, cols = value.shape
                dims = [rows, "lora_rank"] if name == a.a_name else ["lora_rank", cols]
                graph.input.append(helper.make_tensor_value_info(name, float_type, dims))
    missing = sorted(set(by_node) - {n.name for n in nodes})
    if missing:
        raise BadInputError(f"attach: the graph has no node(s) {missing}")
    del graph.node[:]
    graph.node.extend(nodes)
    _record(out, adapters)
    return out


def strip(model: onnx.ModelProto) -> onnx.ModelProto:
    """A copy of ``model`` without its recorded adapters: the base graph as it was."""
    adapters = adapters_of(model)
    out = onnx.ModelProto()
    out.CopyFrom(model)
    graph = out.graph
    prefixes = tuple(f"{a.prefix}/lora" for a in adapters)
    restored = {a.base_output: a.y for a in adapters}
    weights = {n for a in adapters for n in (a.a_name, a.b_name)}
    kept = [n for n in graph.node if not n.name.startswith(prefixes)]
    for node in kept:
        if node.output and node.output[0] in restored:
            node.output[0] = restored[node.output[0]]
    del graph.node[:]
    graph.node.extend(kept)
    for field in (graph.initializer, graph.input):
        others = [v for v in field if v.name not in weights]
        del field[:]
        field.extend(others)
    _record(out, [])
    return out
