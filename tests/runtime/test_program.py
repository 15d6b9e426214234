"""GraphProgram drops each value after the last step that reads it (unless asked to keep it).

The graph: a = Relu(x); b = Neg(a); c = Add(b, a); out = If(cond) { then: Mul(b, c) } else
{ c } — ``b``'s last reader is the If node, through its branch, not the Add.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper

import sonnx
from sonnx.tensor import Tensor, to_numpy

X = np.array([[-1.0, 2.0], [3.0, -4.0]], np.float32)


def _model() -> onnx.ModelProto:
    then_branch = helper.make_graph(
        [helper.make_node("Mul", ["b", "c"], ["then_out"])],
        "then",
        [],
        [helper.make_tensor_value_info("then_out", TensorProto.FLOAT, None)],
    )
    else_branch = helper.make_graph(
        [helper.make_node("Identity", ["c"], ["else_out"])],
        "else",
        [],
        [helper.make_tensor_value_info("else_out", TensorProto.FLOAT, None)],
    )
    nodes = [
        helper.make_node("Relu", ["x"], ["a"]),
        helper.make_node("Neg", ["a"], ["b"]),
        helper.make_node("Add", ["b", "a"], ["c"]),
        helper.make_node("If", ["cond"], ["out"], then_branch=then_branch, else_branch=else_branch),
    ]
    graph = helper.make_graph(
        nodes,
        "release",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 2]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _expected(cond: bool) -> np.ndarray:
    a = np.maximum(X, 0)
    b, c = -a, -a + a
    return b * c if cond else c


def test_values_are_dropped_after_their_last_reader_including_branch_reads() -> None:
    rep = sonnx.prepare(_model())
    schedule = rep.program.runner.schedule(keep={"out"})
    frees = [sorted(entry.frees) for entry in schedule.steps]
    assert frees == [["x"], [], ["a"], ["b", "c", "cond"]]
    inputs = {
        "x": Tensor(data=X, requires_grad=False),
        "cond": Tensor(data=np.array(True), requires_grad=False),
    }
    values = dict(inputs)
    rep.program.runner.execute(values, keep={"out"})
    assert set(values) == {"out"}
    np.testing.assert_allclose(to_numpy(values["out"]), _expected(True))


def test_run_returns_the_same_with_and_without_all_outputs() -> None:
    rep = sonnx.prepare(_model())
    for cond in (True, False):
        feeds = {"x": X, "cond": np.array(cond)}
        (out,) = rep.run(feeds)
        np.testing.assert_allclose(to_numpy(out), _expected(cond))
        every = rep.run(feeds, all_outputs=True)
        assert {"a", "b", "c", "out"} <= set(every)
        np.testing.assert_allclose(to_numpy(every["out"]), _expected(cond))
        a, x = rep.run(feeds, output="a", aux_output=["x"])
        np.testing.assert_allclose(to_numpy(a), np.maximum(X, 0))
        np.testing.assert_array_equal(to_numpy(x), X)
