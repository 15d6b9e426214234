"""The plan of a graph (sonnx.runtime.plan) computes what the step loop computes.

The first run of an input signature goes through the step loop; later runs of it through the
plan. Each test runs a model several times and holds every run to onnx's reference evaluator
(or to the first run), and checks that a plan was built and is still in use.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper, numpy_helper
from onnx.reference import ReferenceEvaluator

import sonnx
from sonnx import autograd
from sonnx.errors import BadInputError

RNG = np.random.default_rng(0)
W = RNG.standard_normal((6, 6)).astype(np.float32)


def _branch(name: str, op: str) -> onnx.GraphProto:
    """A branch reading two values of the enclosing graph."""
    return helper.make_graph(
        [helper.make_node(op, ["top", "rest"], [f"{name}_out"])],
        name,
        [],
        [helper.make_tensor_value_info(f"{name}_out", TensorProto.FLOAT, None)],
    )


def _mixed_model() -> onnx.ModelProto:
    """Identity of a weight (folded, a converter function), shape arithmetic (known shape
    values), a multi-output node with an unread output, a value nobody reads, and an If whose
    branches read the enclosing graph."""
    nodes = [
        helper.make_node("Identity", ["w"], ["w_id"]),
        helper.make_node("MatMul", ["x", "w_id"], ["h"]),
        helper.make_node("Relu", ["h"], ["unread"]),
        helper.make_node("Shape", ["h"], ["h_shape"]),
        helper.make_node("Gather", ["h_shape", "zero"], ["batch"]),
        helper.make_node("Unsqueeze", ["batch", "zero"], ["batch_1d"]),
        helper.make_node("Concat", ["batch_1d", "tail"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["h", "new_shape"], ["r"]),
        helper.make_node("Split", ["r", "halves"], ["first", "second"], axis=1),
        helper.make_node("TopK", ["first", "k"], ["top", "top_index"], axis=2),
        helper.make_node("ReduceSum", ["second", "last_axis"], ["rest"], keepdims=1),
        helper.make_node(
            "If",
            ["cond"],
            ["y"],
            then_branch=_branch("then", "Add"),
            else_branch=_branch("else", "Mul"),
        ),
    ]
    initializers = [
        numpy_helper.from_array(W, "w"),
        numpy_helper.from_array(np.array(0, np.int64), "zero"),
        numpy_helper.from_array(np.array([2, 3], np.int64), "tail"),
        numpy_helper.from_array(np.array([1, 1], np.int64), "halves"),
        numpy_helper.from_array(np.array([2], np.int64), "k"),
        numpy_helper.from_array(np.array([2], np.int64), "last_axis"),
    ]
    graph = helper.make_graph(
        nodes,
        "mixed",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6]),
            helper.make_tensor_value_info("cond", TensorProto.BOOL, []),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        initializers,
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_plan_runs_match_the_reference_on_every_kind_of_step() -> None:
    model = _mixed_model()
    rep = sonnx.prepare(model)
    reference = ReferenceEvaluator(model)
    for batch in (1, 3):
        for cond in (True, False, True):
            x = RNG.standard_normal((batch, 6)).astype(np.float32)
            feeds = {"x": x, "cond": np.array(cond)}
            (expected,) = reference.run(None, feeds)
            for _ in range(2):
                (y,) = rep.run(feeds)
                np.testing.assert_allclose(y.numpy(), expected, rtol=1e-5, atol=1e-6)
    plans = rep.program.runner.plans
    assert len(plans) == 1 and rep.program.runner.runs_plans
    (plan,) = plans.values()
    assert "del " in plan.source and "_op" in plan.source  # operators called directly
    branch = next(s for s in rep.steps if s.info.op_type == "If").attrs["then_branch"]
    assert (
        branch.program.runner.runs_plans and branch.program.runner.plans
    )  # the branch has its own plan


def _reshape_model() -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node("Reshape", ["x", "shape"], ["y"], name="the_reshape")],
        "reshape",
        [
            helper.make_tensor_value_info("x", TensorProto.FLOAT, [6]),
            helper.make_tensor_value_info("shape", TensorProto.INT64, [2]),
        ],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_an_error_in_a_plan_run_names_the_node_and_the_plan_stays_in_use() -> None:
    rep = sonnx.prepare(_reshape_model())
    x = np.arange(6, dtype=np.float32)
    good, bad = np.array([2, 3], np.int64), np.array([4, 4], np.int64)
    for _ in range(2):
        assert rep.run([x, good])[0].shape == (2, 3)
    assert rep.program.runner.plans
    # Same input signature, values the node cannot take: the plan fails, the step loop says why.
    with pytest.raises(BadInputError, match="the_reshape"):
        rep.run([x, bad])
    assert rep.run([x, np.array([3, 2], np.int64)])[0].shape == (3, 2)
    assert rep.program.runner.runs_plans


def test_training_through_the_plan_gives_the_step_loops_gradients() -> None:
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "w"], ["h"]),
            helper.make_node("Tanh", ["h"], ["y"]),
        ],
        "train",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [numpy_helper.from_array(W, "w")],
    )
    rep = sonnx.prepare(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    weight = rep.params["w"].data
    x = RNG.standard_normal((4, 6)).astype(np.float32)
    autograd.training = True
    try:
        grads = []
        for _ in range(3):
            (y,) = rep.run([x])
            grads.append(torch.autograd.grad(y.data.square().sum(), weight)[0])
    finally:
        autograd.training = False
    assert rep.program.runner.plans
    torch.testing.assert_close(grads[1], grads[0], rtol=0, atol=0)
    torch.testing.assert_close(grads[2], grads[0], rtol=0, atol=0)


def test_a_branch_plan_takes_the_enclosing_scopes_tensors_directly() -> None:
    """The If branches read ``top`` and ``rest`` from the enclosing graph: tensors when the
    branch's plan is built, so its operators get them directly, each checked at every run."""
    model = _mixed_model()
    rep = sonnx.prepare(model)
    feeds = {"x": RNG.standard_normal((2, 6)).astype(np.float32), "cond": np.array(True)}
    (expected,) = ReferenceEvaluator(model).run(None, feeds)
    for _ in range(3):
        np.testing.assert_allclose(rep.run(feeds)[0].numpy(), expected, rtol=1e-5, atol=1e-6)
    branch = next(s for s in rep.steps if s.info.op_type == "If").attrs["then_branch"]
    (plan,) = branch.program.runner.plans.values()
    assert "_op0(" in plan.source and "_run(" not in plan.source
    assert plan.source.count("is not _SonnxTensor") == 2  # one check per name read from outside


def test_a_plan_meeting_no_tensor_where_it_was_built_with_one_raises_its_assumption() -> None:
    from sonnx.onnx.values import TensorSequence
    from sonnx.runtime.plan import PlanAssumptionError, build_plan
    from sonnx.tensor import Tensor

    rep = sonnx.prepare(_mixed_model())
    branch = next(s for s in rep.steps if s.info.op_type == "If").attrs["then_branch"].program
    top, rest = (Tensor(data=np.ones((2, 3), np.float32), requires_grad=False) for _ in range(2))
    plan = build_plan(branch, frozenset(branch.output_names), {"top": top, "rest": rest})
    values = {"top": top, "rest": rest}
    plan(values, {})
    np.testing.assert_array_equal(values["then_out"].numpy(), np.full((2, 3), 2, np.float32))
    with pytest.raises(PlanAssumptionError):
        plan({"top": TensorSequence([top]), "rest": rest}, {})


def test_a_plan_leaves_out_a_folded_step_read_only_by_shape_values() -> None:
    """``Cast(q)`` of an int8 constant is read only by ``Gather(cast, batch)``, a shape value of
    the input signature: the plan reads that from the signature's known values and never
    touches the Cast (an int8 embedding table's Cast is such a step)."""
    graph = helper.make_graph(
        [
            helper.make_node("Cast", ["q"], ["table"], to=TensorProto.FLOAT, name="the_cast"),
            helper.make_node("Shape", ["x"], ["x_shape"]),
            helper.make_node("Gather", ["x_shape", "zero"], ["batch"]),
            helper.make_node("Gather", ["table", "batch"], ["row"]),
            helper.make_node("Mul", ["x", "row"], ["y"]),
        ],
        "cast_for_shapes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [
            numpy_helper.from_array(np.array([5, -3, 7, 2], np.int8), "q"),
            numpy_helper.from_array(np.array(0, np.int64), "zero"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    rep = sonnx.prepare(model)
    reference = ReferenceEvaluator(model)
    for batch in (1, 2, 3, 2):
        x = RNG.standard_normal((batch, 3)).astype(np.float32)
        for _ in range(2):
            np.testing.assert_allclose(rep.run([x])[0].numpy(), reference.run(None, {"x": x})[0])
    (plan,) = rep.program.runner.plans.values()
    cast = next(i for i, s in enumerate(rep.steps) if s.info.name == "the_cast")
    assert rep.steps[cast].foldable and f"_run({cast}," not in plan.source
    assert "known.get('row')" in plan.source and "x_shape" not in plan.source
