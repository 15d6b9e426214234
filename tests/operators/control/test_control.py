"""If, Loop, Scan and SequenceMap called directly with a subgraph written in Python (the
protocol the runtime implements), each compared with onnxruntime running the ONNX node with
the same body; only the taken branch runs and gets gradients; errors name the node."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

import sonnx
import sonnx.autograd as ag
from sonnx.engine.subgraphs import BoundSubgraph
from sonnx.engine.values import TensorSequence
from sonnx.errors import BadInputError
from sonnx.onnx.registry import operator_class
from sonnx.operators.control import If, Loop, Scan, SequenceMap
from sonnx.tensor import Tensor
from tests.operators.control.helpers import (
    BOOL,
    FLOAT,
    INT64,
    PythonSubgraph,
    graph,
    ort_run,
)

X = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
W = np.array([0.5, -1.0, 2.0], dtype=np.float32)


def t(a: np.ndarray, grad: bool = False) -> Tensor:
    return Tensor(data=np.asarray(a), requires_grad=grad, stores_grad=grad)


def test_a_python_subgraph_satisfies_the_protocol() -> None:
    assert isinstance(PythonSubgraph(lambda: [], 0, 0), BoundSubgraph)


@pytest.mark.parametrize("cond", [True, False])
def test_if_runs_only_the_taken_branch_as_onnxruntime_does(cond: bool) -> None:
    x = t(X)
    then = PythonSubgraph(lambda: [ag.add(x, t(W))], 0, 1)
    other = PythonSubgraph(lambda: [ag.mul(x, t(W))], 0, 1)
    (y,) = If(then_branch=then, else_branch=other)(t(np.array(cond)))
    branches = {
        name: graph(
            name, [helper.make_node(op, ["x", "w"], [f"{name}_y"])], [], [(f"{name}_y", FLOAT)]
        )
        for name, op in (("then", "Add"), ("else", "Mul"))
    }
    node = helper.make_node(
        "If", ["c"], ["y"], then_branch=branches["then"], else_branch=branches["else"]
    )
    w = helper.make_node("Constant", [], ["w"], value=helper.make_tensor("w", FLOAT, [3], W))
    (want,) = ort_run([w, node], {"c": np.array(cond), "x": X}, [("y", FLOAT)])
    np.testing.assert_allclose(y.numpy(), want, rtol=1e-6)
    assert (then.runs, other.runs) == ((1, 0) if cond else (0, 1))


def test_gradients_reach_only_the_branch_that_ran() -> None:
    x, w_then, w_else = t(X), t(W, grad=True), t(W * 3, grad=True)
    previous = ag.training
    ag.training = True
    try:
        (y,) = If(
            then_branch=PythonSubgraph(lambda: [ag.mul(x, w_then)], 0, 1),
            else_branch=PythonSubgraph(lambda: [ag.mul(x, w_else)], 0, 1),
        )(t(np.array(True)))
        grads = {id(p): g.numpy() for p, g in ag.backward(ag.reduce_sum(y, keepdims=0))}
    finally:
        ag.training = previous
    assert set(grads) == {id(w_then)}
    np.testing.assert_allclose(grads[id(w_then)], X.sum(axis=0), rtol=1e-6)


def test_loop_carries_and_stacks_as_onnxruntime_does() -> None:
    x = t(X)
    body = PythonSubgraph(lambda i, cond, v: [cond, ag.add(v, x), ag.identity(v)], 3, 3)
    v, scans = Loop(body=body)(t(np.array(4)), t(np.array(True)), t(np.zeros_like(X)))
    onnx_body = graph(
        "body",
        [
            helper.make_node("Identity", ["cond"], ["cond_out"]),
            helper.make_node("Add", ["v", "x"], ["v_out"]),
            helper.make_node("Identity", ["v"], ["scan"]),
        ],
        [("i", INT64, []), ("cond", BOOL, []), ("v", FLOAT, [2, 3])],
        [("cond_out", BOOL, []), ("v_out", FLOAT, [2, 3]), ("scan", FLOAT, [2, 3])],
    )
    node = helper.make_node("Loop", ["m", "c", "v0"], ["v", "scans"], body=onnx_body)
    feeds = {"m": np.array(4), "c": np.array(True), "v0": np.zeros_like(X), "x": X}
    want_v, want_scans = ort_run([node], feeds, [("v", FLOAT), ("scans", FLOAT)])
    np.testing.assert_allclose(v.numpy(), want_v, rtol=1e-6)
    np.testing.assert_allclose(scans.numpy(), want_scans, rtol=1e-6)
    assert body.runs == 4


def test_a_loop_that_never_runs_has_no_scan_output_shape() -> None:
    body = PythonSubgraph(lambda i, cond, v: [cond, v, v], 3, 3)
    loop = Loop(body=body)
    loop.name = "decode"
    with pytest.raises(BadInputError, match=r"^Loop 'decode': scan output 0 is empty because"):
        loop(t(np.array(0)), None, t(X))


def test_scan_runs_its_body_per_slice_as_onnxruntime_does() -> None:
    # a running sum forwards over the rows and a copy of each row backwards
    body = PythonSubgraph(lambda s, row: [ag.add(s, row), ag.identity(row)], 2, 2)
    scan = Scan(version=16, body=body, num_scan_inputs=1, scan_output_directions=[1])
    total, rows = scan(t(np.zeros(3, dtype=np.float32)), t(X))
    onnx_body = graph(
        "body",
        [
            helper.make_node("Add", ["s", "row"], ["s_out"]),
            helper.make_node("Identity", ["row"], ["row_out"]),
        ],
        [("s", FLOAT, [3]), ("row", FLOAT, [3])],
        [("s_out", FLOAT, [3]), ("row_out", FLOAT, [3])],
    )
    node = helper.make_node(
        "Scan", ["s0", "xs"], ["total", "rows"], body=onnx_body, num_scan_inputs=1,
        scan_output_directions=[1],
    )  # fmt: skip
    feeds = {"s0": np.zeros(3, dtype=np.float32), "xs": X}
    want_total, want_rows = ort_run([node], feeds, [("total", FLOAT), ("rows", FLOAT)])
    np.testing.assert_allclose(total.numpy(), want_total, rtol=1e-6)
    np.testing.assert_allclose(rows.numpy(), want_rows, rtol=1e-6)


def test_scan_8_scans_each_batch_row() -> None:
    body = PythonSubgraph(lambda s, item: [ag.add(s, item), ag.identity(s)], 2, 2)
    batched = np.stack([X, X * 2])  # [batch 2, sequence 2, 3]
    total, states = Scan(version=8, body=body, num_scan_inputs=1)(
        None, t(np.zeros((2, 3), dtype=np.float32)), t(batched)
    )
    np.testing.assert_allclose(total.numpy(), batched.sum(axis=1), rtol=1e-6)
    np.testing.assert_allclose(states.numpy()[:, 1], batched[:, 0], rtol=1e-6)


def test_sequence_map_runs_the_body_per_position() -> None:
    body = PythonSubgraph(lambda item, w: [ag.mul(item, w)], 2, 1)
    seq = TensorSequence([t(X[0]), t(X[1])])
    (mapped,) = SequenceMap(body=body)(seq, t(W))
    assert isinstance(mapped, TensorSequence) and body.runs == 2
    np.testing.assert_allclose(np.stack([m.numpy() for m in mapped]), X * W, rtol=1e-6)


def test_sequence_map_refuses_sequences_of_two_lengths() -> None:
    op = SequenceMap(body=PythonSubgraph(lambda a, b: [a], 2, 1))
    op.name = "pairs"
    with pytest.raises(BadInputError, match=r"SequenceMap 'pairs': input sequences differ"):
        op(TensorSequence([t(X)]), TensorSequence([t(X), t(X)]))


def test_an_imported_if_runs_its_class_on_values_through_the_runtimes_subgraphs() -> None:
    branches = [
        graph(name, [helper.make_node(op, ["x", "x"], [f"{name}_y"])], [], [(f"{name}_y", FLOAT)])
        for name, op in (("then", "Add"), ("else", "Mul"))
    ]
    node = helper.make_node("If", ["c"], ["y"], then_branch=branches[0], else_branch=branches[1])
    model = helper.make_model(
        graph("g", [node], [("c", BOOL, []), ("x", FLOAT, [2, 3])], [("y", FLOAT)]),
        opset_imports=[helper.make_opsetid("", 17)],
    )
    rep = sonnx.prepare(model)
    (step,) = rep.program.steps
    assert operator_class(step.info) is If and step.op is None  # never a forward on tensors
    assert isinstance(step.attrs["then_branch"].bind({}), BoundSubgraph)
    (y,) = rep.run([np.array(False), X])
    np.testing.assert_allclose(y.numpy(), X * X, rtol=1e-6)
