"""Graph mode's eager ranges run by generated plans (GraphProgram.execute_range).

The steps graph mode runs eagerly between compiled segments (a NonZero, a spent compile
budget's parts) went through the step loop on every run, while an eager rep ran its whole plan:
graph mode was slower than eager on a VITS flow stand-in. A range's first run of an input
signature goes through the step loop (it finds the range's shape values); later runs take the
range's plan, which must compute what the step loop computes, and falls back to the step loop
as a whole run's plan does. Expected values come from onnx's reference evaluator.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np
import onnx
import pytest
import torch
from onnx import helper
from onnx.reference import ReferenceEvaluator

import sonnx
from sonnx.errors import SonnxError
from sonnx.tensor import Tensor, to_numpy
from tests.runtime.graph_mode_models import compute_around_a_nonzero, one_input_model

SIZES = (2, 4, 4, 3, 2)


def _x(n: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed + n).standard_normal((n, 3)).astype(np.float32)


@pytest.fixture(scope="module")
def around_a_nonzero() -> sonnx.SingaRep:
    """Relu -> Mul compiled, NonZero eager, Cast -> ReduceSum -> Mul compiled; run at each of
    ``SIZES`` once (one compile per segment, shared by the tests)."""
    rep = sonnx.prepare(compute_around_a_nonzero(), use_graph=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NonZero runs eagerly
        for n in SIZES:
            rep.run([_x(n)])
    return rep


def test_an_eager_nonzero_between_compiled_segments_runs_by_its_range_plan(
    around_a_nonzero, monkeypatch
) -> None:
    rep = around_a_nonzero
    kinds = ["eager" if isinstance(p, int) else "compiled" for p in rep.graph_runner.segments]
    assert kinds == ["compiled", "eager", "compiled"]
    assert [key[:2] for key in rep.program.runner.range_plans] == [(2, 3)]
    assert (
        rep.program.runner.runs_plans and not rep.program.runner.plans
    )  # no whole run went eagerly
    reference = ReferenceEvaluator(compute_around_a_nonzero())

    def no_step_loop(*args: Any) -> None:
        raise AssertionError("the step loop ran")

    monkeypatch.setattr(rep.program.runner, "_step_loop", no_step_loop)
    for n in SIZES:
        (got,) = rep.run([_x(n, seed=1)])
        (expected,) = reference.run(None, {"x": _x(n, seed=1)})
        np.testing.assert_allclose(to_numpy(got), expected, rtol=1e-6)


def test_a_range_plan_equals_the_step_loop_and_keeps_what_later_steps_read(
    around_a_nonzero,
) -> None:
    program = around_a_nonzero.program
    values: dict[str, Any] = {
        **program.constants,
        "x": Tensor(data=torch.from_numpy(_x(4, seed=2))),
    }
    program.runner.execute(values, stop=2)  # what the first compiled segment computes
    by_loop = program.runner.execute(dict(values), start=2, stop=3)  # keeps every value
    by_plan = dict(values)
    program.runner.execute_range(by_plan, 2, 3)
    assert set(by_plan) == set(by_loop)  # NonZero's indices, read by the next segment
    np.testing.assert_array_equal(to_numpy(by_plan["where"]), to_numpy(by_loop["where"]))
    (plan,) = program.runner.range_plans.values()
    assert "_op2(" in plan.source and "_keep(values, 'where'" in plan.source


def _shape_in_the_middle() -> onnx.ModelProto:
    """Relu -> Shape -> Gather -> Reshape(Relu, [-1]) -> Add: a shape value in a range."""
    nodes = [
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("Shape", ["r"], ["s"], name="shape"),
        helper.make_node("ReduceProd", ["s"], ["count"], name="count", keepdims=1),
        helper.make_node("Reshape", ["r", "count"], ["flat"], name="flatten"),
        helper.make_node("Add", ["flat", "flat"], ["y"], name="double"),
    ]
    return one_input_model(nodes, "middle")


def _run_in_ranges(program: Any, x: np.ndarray, bounds: list[tuple[int, int]]) -> np.ndarray:
    """The graph's output, its steps run range by range as graph mode runs eager parts."""
    values: dict[str, Any] = {**program.constants, "x": Tensor(data=torch.from_numpy(x))}
    for start, stop in bounds:
        program.runner.execute_range(values, start, stop)
    return to_numpy(values["y"])


def test_a_range_with_shape_values_finds_them_at_its_first_run_then_runs_its_plan() -> None:
    model = _shape_in_the_middle()
    program = sonnx.prepare(model).program
    assert program.shape_value_steps == {1, 2}
    reference = ReferenceEvaluator(model)
    bounds = [(0, 1), (1, 4), (4, 5)]
    for run, n in enumerate((2, 2, 5, 5)):
        got = _run_in_ranges(program, _x(n), bounds)
        np.testing.assert_array_equal(got, reference.run(None, {"x": _x(n)})[0])
        if run == 0:  # a range without shape values has nothing to find: its plan ran at once
            assert sorted(key[:2] for key in program.runner.range_plans) == [(0, 1), (4, 5)]
    plans = program.runner.range_plans
    assert sorted(key[:2] for key in plans) == bounds
    middle = next(p for key, p in plans.items() if key[:2] == (1, 4))
    assert "known.get('count')" in middle.source  # the shape value, not its steps
    assert program.runner.runs_plans and not program.runner.plans


def test_a_failing_range_plan_falls_back_to_the_step_loop_and_plans_turn_off() -> None:
    model = _shape_in_the_middle()
    program = sonnx.prepare(model).program
    reference = ReferenceEvaluator(model)
    bounds = [(0, 1), (1, 4), (4, 5)]
    for _ in range(2):  # the first run finds the shape values, the second builds the plans
        _run_in_ranges(program, _x(3), bounds)
    key = next(key for key in program.runner.range_plans if key[:2] == (1, 4))

    def failing(values: dict[str, Any], known: dict[str, Any]) -> None:
        raise RuntimeError("a bug in the plan")

    program.runner.range_plans[key] = failing
    got = _run_in_ranges(program, _x(3, seed=4), bounds)
    np.testing.assert_array_equal(got, reference.run(None, {"x": _x(3, seed=4)})[0])
    assert not program.runner.runs_plans and not program.runner.range_plans
    got = _run_in_ranges(program, _x(4, seed=4), bounds)  # the step loop from now on
    np.testing.assert_array_equal(got, reference.run(None, {"x": _x(4, seed=4)})[0])


def test_a_range_plan_failing_where_the_step_loop_fails_too_names_the_node(monkeypatch) -> None:
    program = sonnx.prepare(_shape_in_the_middle()).program
    bounds = [(0, 1), (1, 4), (4, 5)]
    for _ in range(2):
        _run_in_ranges(program, _x(3), bounds)
    plans = program.runner.range_plans
    add = program.steps[4]

    def broken(*args: Any) -> None:
        raise RuntimeError("no kernel for these inputs")

    key = next(key for key in plans if key[:2] == (4, 5))
    program.runner.range_plans[key] = lambda values, known: (
        broken()
    )  # the plan meets the same fault
    monkeypatch.setattr(add.op, "forward", broken)
    with pytest.raises(SonnxError, match="double"):
        _run_in_ranges(program, _x(3), bounds)
    assert program.runner.runs_plans  # the step loop failed as well: the plan is not at fault
