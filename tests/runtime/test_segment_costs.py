"""Graph mode compiles only what pays (:mod:`sonnx.runtime.segment_costs`): a segment of light
steps between eager ones is timed at its first run and stays eager where that is cheap; a
NonZero's count of 0 runs its segment eagerly instead of compiling a graph for that size alone;
and the first NonZero a trace stops at makes the others eager without a trace each.

The threshold is pinned in each test (``WORTH_COMPILING_S``): a segment's time on a loaded
machine must not decide what a test asserts. The value graph mode uses is measured in
bench/history.md (2026-11-29).
"""

from __future__ import annotations

import time
import warnings

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto, helper

import sonnx
from sonnx.runtime import segment_costs, symbolic_graphs
from sonnx.runtime.graph_plan_state import GraphPlan
from sonnx.runtime.segment_costs import EMPTY_INPUT, CheapSegment, timed_eager_run
from sonnx.runtime.segments import Segment, stops_alike
from sonnx.tensor import to_numpy
from tests.onnx.export_check import ort_session

GLUE = (1, 4)  # the segment between the two NonZeros


def _glue_between_nonzeros() -> onnx.ModelProto:
    """NonZero (eager) -> Cast -> Mul -> Add (light steps) -> NonZero (eager): the glue a VITS
    spline has between the NonZeros of its masks."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    nodes = [
        helper.make_node("NonZero", ["x"], ["where"], name="nonzero"),
        helper.make_node("Cast", ["where"], ["positions"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("Mul", ["positions", "positions"], ["squares"], name="square"),
        helper.make_node("Add", ["squares", "one"], ["shifted"], name="shift"),
        helper.make_node("NonZero", ["shifted"], ["again"], name="nonzero_again"),
    ]
    graph = helper.make_graph(
        nodes,
        "glue",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [
            helper.make_tensor_value_info("shifted", TensorProto.FLOAT, None),
            helper.make_tensor_value_info("again", TensorProto.INT64, None),
        ],
        [one],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _x(n: int, count: int, seed: int = 0) -> np.ndarray:
    """``n`` values of which ``count`` are not zero."""
    rng = np.random.default_rng(seed)
    x = np.zeros(n, np.float32)
    x[rng.permutation(n)[:count]] = rng.uniform(1, 2, count)
    return x


def _run(rep: sonnx.SingaRep, session, x: np.ndarray) -> None:
    """One graph-mode run, equal to onnxruntime's."""
    with warnings.catch_warnings():  # the NonZeros found while tracing are warned about
        warnings.simplefilter("ignore", RuntimeWarning)
        got = [to_numpy(y) for y in rep.run([x])]
    for g, expected in zip(got, session.run(None, {"x": x}), strict=True):
        np.testing.assert_array_equal(g, expected)


def _last_run(rep: sonnx.SingaRep) -> str:
    return next(line for line in rep.explain().splitlines() if "last run" in line)


def test_a_cheap_segment_between_eager_steps_stays_eager_until_its_inputs_grow(
    monkeypatch,
) -> None:
    monkeypatch.setattr(segment_costs, "WORTH_COMPILING_S", 0.05)
    model = _glue_between_nonzeros()
    rep, session = sonnx.prepare(model, use_graph=True), ort_session(model)
    _run(rep, session, _x(6, 3))
    runner = rep.graph_runner
    assert runner.compile_count == 0
    timed = runner.plan.cheap[GLUE]
    assert timed.elements == 3 and 0 < timed.seconds < 0.05  # the NonZero's [1, 3] positions
    parts = runner.parts()
    assert [(p.nodes[0], p.compiled) for p in parts] == [
        ("nonzero", False),
        ("cast", False),
        ("nonzero_again", False),
    ]
    assert parts[1].why_eager == timed.reason and "not worth a compile" in timed.reason
    assert "not worth a compile" in _last_run(rep) and "not worth a compile" in rep.explain()
    # Up to GROWTH times the elements, the measurement stands; past them, it is taken again.
    _run(rep, session, _x(30, 20, seed=1))
    assert runner.plan.cheap[GLUE] is timed
    _run(rep, session, _x(60, 40, seed=2))
    assert runner.plan.cheap[GLUE].elements == 40 and runner.compile_count == 0


def test_a_segment_over_the_threshold_compiles_and_a_count_of_0_runs_it_eagerly(
    monkeypatch,
) -> None:
    # Before: a first run whose NonZero found nothing compiled the segment for a count of 0
    # (a size inductor cannot make symbolic), and the next count compiled it again.
    monkeypatch.setattr(segment_costs, "WORTH_COMPILING_S", 0.0)  # nothing is cheap
    model = _glue_between_nonzeros()
    rep, session = sonnx.prepare(model, use_graph=True), ort_session(model)
    _run(rep, session, _x(6, 0))
    runner = rep.graph_runner
    assert runner.compile_count == 0 and EMPTY_INPUT in _last_run(rep)
    executed: list[int] = []
    execute = runner._execute

    def counted(values, start, stop, keep=None) -> None:
        executed.append(start)
        execute(values, start, stop, keep)

    monkeypatch.setattr(runner, "_execute", counted)
    _run(rep, session, _x(6, 3))
    assert runner.compile_count == 1 and [p.compiled for p in runner.parts()][1]
    # The glue ran eagerly twice, timed (the second time without one-off costs), and the new
    # graph's first-run check compared with that run instead of running the steps a third time.
    assert executed.count(GLUE[0]) == 2
    for n, count in ((8, 0), (9, 5), (6, 1)):
        _run(rep, session, _x(n, count, seed=n))
    assert runner.compile_count == 1 and GLUE not in runner.plan.cheap


def test_a_first_run_is_timed_once_when_cheap_and_twice_when_not(monkeypatch) -> None:
    monkeypatch.setattr(segment_costs, "WORTH_COMPILING_S", 0.05)
    segment = Segment(1, 4, ["where"], ["shifted"])
    calls: list[set[str]] = []

    def execute(delay: float):
        def run(values, start, stop, keep) -> None:
            calls.append(keep)
            time.sleep(delay)
            values["shifted"] = "computed"

        return run

    values = {"where": "given"}
    cheap = timed_eager_run(execute(0.0), segment, values)
    assert cheap.cheap and len(calls) == 1 and calls[0] == {"shifted"}
    assert cheap.values == {"where": "given", "shifted": "computed"}
    assert values == {"where": "given"}  # the run's values are a copy
    slow = timed_eager_run(execute(0.06), segment, values)
    assert not slow.cheap and len(calls) == 3 and slow.seconds >= 0.06


def test_a_cheap_segment_covers_inputs_up_to_growth_times_its_elements() -> None:
    cheap = CheapSegment(2e-4, 10)
    limit = segment_costs.GROWTH * 10
    assert cheap.covers([torch.zeros(limit - 4), torch.zeros(4)])
    assert not cheap.covers([torch.zeros(limit + 1)])
    assert CheapSegment(1e-4, 0).covers([torch.zeros(segment_costs.GROWTH)])
    assert cheap.reason.startswith("200 us eagerly on 10 input elements, not worth a compile")


def test_only_light_segments_with_eager_steps_on_both_sides_are_timed() -> None:
    program = sonnx.prepare(_glue_between_nonzeros()).program
    found = "an output shape depends on tensor values (planted)"
    plan = GraphPlan.first(program, {0: found, 4: found}, (1, 0))
    glue = [s for s in plan.segments if isinstance(s, Segment)]
    assert [(s.start, s.stop, s.timed) for s in glue] == [(1, 4, True)]
    # Without the second NonZero the same steps end the model: compiled, not timed.
    ends = GraphPlan.first(program, {0: found}, (1, 0))
    assert [(s.start, s.stop, s.timed) for s in ends.segments if isinstance(s, Segment)] == [
        (1, 5, False)
    ]
    # A verdict stays with its segment through a replan that keeps it, and explains it.
    cheap = plan.with_cheap(GLUE, CheapSegment(1e-4, 3))
    names = [step.info.name for step in program.steps]
    assert cheap.parts(names, "budget")[1].why_eager == CheapSegment(1e-4, 3).reason
    assert cheap.compiled_of_planned() == (0, 0) and plan.compiled_of_planned() == (0, 1)
    assert plan.cheap == {} and ends.with_cheap(GLUE, CheapSegment(1e-4, 3)) is ends


def test_the_first_nonzero_a_trace_stops_at_makes_every_nonzero_of_computed_values_eager(
    monkeypatch,
) -> None:
    # Before: each NonZero was found by a trace of its own (here the whole graph's stopped at
    # the first, then the rest's at the second); a 4-flow VITS duration predictor's first run
    # traced twenty times to find its twenty.
    monkeypatch.setattr(segment_costs, "WORTH_COMPILING_S", 0.05)
    traces: list[int] = []
    compile_symbolic = symbolic_graphs.compile_symbolic

    def counted(*args, **kwargs) -> str:
        traces.append(1)
        return compile_symbolic(*args, **kwargs)

    monkeypatch.setattr(symbolic_graphs, "compile_symbolic", counted)
    model = _glue_between_nonzeros()
    rep, session = sonnx.prepare(model, use_graph=True), ort_session(model)
    with pytest.warns(RuntimeWarning, match="node 'nonzero_again'"):
        rep.run([_x(6, 3)])
    assert len(traces) == 1 and sorted(rep.graph_runner.eager_steps) == [0, 4]
    _run(rep, session, _x(7, 2, seed=3))
    assert len(traces) == 1 and rep.graph_runner.compile_count == 0


def test_a_nonzero_of_shape_values_is_not_taken_for_one_of_computed_values() -> None:
    nodes = [
        helper.make_node("NonZero", ["x"], ["where"], name="of_values"),
        helper.make_node("Shape", ["x"], ["size"], name="size"),
        helper.make_node("NonZero", ["size"], ["axes"], name="of_sizes"),
        helper.make_node("Cast", ["where"], ["positions"], name="cast", to=TensorProto.FLOAT),
        helper.make_node("NonZero", ["positions"], ["again"], name="again"),
    ]
    graph = helper.make_graph(
        nodes,
        "nonzeros",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["n"])],
        [
            helper.make_tensor_value_info(name, TensorProto.INT64, None)
            for name in ("axes", "again")
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    program = sonnx.prepare(model).program
    names = [step.info.name for step in program.steps]
    found = stops_alike(program, names.index("of_values"))
    assert [names[i] for i in found] == ["of_values", "again"]
    assert stops_alike(program, names.index("cast")) == [names.index("cast")]
    # A step that runs eagerly already keeps its own reason.
    assert stops_alike(program, found[0], {found[1]}) == [found[0]]
