"""The passes over a compiled program, and fused groups that decline their inputs: the
executors then run the group's steps, each naming itself when it fails."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.errors import BadInputError
from sonnx.runtime.passes import PASSES
from sonnx.tensor import to_numpy

RNG = np.random.default_rng(0)


def _linear_model() -> onnx.ModelProto:
    """``Add(MatMul(x, W), b)``, x of any rank: the Linear fusion's pattern."""
    w = numpy_helper.from_array(RNG.standard_normal((4, 3)).astype(np.float32), "W")
    b = numpy_helper.from_array(RNG.standard_normal(3).astype(np.float32), "b")
    graph = helper.make_graph(
        [
            helper.make_node("MatMul", ["x", "W"], ["xw"], name="product"),
            helper.make_node("Add", ["xw", "b"], ["y"], name="bias"),
        ],
        "linear",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [w, b],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_the_passes_run_in_their_documented_order_and_leave_one_step_per_node() -> None:
    names = [p.name for p in PASSES]
    assert names.index("constant folding") < names.index(
        "fusions (GELU, Linear, Conv+BatchNorm+activation chains)"
    )
    rep = sonnx.prepare(_linear_model())
    assert [s.info.name for s in rep.program.steps] == ["product", "bias"]
    (fusion,) = rep.program.fusions.values()
    assert fusion.name == "Linear" and fusion.intermediates == {"xw"}


@pytest.mark.parametrize("use_plan", [False, True])
def test_a_declined_group_runs_its_steps(use_plan: bool) -> None:
    """A 1-D x is not F.linear's: the group declines and its MatMul and Add run instead, in
    the step loop and in the generated plan alike."""
    model = _linear_model()
    rep = sonnx.prepare(model)
    x = RNG.standard_normal(4).astype(np.float32)
    expected = x @ numpy_helper.to_array(model.graph.initializer[0]) + numpy_helper.to_array(
        model.graph.initializer[1]
    )
    runs = 3 if use_plan else 1  # the plan runs once the input signature's shape values are known
    for _ in range(runs):
        (y,) = rep.run([x])
        np.testing.assert_allclose(to_numpy(y), expected, rtol=1e-5, atol=1e-6)
    assert bool(rep.program.runner.plans) is use_plan


def test_a_declined_group_names_the_step_that_fails() -> None:
    rep = sonnx.prepare(_linear_model())
    with pytest.raises(BadInputError, match="product"):
        rep.run([np.ones((2, 5), np.float32)])
