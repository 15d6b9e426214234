"""Fuzz cases: seed models broken at the byte level and in their structure.

:func:`make_case` turns ``(seed, index)`` into one deterministic case (``random.Random`` seeded
with a string is the same in every process and Python run), so a case found by the long run
is reproduced by its id alone. Structural mutations edit the ``ModelProto`` of a seed (inputs,
outputs, attributes, op types, initializers, Constant values, node order, opsets, graph
inputs, cycles), possibly inside an If/Loop subgraph, 1 to 3 at a time; byte mutations flip,
insert, cut or replace the serialized bytes, or make a name no longer UTF-8 (the file still
parses: protobuf hands such a name over as bytes); input mutations feed wrong shapes, dtypes or
values; external-data cases write the model to a directory and point its weights at files,
among them escape attempts that must stay refused.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

from tests.fuzz.external import external_case
from tests.fuzz.seeds import Seed, seeds

#: Op types a node may be turned into: common ones and ones no registry knows.
OP_TYPES = [
    "Add", "Relu", "Reshape", "Conv", "MatMul", "Gemm", "Concat", "Gather", "Slice", "Expand",
    "Tile", "Pad", "Resize", "ConstantOfShape", "Range", "Loop", "If", "Scan", "Split",
    "Transpose", "Softmax", "LayerNormalization", "TopK", "NonZero", "Where", "Cast",
    "ReduceSum", "Einsum", "OneHot", "Squeeze", "Unsqueeze", "Flatten", "Identity",
    "SequenceConstruct", "NoSuchOp", "", "relu", "Conv ",
]  # fmt: skip
#: Values integer data is replaced with: edges, negatives and sizes no memory holds.
INTS = [0, 1, -1, 2, 3, -2, 7, 2**31 - 1, -(2**31), 2**40, 2**62, 10**12]
ELEM_TYPES = [0, 1, 2, 3, 6, 7, 8, 9, 10, 11, 16, 17, 21, 99]


@dataclass
class Case:
    """One fuzz case: a model (bytes, or a directory written from ``files``) and its feeds.

    ``must_fail`` marks cases a successful run would make a bug (external data escaping the
    model's directory).
    """

    case_id: str
    description: str
    model: bytes
    feeds: dict[str, np.ndarray]
    files: dict[str, bytes] = field(default_factory=dict)
    must_fail: bool = False


def make_case(seed: int, index: int) -> Case:
    """The ``index``-th case of run ``seed``."""
    rng = random.Random(f"sonnx-fuzz:{seed}:{index}")
    base = rng.choice(seeds())
    case_id = f"{seed}:{index}"
    roll = rng.random()
    feeds = {k: v.copy() for k, v in base.feeds.items()}
    if roll < 0.1:
        data, what = mutate_bytes(rng, base.model)
        return Case(case_id, f"{base.name}: bytes: {what}", data, feeds)
    if roll < 0.2:
        what = mutate_feeds(rng, feeds)
        return Case(case_id, f"{base.name}: feeds: {what}", base.model, feeds)
    if roll < 0.27:
        return external_case(rng, case_id, _seed("cnn"))
    model = onnx.load_from_string(base.model)
    done = []
    for _ in range(rng.choice([1, 1, 1, 2, 3])):
        mutate = rng.choice(STRUCTURAL)
        done.append(mutate(rng, model))
    return Case(case_id, f"{base.name}: " + "; ".join(done), model.SerializeToString(), feeds)


def _seed(name: str) -> Seed:
    return next(s for s in seeds() if s.name == name)


# ---- bytes and feeds ------------------------------------------------------------------------


def mutate_bytes(rng: random.Random, data: bytes) -> tuple[bytes, str]:
    b = bytearray(data)
    kind = rng.choice(["flip", "flip", "name", "name", "truncate", "insert", "garbage", "empty"])
    if kind == "name":
        return _undecodable_name(rng, b)
    if kind == "flip":
        n = rng.randint(1, 8)
        for _ in range(n):
            b[rng.randrange(len(b))] = rng.randrange(256)
        return bytes(b), f"{n} random byte(s)"
    if kind == "truncate":
        cut = rng.randrange(len(b))
        return bytes(b[:cut]), f"truncated at {cut} of {len(b)}"
    if kind == "insert":
        at = rng.randrange(len(b))
        junk = bytes(rng.randrange(256) for _ in range(rng.randint(1, 16)))
        return bytes(b[:at] + junk + b[at:]), f"{len(junk)} bytes inserted at {at}"
    if kind == "garbage":
        return bytes(rng.randrange(256) for _ in range(rng.randint(1, 512))), "random bytes"
    return b"", "empty"


#: Bytes that are never UTF-8 next to ASCII: continuation bytes without a lead, lead bytes
#: without a continuation, and bytes UTF-8 never uses.
NOT_UTF8 = [0x80, 0xBF, 0xC3, 0xE2, 0xF0, 0xFE, 0xFF]


def _undecodable_name(rng: random.Random, data: bytearray) -> tuple[bytes, str]:
    """One byte of a name (node, op type, domain, attribute, node input or output, graph
    input or output, initializer; in subgraphs too) replaced by one that is not UTF-8, found
    in the serialized model by its field tag and length so nothing else changes."""
    model = onnx.load_from_string(bytes(data))
    fields = _name_fields(model)
    what, tag, name = rng.choice(fields)
    encoded = name.encode()
    needle = bytes([tag]) + _varint(len(encoded)) + encoded
    starts, i = [], data.find(needle)
    while i >= 0:
        starts.append(i)
        i = data.find(needle, i + 1)
    at = rng.choice(starts) + len(needle) - len(encoded) + rng.randrange(len(encoded))
    data[at] = rng.choice(NOT_UTF8)
    return bytes(data), f"{what} {name!r}: byte {at} made {data[at]:#x}"


def _name_fields(model: onnx.ModelProto) -> list[tuple[str, int, str]]:
    """(what, protobuf field tag, text) of every non-empty name the importer reads."""
    fields = []
    for graph in _graphs(model.graph):
        for v in [*graph.input, *graph.output]:
            fields.append(("value", 0x0A, v.name))  # ValueInfoProto.name = 1
        fields += [("initializer", 0x42, t.name) for t in graph.initializer]  # name = 8
        for n in graph.node:
            fields += [("node input", 0x0A, i) for i in n.input]  # NodeProto.input = 1
            fields += [("node output", 0x12, o) for o in n.output]  # output = 2
            fields += [("node name", 0x1A, n.name), ("op type", 0x22, n.op_type)]  # 3, 4
            fields.append(("domain", 0x3A, n.domain))  # domain = 7
            fields += [("attribute", 0x0A, a.name) for a in n.attribute]  # AttributeProto 1
    return [f for f in fields if f[2]]


def _varint(n: int) -> bytes:
    out = bytearray()
    while n >= 0x80:
        out.append(n & 0x7F | 0x80)
        n >>= 7
    return bytes([*out, n])


def mutate_feeds(rng: random.Random, feeds: dict[str, np.ndarray]) -> str:
    name = rng.choice(sorted(feeds))
    x = feeds[name]
    kind = rng.choice(["shape", "rank", "dtype", "values", "empty", "scalar"])
    if kind == "shape":
        shape = tuple(max(1, d + rng.choice([-1, 1, 3])) for d in x.shape)
        feeds[name] = np.resize(x, shape)
    elif kind == "rank":
        feeds[name] = x.reshape(-1) if rng.random() < 0.5 else x[None]
    elif kind == "dtype":
        feeds[name] = x.astype(rng.choice([np.float64, np.int32, np.int64, np.bool_, np.float16]))
    elif kind == "values":
        if x.dtype.kind == "f":
            fill = rng.choice([np.nan, np.inf, -np.inf, -1.0, 1e30, 0.0])
        else:
            fill = rng.choice([-1, 10**6, 0, 2**31 - 1, -(2**31)])
        feeds[name] = np.full_like(x, fill)
    elif kind == "empty":
        feeds[name] = np.zeros((0, *x.shape[1:]), x.dtype)
    else:
        feeds[name] = np.asarray(x.reshape(-1)[0])
    return f"{name} {kind} -> {feeds[name].dtype}{list(feeds[name].shape)}"


# ---- structure --------------------------------------------------------------------------------


def _graphs(graph: onnx.GraphProto) -> list[onnx.GraphProto]:
    """The graph and every subgraph in it, depth first."""
    found = [graph]
    for node in graph.node:
        for a in node.attribute:
            if a.type == onnx.AttributeProto.GRAPH:
                found.extend(_graphs(a.g))
            for g in a.graphs:
                found.extend(_graphs(g))
    return found


def _graph(rng: random.Random, model: onnx.ModelProto) -> onnx.GraphProto:
    graphs = _graphs(model.graph)
    return rng.choice(graphs) if rng.random() < 0.3 else graphs[0]


def _names(graph: onnx.GraphProto) -> list[str]:
    """Tensor names the graph defines (one made-up name if it defines none)."""
    names = [i.name for i in graph.input] + [t.name for t in graph.initializer]
    return names + [o for n in graph.node for o in n.output] or ["made_up"]


def _node(rng: random.Random, graph: onnx.GraphProto) -> onnx.NodeProto | None:
    return rng.choice(graph.node) if len(graph.node) else None


def node_inputs(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _graph(rng, model)
    node = _node(rng, graph)
    if node is None:
        return "inputs: no node"
    kind = rng.choice(["drop", "add", "unknown", "other", "empty"])
    names = _names(graph)
    if kind == "drop" and len(node.input):
        del node.input[rng.randrange(len(node.input))]
    elif kind == "add":
        node.input.append(rng.choice([*names, ""]))
    elif len(node.input):
        i = rng.randrange(len(node.input))
        node.input[i] = {"unknown": "no_such_tensor", "other": rng.choice(names), "empty": ""}.get(
            kind, node.input[i]
        )
    return f"inputs of {node.name or node.op_type}: {kind}"


def node_outputs(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _graph(rng, model)
    node = _node(rng, graph)
    if node is None:
        return "outputs: no node"
    kind = rng.choice(["drop", "add", "rename", "duplicate", "empty"])
    if kind == "drop" and len(node.output):
        del node.output[rng.randrange(len(node.output))]
    elif kind == "add":
        node.output.append(f"extra_{rng.randrange(100)}")
    elif len(node.output):
        i = rng.randrange(len(node.output))
        node.output[i] = {
            "rename": f"renamed_{rng.randrange(100)}",
            "duplicate": rng.choice(_names(graph)),
            "empty": "",
        }[kind]
    return f"outputs of {node.name or node.op_type}: {kind}"


def attributes(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _graph(rng, model)
    node = _node(rng, graph)
    if node is None:
        return "attributes: no node"
    kind = rng.choice(["delete", "int", "ints", "float", "type", "unknown", "string", "tensor"])
    attrs = [a for a in node.attribute if a.type != onnx.AttributeProto.GRAPH] or list(
        node.attribute
    )
    if kind == "unknown" or not attrs:
        node.attribute.append(helper.make_attribute(rng.choice(["foo", "axis", "mode"]), 3))
        return f"attribute added to {node.name or node.op_type}"
    a = rng.choice(attrs)
    if kind == "delete":
        node.attribute.remove(a)
    elif kind == "int":
        a.Clear()
        a.CopyFrom(helper.make_attribute(a.name or "axis", rng.choice(INTS)))
    elif kind == "ints":
        values = [rng.choice(INTS) for _ in range(rng.randint(0, 6))]
        name = a.name
        a.CopyFrom(helper.make_attribute(name, values or [0]))
    elif kind == "float":
        name = a.name
        a.CopyFrom(helper.make_attribute(name, rng.choice([0.0, -1.5, 1e30, float("nan")])))
    elif kind == "type":
        a.type = rng.choice([1, 2, 3, 4, 5, 6, 7, 8, 11, 14])
    elif kind == "string":
        name = a.name
        a.CopyFrom(helper.make_attribute(name, rng.choice(["", "NOTSET", "\xff", "reflect"])))
    else:
        a.CopyFrom(helper.make_attribute(a.name, _random_tensor(rng, "value")))
    return f"attribute {a.name} of {node.name or node.op_type}: {kind}"


def op_type(rng: random.Random, model: onnx.ModelProto) -> str:
    node = _node(rng, _graph(rng, model))
    if node is None:
        return "op type: no node"
    before, node.op_type = node.op_type, rng.choice(OP_TYPES)
    return f"op type {before} -> {node.op_type!r}"


def _random_tensor(rng: random.Random, name: str) -> TensorProto:
    kind = rng.choice(["ints", "floats", "huge_dims", "bad_raw", "bad_type"])
    if kind == "ints":
        values = np.array([rng.choice(INTS) for _ in range(rng.randint(0, 5))], np.int64)
        return numpy_helper.from_array(values, name)
    if kind == "floats":
        return numpy_helper.from_array(np.full(rng.randint(0, 5), 0.5, np.float32), name)
    if kind == "huge_dims":
        return TensorProto(name=name, data_type=1, dims=[10**6, 10**6, 10**3])
    if kind == "bad_raw":
        return TensorProto(name=name, data_type=1, dims=[3, 3], raw_data=b"\x00" * 7)
    return TensorProto(name=name, data_type=rng.choice(ELEM_TYPES), dims=[2], raw_data=b"\1" * 8)


def initializers(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = model.graph
    if not len(graph.initializer):
        return "initializers: none"
    t = rng.choice(graph.initializer)
    kind = rng.choice(["dims", "huge", "negative", "truncate", "type", "drop", "values", "replace"])
    if kind == "dims":
        t.dims[:] = [rng.randint(0, 5) for _ in range(rng.randint(0, 4))]
    elif kind == "huge":
        t.dims[:] = [10**6, 10**6, *t.dims]
    elif kind == "negative":
        t.dims[:] = [-1, *t.dims[1:]]
    elif kind == "truncate":
        _truncate_data(t)
    elif kind == "type":
        t.data_type = rng.choice(ELEM_TYPES)
    elif kind == "drop":
        graph.initializer.remove(t)
    elif kind == "values":
        _rewrite_values(rng, t)
    else:
        t.CopyFrom(_random_tensor(rng, t.name))
    return f"initializer {t.name}: {kind}"


def _truncate_data(t: TensorProto) -> None:
    if t.raw_data:
        t.raw_data = t.raw_data[: len(t.raw_data) // 2]
    elif len(t.float_data):
        del t.float_data[len(t.float_data) // 2 :]
    elif len(t.int64_data):
        del t.int64_data[len(t.int64_data) // 2 :]
    else:
        t.raw_data = b"\x01"


def _rewrite_values(rng: random.Random, t: TensorProto) -> None:
    """Same dims and type, new contents: shape constants, indices and trip counts that are
    out of range, negative or astronomically large."""
    try:
        array = numpy_helper.to_array(t)
    except Exception:  # already broken by an earlier mutation
        return
    if array.dtype.kind in "iu":
        new = np.array([rng.choice(INTS) for _ in range(array.size)]).reshape(array.shape)
        new = np.clip(new, *_limits(array.dtype)).astype(array.dtype)
        t.CopyFrom(numpy_helper.from_array(new, t.name))
    elif array.dtype.kind == "f":
        fill = rng.choice([np.nan, np.inf, -np.inf, 0.0, 1e30])
        t.CopyFrom(numpy_helper.from_array(np.full_like(array, fill), t.name))


def _limits(dtype: np.dtype) -> tuple[int, int]:
    info = np.iinfo(dtype)
    return int(info.min), int(info.max)


def constant_values(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _graph(rng, model)
    constants = [n for n in graph.node if n.op_type == "Constant"]
    if not constants:
        return initializers(rng, model)
    node = rng.choice(constants)
    for a in node.attribute:
        if a.type == onnx.AttributeProto.TENSOR:
            _rewrite_values(rng, a.t)
    return f"Constant {node.name or node.output[0]}: values"


def node_order(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _graph(rng, model)
    nodes = list(graph.node)
    kind = rng.choice(["shuffle", "reverse", "delete", "duplicate"])
    if kind == "shuffle":
        rng.shuffle(nodes)
    elif kind == "reverse":
        nodes.reverse()
    elif kind == "delete" and nodes:
        nodes.pop(rng.randrange(len(nodes)))
    elif nodes:
        nodes.insert(rng.randrange(len(nodes)), rng.choice(nodes))
    del graph.node[:]
    graph.node.extend(nodes)
    return f"node order: {kind}"


def opsets(rng: random.Random, model: onnx.ModelProto) -> str:
    kind = rng.choice(["version", "version", "drop", "domain", "node_domain", "ir"])
    if kind == "version":
        for o in model.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = rng.choice([1, 6, 7, 9, 10, 11, 12, 13, 17, 21, 26, 30, 10**6, -3])
    elif kind == "drop":
        del model.opset_import[:]
    elif kind == "domain":
        model.opset_import.append(helper.make_opsetid(rng.choice(["com.x", "ai.onnx.ml"]), 1))
    elif kind == "node_domain":
        node = _node(rng, model.graph)
        if node is not None:
            node.domain = rng.choice(["com.microsoft", "ai.onnx.ml", "ai.onnx", "bogus"])
    else:
        model.ir_version = rng.choice([0, 1, 3, 99])
    return f"opset: {kind}"


def graph_io(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = model.graph
    kind = rng.choice(["elem_type", "dims", "drop_input", "drop_output", "bad_output", "kind"])
    if kind == "elem_type" and len(graph.input):
        rng.choice(graph.input).type.tensor_type.elem_type = rng.choice(ELEM_TYPES)
    elif kind == "dims" and len(graph.input):
        shape = rng.choice(graph.input).type.tensor_type.shape
        for d in shape.dim:
            d.dim_value = rng.choice([1, 2, 5, 0])
    elif kind == "drop_input" and len(graph.input):
        graph.input.remove(rng.choice(graph.input))
    elif kind == "drop_output" and len(graph.output):
        graph.output.remove(rng.choice(graph.output))
    elif kind == "bad_output" and len(graph.output):
        rng.choice(graph.output).name = "no_such_output"
    elif kind == "kind" and len(graph.input):
        value = rng.choice(graph.input)
        value.type.CopyFrom(helper.make_sequence_type_proto(value.type))
    return f"graph io: {kind}"


def cycle(rng: random.Random, model: onnx.ModelProto) -> str:
    graph = _graph(rng, model)
    nodes = [n for n in graph.node if len(n.input) and len(n.output)]
    if not nodes:
        return "cycle: no node"
    i = rng.randrange(len(nodes))
    later = nodes[rng.randrange(i, len(nodes))]
    nodes[i].input[rng.randrange(len(nodes[i].input))] = later.output[0]
    return f"cycle: {nodes[i].name or nodes[i].op_type} reads {later.output[0]}"


STRUCTURAL: list[Callable[[random.Random, onnx.ModelProto], str]] = [
    node_inputs,
    node_outputs,
    attributes,
    attributes,
    op_type,
    initializers,
    constant_values,
    constant_values,
    node_order,
    opsets,
    graph_io,
    cycle,
]
