"""An intermediate value of every kind of fused group, read from outside the group, equals
onnxruntime's: read by an ``If`` branch, a ``Loop`` body or a ``Scan`` body from the outer
graph, returned as a graph output, or asked for with ``run(output=...)``. Such a reader keeps
the group's nodes (the program's index counts subgraph bodies' reads and the graph's outputs:
:mod:`sonnx.runtime.program_index`), and without one the group fuses.

The kinds: GELU's Div-Erf-Add-Mul chain and a MatMul with its bias Add
(:mod:`sonnx.runtime.fusions`); Conv -> BatchNormalization -> Relu, Conv -> SiLU and a chain of
two Convs (:mod:`sonnx.runtime.conv_fusions`); DynamicQuantizeLinear with MatMulInteger's
chain, and with QAttention (:mod:`sonnx.runtime.quantized_fusions`); QAT's fake-quantized
QuantizeLinear -> DequantizeLinear pair (:mod:`sonnx.quantization.fake_quant`). Graph mode's
plain GEMMs (:mod:`sonnx.runtime.plain_linears`) rewrite the compiled graph of a MatMul by a
weight, not the program's steps: the linear kind's graph-mode run covers them.

Eager mode runs every kind with each reader in a model of its own. ``prepare_qat`` prepares
for training, without graph mode, so the fake-quantized pair runs eagerly only (and inference
runs its nodes). Graph-mode compiles are
slow on a small CI machine, so graph mode runs one model per kind in which an ``If``, a
``Loop`` and a ``Scan`` all read the intermediate (a graph output is a compiled segment's
output like any other), and ``output=`` on that rep (a run that stops early takes the
program's steps in either mode).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.quantization import prepare_qat
from sonnx.tensor import to_numpy
from tests.contrib_quant_helpers import int8_weights_7_bits
from tests.onnx.export_check import ort_session

RNG = np.random.default_rng(0)
FLOAT = TensorProto.FLOAT
KINDS = [
    "gelu",
    "linear",
    "conv_bn_relu",
    "conv_silu",
    "conv_chain",
    "dql_matmul_integer",
    "dql_qattention",
    "fake_quant",
]
READERS = ["if", "loop", "scan", "graph_output"]


@dataclass
class Group:
    """A fusable group's nodes (its output ``y0``), initializers and graph input ``x``, the
    intermediate the readers read, and its element type."""

    nodes: list[onnx.NodeProto]
    inits: dict[str, np.ndarray]
    shape: list[int]
    inner: str
    inner_type: int = FLOAT
    opsets: list[onnx.OperatorSetIdProto] = field(
        default_factory=lambda: [helper.make_opsetid("", 17)]
    )


def _floats(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _conv(x: str, k: str, out: str) -> onnx.NodeProto:
    return helper.make_node("Conv", [x, k], [out], pads=[1, 1, 1, 1])


@functools.cache
def _group(kind: str) -> Group:
    node = helper.make_node
    if kind == "gelu":
        nodes = [
            node("Div", ["x", "sqrt2"], ["d"]),
            node("Erf", ["d"], ["e"]),
            node("Add", ["e", "one"], ["a"]),
            node("Mul", ["x", "a"], ["m"]),
            node("Mul", ["m", "half"], ["y0"]),
        ]
        scalars = {"sqrt2": np.sqrt(2), "one": 1.0, "half": 0.5}
        return Group(nodes, {n: np.float32(v) for n, v in scalars.items()}, [2, 4], "e")
    if kind == "linear":
        nodes = [node("MatMul", ["x", "w"], ["p"]), node("Add", ["p", "b"], ["y0"])]
        return Group(nodes, {"w": _floats(4, 4), "b": _floats(4)}, [2, 4], "p")
    if kind.startswith("conv"):
        return _conv_group(kind)
    if kind == "fake_quant":  # the second pair fuses whatever reads the first's codes
        nodes = [
            node("QuantizeLinear", ["x", "s", "z"], ["q"]),
            node("DequantizeLinear", ["q", "s", "z"], ["dq"]),
            node("Relu", ["dq"], ["r"]),
            node("QuantizeLinear", ["r", "s", "z"], ["q2"]),
            node("DequantizeLinear", ["q2", "s", "z"], ["y0"]),
        ]
        inits = {"s": np.float32(0.05), "z": np.int8(3)}
        return Group(nodes, inits, [2, 4], "q", TensorProto.INT8)
    return _quantized_group(kind)


def _conv_group(kind: str) -> Group:
    node = helper.make_node
    inits = {"k": _floats(3, 3, 3, 3)}
    if kind == "conv_bn_relu":
        nodes = [
            _conv("x", "k", "c"),
            node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["n"]),
            node("Relu", ["n"], ["y0"]),
        ]
        inits |= {"g": RNG.random(3) + 0.5, "beta": _floats(3), "mean": _floats(3)}
        inits |= {"var": RNG.random(3) + 0.5}
        return Group(nodes, {n: v.astype(np.float32) for n, v in inits.items()}, [1, 3, 5, 5], "c")
    if kind == "conv_silu":
        nodes = [
            _conv("x", "k", "c"),
            node("Sigmoid", ["c"], ["s"]),
            node("Mul", ["c", "s"], ["y0"]),
        ]
        return Group(nodes, inits, [1, 3, 5, 5], "s")
    nodes = [_conv("x", "k", "c"), node("Relu", ["c"], ["r"]), _conv("r", "k2", "y0")]
    return Group(nodes, inits | {"k2": _floats(3, 3, 3, 3)}, [1, 3, 5, 5], "r")


def _quantized_group(kind: str) -> Group:
    node = helper.make_node
    if kind == "dql_matmul_integer":
        nodes = [
            node("DynamicQuantizeLinear", ["x"], ["q", "q_scale", "q_zero"]),
            node("Mul", ["q_scale", "w_scale"], ["scales"]),
            node("MatMulInteger", ["q", "w", "q_zero", "w_zero"], ["acc"]),
            node("Cast", ["acc"], ["acc_float"], to=FLOAT),
            node("Mul", ["acc_float", "scales"], ["y0"]),
        ]
        inits = {"w": int8_weights_7_bits(RNG, 4, 5), "w_scale": np.float32(0.02)}
        inits["w_zero"] = np.int8(1)
        return Group(nodes, inits, [2, 4], "acc", TensorProto.INT32)
    hidden = 4
    nodes = [
        node("DynamicQuantizeLinear", ["x"], ["q", "q_scale", "q_zero"]),
        node(
            "QAttention",
            ["q", "w", "b", "q_scale", "w_scale", "", "q_zero", "w_zero"],
            ["y0"],
            domain="com.microsoft",
            num_heads=2,
        ),
    ]
    inits = {
        "w": int8_weights_7_bits(RNG, hidden, 3 * hidden),
        "b": _floats(3 * hidden),
        "w_scale": np.float32(0.02),
        "w_zero": np.int8(0),
    }
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    return Group(nodes, inits, [1, 3, hidden], "q_scale", FLOAT, opsets)


def _readers(group: Group, readers: tuple[str, ...]) -> tuple[list, list, dict]:
    """The reader nodes, the graph outputs they add, and their initializers."""
    value = helper.make_tensor_value_info
    inner, kind = group.inner, group.inner_type

    def body(inputs: list[onnx.ValueInfoProto], outputs: list[tuple[str, str]], name: str):
        nodes = [helper.make_node("Identity", [source], [out]) for source, out in outputs]
        outs = [
            value(out, TensorProto.BOOL if out == "go_on" else kind, None) for _, out in outputs
        ]
        return helper.make_graph(nodes, name, inputs, outs)

    nodes, outputs, inits = [], [], {}
    if "if" in readers:
        then_branch = body([], [(inner, "t")], "then")
        else_branch = body([], [(inner, "f")], "else")
        nodes.append(
            helper.make_node(
                "If", ["flag"], ["by_if"], then_branch=then_branch, else_branch=else_branch
            )
        )
        outputs.append(value("by_if", kind, None))
    if "loop" in readers:
        inputs = [value("trip", TensorProto.INT64, []), value("go", TensorProto.BOOL, [])]
        loop_body = body(inputs, [("go", "go_on"), (inner, "each")], "loop_body")
        nodes.append(helper.make_node("Loop", ["trips", ""], ["by_loop"], body=loop_body))
        outputs.append(value("by_loop", kind, None))
        inits["trips"] = np.int64(2)
    if "scan" in readers:
        scan_body = body([value("xi", FLOAT, [])], [(inner, "each_scan")], "scan_body")
        nodes.append(
            helper.make_node("Scan", ["xs"], ["by_scan"], body=scan_body, num_scan_inputs=1)
        )
        outputs.append(value("by_scan", kind, None))
        inits["xs"] = np.zeros(2, np.float32)
    if "graph_output" in readers:
        outputs.append(value(inner, kind, None))
    return nodes, outputs, inits


def _model(kind: str, readers: tuple[str, ...]) -> onnx.ModelProto:
    """The group of ``kind``, its output ``y0`` a graph output, with ``readers`` of its
    intermediate (each reader's value an output of its own)."""
    group = _group(kind)
    value = helper.make_tensor_value_info
    nodes, outputs, inits = _readers(group, readers)
    graph = helper.make_graph(
        [*group.nodes, *nodes],
        kind,
        [value("x", FLOAT, group.shape), value("flag", TensorProto.BOOL, [])],
        [value("y0", FLOAT, None), *outputs],
        [numpy_helper.from_array(np.asarray(v), n) for n, v in (group.inits | inits).items()],
    )
    return helper.make_model(graph, opset_imports=group.opsets, ir_version=10)


def _prepare(kind: str, model: onnx.ModelProto) -> sonnx.SingaRep:
    return prepare_qat(model) if kind == "fake_quant" else sonnx.prepare(model)


def _feed(kind: str) -> dict[str, np.ndarray]:
    x = np.random.default_rng(1).standard_normal(_group(kind).shape).astype(np.float32)
    return {"x": x, "flag": np.array(True)}


def _check(rep: sonnx.SingaRep, model: onnx.ModelProto, kind: str) -> None:
    """Every output of ``rep`` equals onnxruntime's on ``model`` (twice: a graph-mode rep
    compiles at its first run and runs its graphs at the second)."""
    feed = _feed(kind)
    expected = ort_session(model).run(None, feed)
    names = [o.name for o in model.graph.output]
    for _ in range(2):
        got = rep.run(feed)
        for name, want, value in zip(names, expected, got, strict=True):
            np.testing.assert_allclose(
                to_numpy(value), want, rtol=1e-5, atol=1e-5, err_msg=f"{kind}: {name}"
            )


def _check_output_option(rep: sonnx.SingaRep, kind: str) -> None:
    """``run(output=intermediate)`` equals onnxruntime's value of it (as a graph output)."""
    inner = _group(kind).inner
    feed = _feed(kind)
    with_output = _model(kind, ("graph_output",))
    expected = ort_session(with_output).run([inner], feed)[0]
    (got,) = rep.run(feed, output=inner)
    np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-5, atol=1e-5, err_msg=kind)


def _group_names(rep: sonnx.SingaRep) -> list[str]:
    return [f.name for f in rep.program.fusions.values()]


@pytest.mark.parametrize("kind", KINDS)
def test_each_kind_fuses_without_a_reader_and_gives_output_option_its_intermediate(kind) -> None:
    """No reader outside the group: it fuses (so the readers below test something), and
    ``output=`` still finds its intermediate."""
    model = _model(kind, ())
    rep = _prepare(kind, model)
    assert _group_names(rep), f"{kind}: the group did not fuse"
    _check(rep, model, kind)
    _check_output_option(rep, kind)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("kind", KINDS)
def test_an_intermediate_read_from_outside_keeps_the_group_and_equals_onnxruntime(
    kind, reader
) -> None:
    model = _model(kind, (reader,))
    rep = _prepare(kind, model)
    fused = {f.final: f for f in rep.program.fusions.values()}
    inner = _group(kind).inner
    assert not any(inner in f.intermediates for f in fused.values()), _group_names(rep)
    _check(rep, model, kind)


#: The kinds graph mode runs (``prepare_qat`` has no graph mode).
GRAPH_KINDS = [k for k in KINDS if k != "fake_quant"]


def _side_by_side(kinds: list[str], readers: tuple[str, ...]) -> onnx.ModelProto:
    """One model holding each kind's model with ``readers``, its names prefixed by the kind:
    the groups come first, so graph mode compiles them as one segment."""
    parts = [onnx.compose.add_prefix(_model(kind, readers), f"{kind}/").graph for kind in kinds]
    groups = [len(_group(kind).nodes) for kind in kinds]
    nodes = [n for part, count in zip(parts, groups, strict=True) for n in part.node[:count]]
    nodes += [n for part, count in zip(parts, groups, strict=True) for n in part.node[count:]]
    graph = helper.make_graph(
        nodes,
        "side_by_side",
        [v for part in parts for v in part.input],
        [v for part in parts for v in part.output],
        [t for part in parts for t in part.initializer],
    )
    opsets = {o.domain: o for kind in kinds for o in _group(kind).opsets}
    return helper.make_model(graph, opset_imports=list(opsets.values()), ir_version=10)


def test_graph_mode_runs_read_intermediates_as_onnxruntime_does() -> None:
    """Every kind's intermediate read by an If, a Loop and a Scan, in one graph-mode model;
    and ``output=`` of each kind's intermediate on that rep."""
    model = _side_by_side(GRAPH_KINDS, ("if", "loop", "scan"))
    rep = sonnx.prepare(model, use_graph=True, compile_budget=None)
    feed = {f"{kind}/{name}": v for kind in GRAPH_KINDS for name, v in _feed(kind).items()}
    expected = ort_session(model).run(None, feed)
    names = [o.name for o in model.graph.output]
    for _ in range(2):  # the first run compiles, the second runs the compiled graphs
        for name, want, got in zip(names, expected, rep.run(feed), strict=True):
            np.testing.assert_allclose(to_numpy(got), want, rtol=1e-5, atol=1e-5, err_msg=name)
    assert rep.graph_runner is not None and "compiled" in rep.explain()
    with_outputs = _side_by_side(GRAPH_KINDS, ("graph_output",))
    inners = [f"{kind}/{_group(kind).inner}" for kind in GRAPH_KINDS]
    for name, want in zip(inners, ort_session(with_outputs).run(inners, feed), strict=True):
        (got,) = rep.run(feed, output=name)
        np.testing.assert_allclose(to_numpy(got), want, rtol=1e-5, atol=1e-5, err_msg=name)
