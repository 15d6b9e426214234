"""The program as the passes rewrite it: step kinds, and a fused step in place of its group.

A Linear group (MatMul by a weight, then Add of a bias) becomes one fused step in the
program's order; a Transpose of a weight is a folded step; the Shape of a computed value is a
shape-value step. A fused call that declines (``F.linear`` takes no 1-D input) runs its
fallback, the group's own steps, in the step loop and in the generated plan alike.
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

import sonnx
from sonnx.runtime.steps import FusedStep, StepKind

RNG = np.random.default_rng(7)
W = RNG.standard_normal((4, 3)).astype(np.float32)
B = RNG.standard_normal(3).astype(np.float32)
V = RNG.standard_normal((3, 4)).astype(np.float32)


def _model() -> onnx.ModelProto:
    nodes = [
        helper.make_node("MatMul", ["x", "W"], ["xw"], name="matmul"),
        helper.make_node("Add", ["xw", "b"], ["y"], name="add"),
        helper.make_node("Transpose", ["V"], ["vt"], name="transpose"),
        helper.make_node("MatMul", ["x", "vt"], ["z"], name="matmul_v"),
        helper.make_node("Shape", ["z"], ["zs"], name="shape"),
        helper.make_node("Reshape", ["y", "zs"], ["y2"], name="reshape"),
    ]
    graph = helper.make_graph(
        nodes,
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, None)],
        [
            helper.make_tensor_value_info("y2", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("z", TensorProto.FLOAT, None),
        ],
        [numpy_helper.from_array(a, n) for a, n in ((W, "W"), (B, "b"), (V, "V"))],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _check(rep: sonnx.SingaRep, shape: tuple[int, ...]) -> None:
    x = RNG.standard_normal(shape).astype(np.float32)
    y2, z = rep.run([x])
    np.testing.assert_allclose(y2.numpy(), x @ W + B, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(z.numpy(), x @ V.T, rtol=1e-5, atol=1e-6)


def test_the_passes_give_each_step_its_kind_and_fuse_a_group_into_one_step() -> None:
    program = sonnx.prepare(_model()).program
    kinds = {step.info.name: step.kind for step in program.steps}
    assert kinds == {
        "matmul": StepKind.RUN,
        "add": StepKind.RUN,
        "transpose": StepKind.FOLDED,
        "matmul_v": StepKind.RUN,
        "shape": StepKind.SHAPE_VALUE,
        "reshape": StepKind.RUN,
    }
    names = [s.info.name for s in program.steps]
    matmul, add = names.index("matmul"), names.index("add")
    (fused,) = [entry for entry in program.order if type(entry) is FusedStep]
    assert fused.kind is StepKind.FUSED and fused.fusion.name == "Linear"
    assert fused.index == add and fused.fallback == (matmul, add)
    assert matmul not in program.order and add not in program.order
    assert len(program.order) == len(program.steps) - 1


def test_a_declined_fused_call_runs_its_fallback_in_the_step_loop_and_the_plan() -> None:
    rep = sonnx.prepare(_model())
    for shape in [(4,), (4,), (2, 4), (2, 4)]:  # 1-D: F.linear declines; then it takes it
        _check(rep, shape)  # each shape's first run by the step loop, the second by a plan
    (plan,) = rep.program.runner.plans.values()
    assert "_run_fused(" in plan.source and rep.program.runner.runs_plans


def test_unfusing_puts_the_groups_steps_back_in_the_order_and_drops_the_plans() -> None:
    rep = sonnx.prepare(_model())
    for _ in range(2):
        _check(rep, (3, 4))
    assert rep.program.runner.plans
    rep.program.unfuse()
    assert rep.program.order == tuple(range(len(rep.steps))) and not rep.program.fusions
    assert not rep.program.runner.plans
    for _ in range(2):
        _check(rep, (3, 4))
    (plan,) = rep.program.runner.plans.values()
    assert "_run_fused(" not in plan.source
