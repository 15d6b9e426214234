"""A group whose intermediate an ``If`` branch reads from the outer graph is not fused: GELU's
Div-Erf-Add-Mul chain, MatMul with its bias Add, and Conv -> BatchNormalization -> Relu each
run as their nodes there, and the branch finds its value (onnxruntime runs such graphs)."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.tensor import to_numpy
from tests.onnx.export_check import ort_session


def _constant(name: str, value: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(value, np.float32), name)


def _group(kind: str) -> tuple[list[onnx.NodeProto], list[onnx.TensorProto], str, list[int]]:
    """The group's nodes (output ``y0``), its initializers, the intermediate the branch reads,
    and the input's shape."""
    rng = np.random.default_rng(0)
    if kind == "gelu":
        nodes = [
            helper.make_node("Div", ["x", "sqrt2"], ["d"]),
            helper.make_node("Erf", ["d"], ["e"]),
            helper.make_node("Add", ["e", "one"], ["a"]),
            helper.make_node("Mul", ["x", "a"], ["m"]),
            helper.make_node("Mul", ["m", "half"], ["y0"]),
        ]
        inits = [_constant("sqrt2", np.sqrt(2)), _constant("one", 1), _constant("half", 0.5)]
        return nodes, inits, "e", [2, 4]
    if kind == "linear":
        nodes = [
            helper.make_node("MatMul", ["x", "w"], ["p"]),
            helper.make_node("Add", ["p", "b"], ["y0"]),
        ]
        inits = [
            _constant("w", rng.standard_normal((4, 4))),
            _constant("b", rng.standard_normal(4)),
        ]
        return nodes, inits, "p", [2, 4]
    nodes = [
        helper.make_node("Conv", ["x", "k"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("BatchNormalization", ["c", "g", "beta", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["y0"]),
    ]
    inits = [
        _constant("k", rng.standard_normal((3, 3, 3, 3))),
        _constant("g", rng.random(3) + 0.5),
        _constant("beta", rng.standard_normal(3)),
        _constant("mean", rng.standard_normal(3)),
        _constant("var", rng.random(3) + 0.5),
    ]
    return nodes, inits, "c", [1, 3, 5, 5]


def _model(kind: str) -> onnx.ModelProto:
    nodes, inits, inner, shape = _group(kind)
    out = helper.make_tensor_value_info

    def branch(name: str, source: str) -> onnx.GraphProto:
        node = helper.make_node("Identity", [source], [name])
        return helper.make_graph([node], name, [], [out(name, TensorProto.FLOAT, shape)])

    nodes.append(
        helper.make_node(
            "If", ["flag"], ["y"], then_branch=branch("t", inner), else_branch=branch("f", "y0")
        )
    )
    graph = helper.make_graph(
        nodes,
        kind,
        [out("x", TensorProto.FLOAT, shape), out("flag", TensorProto.BOOL, [])],
        [out("y", TensorProto.FLOAT, shape)],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.checker.check_model(model)
    return model


@pytest.mark.parametrize("kind", ["gelu", "linear", "conv"])
def test_a_branch_reads_a_fusable_groups_intermediate(kind: str) -> None:
    model = _model(kind)
    rep = sonnx.prepare(model)
    x = np.random.default_rng(1).standard_normal(_group(kind)[3]).astype(np.float32)
    for flag in (True, False):
        feed = {"x": x, "flag": np.array(flag)}
        expected = ort_session(model).run(None, feed)[0]
        np.testing.assert_allclose(to_numpy(rep.run(feed)[0]), expected, rtol=1e-5, atol=1e-5)
